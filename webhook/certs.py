"""Certificates for the webhook's TLS: a private CA, serving and client certificates, as PEM bytes.

Pure functions over `cryptography`; `write_bundle()` is the only one that touches the file system
(called by `trainguard certs`). The webhook configurations carry the CA as `caBundle` (`ca_bundle()`).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import re
import secrets
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook import install_names
from webhook.errors import TrainguardError

IPAddress: TypeAlias = ipaddress.IPv4Address | ipaddress.IPv6Address
# The CA key types we can sign with (a CA brought from elsewhere may be RSA or EdDSA).
_SigningKey: TypeAlias = (
    ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey
)

# Certificates start a little in the past: a node whose clock lags the one that issued them
# would otherwise reject a fresh certificate as "not yet valid".
CLOCK_SKEW = dt.timedelta(minutes=5)

CA_CERT, CA_KEY, TLS_CERT, TLS_KEY = "ca.crt", "ca.key", "tls.crt", "tls.key"
_CLIENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


class CertificateError(TrainguardError):
    """A CA, certificate or key that cannot be used (mismatch, expiry, unreadable PEM)."""


@dataclass(frozen=True, slots=True)
class BundlePaths:
    """What `write_bundle()` wrote; `ca_created` is False when an existing CA was reused."""

    ca_cert: Path
    ca_key: Path
    tls_cert: Path
    tls_key: Path
    ca_created: bool


def make_ca(common_name: str = "trainguard-ca", days: int = 3650) -> tuple[bytes, bytes]:
    """A self-signed CA (ECDSA P-256) that signs only leaf certificates: (cert_pem, key_pem)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "trainguard"),
        ]
    )
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    builder = (
        _validity(x509.CertificateBuilder(), _check_days(days))
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        # path_length=0: this CA issues leaves only, never intermediate CAs.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(digital_signature=True, key_cert_sign=True, crl_sign=True), critical=True)
        .add_extension(ski, critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
    )
    return _pem_pair(builder.sign(key, hashes.SHA256()), key)


def issue_serving_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str | IPAddress] = (),
    days: int = 365,
) -> tuple[bytes, bytes]:
    """A TLS server certificate for `dns_names` and `ip_addresses`, signed by the CA: (cert_pem, key_pem)."""
    ips = [ipaddress.ip_address(ip) for ip in ip_addresses]
    if not dns_names and not ips:
        raise CertificateError("a serving certificate needs at least one DNS name or IP address")
    sans: list[x509.GeneralName] = [x509.DNSName(_dns_name(n)) for n in dns_names]
    sans += [x509.IPAddress(ip) for ip in ips]
    # Clients verify the SANs only; the CN is for humans reading `openssl x509 -text`. A CN holds
    # at most 64 characters: without one the subject is empty and RFC 5280 wants the SANs critical.
    cn = next((n for n in [*dns_names, *map(str, ips)] if len(n) <= 64), None)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)] if cn else [])
    san = (x509.SubjectAlternativeName(sans), cn is None)
    return _issue(ca_cert_pem, ca_key_pem, subject, days, ExtendedKeyUsageOID.SERVER_AUTH, san)


def issue_client_cert(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    common_name: str,
    organizations: Sequence[str] = (),
    days: int = 365,
) -> tuple[bytes, bytes]:
    """A TLS client certificate; Kubernetes reads CN as the user name and each O as a group."""
    if not common_name:
        raise CertificateError("a client certificate needs a common name (the user name)")
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    attrs += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return _issue(ca_cert_pem, ca_key_pem, x509.Name(attrs), days, ExtendedKeyUsageOID.CLIENT_AUTH, None)


def service_dns_names(service: str, namespace: str) -> list[str]:
    """The names a Service answers to in the cluster, shortest first."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def split_hosts(hosts: Iterable[str]) -> tuple[list[str], list[IPAddress]]:
    """Split host names from IP literals, as the SAN types differ (DNS:… versus IP:…)."""
    dns: list[str] = []
    ips: list[IPAddress] = []
    for host in hosts:
        try:
            ips.append(ipaddress.ip_address(host.strip("[]")))
        except ValueError:
            dns.append(host)
    return dns, ips


def cert_expiry(pem: bytes) -> dt.datetime:
    """When the (first) certificate in `pem` stops being valid, timezone-aware UTC."""
    return _load_cert(pem, "certificate").not_valid_after_utc


def ca_bundle(pem: bytes) -> str:
    """The webhook configurations' `caBundle`: base64 of the CA certificate(s) in `pem`, normalised."""
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError as exc:
        raise CertificateError(f"not a PEM certificate bundle: {exc}") from exc
    for cert in certs:
        if not _is_ca(cert, default=True):
            subject = cert.subject.rfc4514_string()
            raise CertificateError(f"{subject} is not a CA certificate (did you mean ca.crt?)")
    joined = b"".join(c.public_bytes(serialization.Encoding.PEM) for c in certs)
    return base64.b64encode(joined).decode("ascii")


def check_ca(ca_cert_pem: bytes, ca_key_pem: bytes) -> None:
    """Raise CertificateError unless the pair is a usable CA: key matches, CA flag set, not expired."""
    cert = _load_cert(ca_cert_pem, "CA certificate")
    key = _load_key(ca_key_pem, "CA key")
    if _spki(cert.public_key()) != _spki(key.public_key()):
        raise CertificateError("the CA key does not match the CA certificate (they are from different pairs)")
    if not _is_ca(cert, default=False):
        raise CertificateError(f"{cert.subject.rfc4514_string()} is not a CA certificate")
    if cert.not_valid_after_utc <= _now():
        raise CertificateError(f"the CA expired on {cert.not_valid_after_utc:%Y-%m-%d}")


def write_bundle(
    out_dir: str | Path,
    service: str = install_names.SERVICE,
    namespace: str = install_names.NAMESPACE,
    hosts: Iterable[str] = (),
    days: int = 365,
) -> BundlePaths:
    """Write ca.crt, ca.key, tls.crt, tls.key into `out_dir`, reusing a CA found there.

    Reusing the CA is what makes rotation safe: the new serving certificate verifies against the
    caBundle already registered with the API server. Keys are written 0600, every file atomically.
    """
    out = Path(out_dir)
    private_directory(out)
    paths = BundlePaths(out / CA_CERT, out / CA_KEY, out / TLS_CERT, out / TLS_KEY, ca_created=False)
    ca_cert_pem, ca_key_pem, created = _load_or_make_ca(paths)
    dns, ips = split_hosts(hosts)
    dns = list(dict.fromkeys([*service_dns_names(service, namespace), *dns]))
    _check_within_ca(ca_cert_pem, _check_days(days))
    cert_pem, key_pem = issue_serving_cert(ca_cert_pem, ca_key_pem, dns, ips, days)
    if created:
        _write_atomic(paths.ca_key, ca_key_pem, 0o600)
        _write_atomic(paths.ca_cert, ca_cert_pem, 0o644)
    # Key before certificate: a server that reloads on the certificate's change finds its key ready.
    _write_atomic(paths.tls_key, key_pem, 0o600)
    _write_atomic(paths.tls_cert, cert_pem, 0o644)
    return BundlePaths(paths.ca_cert, paths.ca_key, paths.tls_cert, paths.tls_key, ca_created=created)


def write_client_cert(
    out_dir: str | Path, name: str, organizations: Sequence[str] = (), days: int = 365
) -> tuple[Path, Path]:
    """NAME.crt and NAME.key in `out_dir`: a client certificate (CN NAME) signed by the CA there.

    This is what the API server presents to a webhook served with `--client-ca ca.crt`. The CA's
    serving certificate cannot stand in for it: its extended key usage is serverAuth only.
    """
    check_client_name(name)
    out = Path(out_dir)
    private_directory(out)
    ca_cert_pem, ca_key_pem, _ = _load_or_make_ca(
        BundlePaths(out / CA_CERT, out / CA_KEY, out / TLS_CERT, out / TLS_KEY, ca_created=False),
        create=False,
    )
    _check_within_ca(ca_cert_pem, _check_days(days))
    cert_pem, key_pem = issue_client_cert(ca_cert_pem, ca_key_pem, name, organizations, days)
    cert_path, key_path = out / f"{name}.crt", out / f"{name}.key"
    _write_atomic(key_path, key_pem, 0o600)
    _write_atomic(cert_path, cert_pem, 0o644)
    return cert_path, key_path


def check_client_name(name: str) -> None:
    if not _CLIENT_NAME.fullmatch(name) or name in {"ca", "tls"}:
        raise CertificateError(
            f"client certificate name {name!r}: use letters, digits, '.', '_' or '-' "
            "(not 'ca' or 'tls'); it names the files and the certificate's CN"
        )


def private_directory(path: Path) -> None:
    """`path` as a directory only its owner can change: created 0700 (with any missing parents)
    whatever the umask; an existing one that others may write to is refused.

    A directory others can write lets them swap in a key, which a rotation watcher would load.
    """
    missing: list[Path] = []
    probe = path
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=0o700)
        except FileExistsError:
            pass  # created meanwhile: checked below like any existing directory
        except OSError as exc:
            raise CertificateError(f"cannot create {directory}: {exc.strerror}") from exc
        else:
            # mkdir's mode passes through the umask, which may also remove the owner's bits.
            os.chmod(directory, 0o700)
    try:
        info = path.stat()
    except OSError as exc:
        raise CertificateError(f"cannot use {path}: {exc.strerror}") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise CertificateError(f"{path} is not a directory")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise CertificateError(
            f"{path} is writable by other users (mode {stat.S_IMODE(info.st_mode):04o}), who could "
            f"replace a key in it: `chmod go-w {path}` or choose another directory"
        )


def _load_or_make_ca(paths: BundlePaths, *, create: bool = True) -> tuple[bytes, bytes, bool]:
    have_cert, have_key = paths.ca_cert.exists(), paths.ca_key.exists()
    if have_cert != have_key:
        present, missing = (paths.ca_cert, paths.ca_key) if have_cert else (paths.ca_key, paths.ca_cert)
        raise CertificateError(
            f"{present} exists but {missing} does not: restore it, or remove {present} to create a new CA "
            "(a new CA needs the webhook configurations' caBundle updated)"
        )
    if not have_cert:
        if not create:
            raise CertificateError(
                f"no CA in {paths.ca_cert.parent}: run `trainguard certs --out {paths.ca_cert.parent}` first"
            )
        return *make_ca(), True
    try:
        cert_pem, key_pem = paths.ca_cert.read_bytes(), paths.ca_key.read_bytes()
    except OSError as exc:
        raise CertificateError(f"cannot read the CA in {paths.ca_cert.parent}: {exc.strerror}") from exc
    try:
        check_ca(cert_pem, key_pem)
    except CertificateError as exc:
        raise CertificateError(f"{paths.ca_cert}, {paths.ca_key}: {exc}") from exc
    return cert_pem, key_pem, False


def _check_within_ca(ca_cert_pem: bytes, days: int) -> None:
    # A leaf outliving its CA stops verifying when the CA expires: say so now rather than then.
    ca_end = cert_expiry(ca_cert_pem)
    if _now() + dt.timedelta(days=days) > ca_end:
        raise CertificateError(
            f"the CA expires on {ca_end:%Y-%m-%d}, before a {days}-day certificate would: "
            "use fewer --days, or create a new CA (remove ca.crt and ca.key) and update the caBundle"
        )


def _issue(
    ca_cert_pem: bytes,
    ca_key_pem: bytes,
    subject: x509.Name,
    days: int,
    usage: x509.ObjectIdentifier,
    san: tuple[x509.SubjectAlternativeName, bool] | None,
) -> tuple[bytes, bytes]:
    check_ca(ca_cert_pem, ca_key_pem)
    ca_cert = _load_cert(ca_cert_pem, "CA certificate")
    ca_key = _load_key(ca_key_pem, "CA key")
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _validity(x509.CertificateBuilder(), _check_days(days))
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # ECDHE key exchange: an EC leaf signs the handshake and never enciphers a key.
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(_authority_key_id(ca_cert, ca_key), critical=False)
    )
    if san is not None:
        builder = builder.add_extension(san[0], critical=san[1])
    return _pem_pair(builder.sign(ca_key, _signing_hash(ca_key)), key)


def _validity(builder: x509.CertificateBuilder, days: int) -> x509.CertificateBuilder:
    now = _now()
    return (
        builder.serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + dt.timedelta(days=days))
    )


def _key_usage(
    *, digital_signature: bool = False, key_cert_sign: bool = False, crl_sign: bool = False
) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=key_cert_sign,
        crl_sign=crl_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _authority_key_id(ca_cert: x509.Certificate, ca_key: _SigningKey) -> x509.AuthorityKeyIdentifier:
    try:
        ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:  # a CA brought from elsewhere without an SKI
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key())
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski)


def _signing_hash(key: _SigningKey) -> hashes.SHA256 | None:
    # Ed25519/Ed448 sign the message itself; passing a hash is an error for them.
    return None if isinstance(key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey) else hashes.SHA256()


def _is_ca(cert: x509.Certificate, *, default: bool) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:  # v1 certificates have no extensions at all
        return default


def _check_days(days: int) -> int:
    if not isinstance(days, int) or isinstance(days, bool) or days < 1:
        raise CertificateError(f"validity must be a whole number of days >= 1, got {days!r}")
    return days


def _dns_name(name: str) -> str:
    try:
        name.encode("ascii")
    except UnicodeEncodeError as exc:
        raise CertificateError(f"DNS name {name!r} must be ASCII (use its punycode A-label form)") from exc
    if not name or any(c.isspace() for c in name):
        raise CertificateError(f"invalid DNS name {name!r}")
    return name


def _load_cert(pem: bytes, what: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError as exc:
        raise CertificateError(f"the {what} is not a PEM certificate: {exc}") from exc


def _load_key(pem: bytes, what: str) -> _SigningKey:
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:  # TypeError: the key is encrypted
        raise CertificateError(f"the {what} is not an unencrypted PEM private key: {exc}") from exc
    if not isinstance(
        key,
        ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey,
    ):
        raise CertificateError(f"the {what} has an unsupported type {type(key).__name__}")
    return key


def _spki(public_key: CertificatePublicKeyTypes) -> bytes:
    return public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _pem_pair(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[bytes, bytes]:
    return (
        cert.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    # The temporary file is created with its final mode, so a key is never readable by others,
    # not even for the moment between creation and chmod; os.replace() makes the swap atomic.
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)  # the umask may have removed bits we want (never added any)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise

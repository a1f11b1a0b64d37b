"""webhook.certs: what the certificates say, that they verify, and that a real TLS handshake works."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import ipaddress
import os
import socket
import ssl
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from webhook import certs
from webhook.certs import CertificateError

SERVICE_NAMES = [
    "trainguard",
    "trainguard.trainguard-system",
    "trainguard.trainguard-system.svc",
    "trainguard.trainguard-system.svc.cluster.local",
]


# Module-scoped: making a CA costs a key generation, and every test here only reads it.
@pytest.fixture(scope="module")
def other_ca() -> tuple[bytes, bytes]:
    return certs.make_ca("someone-else")


def load(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def san(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ext.get_values_for_type(x509.DNSName), [str(ip) for ip in ext.get_values_for_type(x509.IPAddress)]


def verify_server(ca_pem: bytes, cert_pem: bytes, name: x509.DNSName | x509.IPAddress) -> None:
    """The web-PKI path validation of `cryptography` (stricter than Go's or OpenSSL's)."""
    verifier = PolicyBuilder().store(Store([load(ca_pem)])).build_server_verifier(name)
    verifier.verify(load(cert_pem), [])


# --- names ---------------------------------------------------------------------------------------


def test_service_dns_names_shortest_first() -> None:
    assert certs.service_dns_names("trainguard", "trainguard-system") == SERVICE_NAMES


@pytest.mark.parametrize(
    ("hosts", "dns", "ips"),
    [
        pytest.param(["localhost"], ["localhost"], [], id="dns"),
        pytest.param(["127.0.0.1"], [], ["127.0.0.1"], id="ipv4"),
        pytest.param(["::1", "[fe80::1]"], [], ["::1", "fe80::1"], id="ipv6-bare-and-bracketed"),
        pytest.param(["10.0.0.1", "webhook.example.com"], ["webhook.example.com"], ["10.0.0.1"], id="mixed"),
        pytest.param(["999.1.1.1"], ["999.1.1.1"], [], id="not-an-ip-is-a-name"),
    ],
)
def test_split_hosts_separates_ip_literals(hosts: list[str], dns: list[str], ips: list[str]) -> None:
    got_dns, got_ips = certs.split_hosts(hosts)
    assert (got_dns, [str(ip) for ip in got_ips]) == (dns, ips)


@pytest.mark.parametrize(
    ("dns_names", "ips"),
    [
        pytest.param(SERVICE_NAMES, [], id="service-names"),
        pytest.param(["localhost"], ["127.0.0.1", "::1"], id="local"),
        pytest.param([], ["127.0.0.1"], id="ip-only"),
    ],
)
def test_serving_cert_sans_split_dns_and_ip(
    ca: tuple[bytes, bytes], dns_names: list[str], ips: list[str]
) -> None:
    cert_pem, _ = certs.issue_serving_cert(*ca, dns_names, ips)
    assert san(load(cert_pem)) == (dns_names, ips)


def test_serving_cert_without_a_short_enough_name_has_empty_subject_and_critical_san(
    ca: tuple[bytes, bytes],
) -> None:
    long_name = "a" * 60 + ".trainguard-system.svc.cluster.local"
    cert = load(certs.issue_serving_cert(*ca, [long_name])[0])
    assert cert.subject == x509.Name([])
    assert cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).critical
    verify_server(ca[0], cert.public_bytes(serialization.Encoding.PEM), x509.DNSName(long_name))


@pytest.mark.parametrize(
    ("dns_names", "ips", "message"),
    [
        pytest.param([], [], "at least one DNS name or IP", id="no-names"),
        pytest.param(["wébhook.example"], [], "must be ASCII", id="unicode-name"),
        pytest.param(["two words"], [], "invalid DNS name", id="space"),
    ],
)
def test_serving_cert_rejects_bad_names(
    ca: tuple[bytes, bytes], dns_names: list[str], ips: list[str], message: str
) -> None:
    with pytest.raises(CertificateError, match=message):
        certs.issue_serving_cert(*ca, dns_names, ips)


# --- keys and extensions -------------------------------------------------------------------------


def test_every_key_is_ecdsa_p256(ca: tuple[bytes, bytes]) -> None:
    serving = certs.issue_serving_cert(*ca, ["trainguard"])
    client = certs.issue_client_cert(*ca, "admin")
    for cert_pem, key_pem in (ca, serving, client):
        key = serialization.load_pem_private_key(key_pem, password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        assert isinstance(key.curve, ec.SECP256R1)
        public = load(cert_pem).public_key()
        assert isinstance(public, ec.EllipticCurvePublicKey)
        assert public.public_numbers() == key.public_key().public_numbers()
        assert isinstance(load(cert_pem).signature_hash_algorithm, hashes.SHA256)


def test_ca_extensions(ca: tuple[bytes, bytes]) -> None:
    cert = load(ca[0])
    bc = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca and bc.value.path_length == 0
    ku = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert ku.critical and ku.value.key_cert_sign and ku.value.crl_sign
    assert cert.subject == cert.issuer
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "trainguard-ca"


def test_serving_cert_extensions(ca: tuple[bytes, bytes]) -> None:
    cert = load(certs.issue_serving_cert(*ca, SERVICE_NAMES)[0])
    ext = cert.extensions
    bc = ext.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and not bc.value.ca
    ku = ext.get_extension_for_class(x509.KeyUsage)
    assert ku.critical and ku.value.digital_signature
    assert not (ku.value.key_encipherment or ku.value.key_cert_sign or ku.value.content_commitment)
    assert list(ext.get_extension_for_class(x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.SERVER_AUTH]
    ca_ski = load(ca[0]).extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    aki = ext.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    assert aki.key_identifier == ca_ski.digest
    ski = ext.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert ski == x509.SubjectKeyIdentifier.from_public_key(cert.public_key())
    assert cert.issuer == load(ca[0]).subject


def test_client_cert_names_user_and_groups(ca: tuple[bytes, bytes]) -> None:
    cert = load(certs.issue_client_cert(*ca, "kube-admin", ["system:masters", "e2e"])[0])
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "kube-admin"
    assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:masters",
        "e2e",
    ]
    eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    # Path validation for client certificates wants web-PKI SANs that Kubernetes does not use:
    # check the signature and the issuer link directly.
    cert.verify_directly_issued_by(load(ca[0]))


def test_serials_are_random_and_positive(ca: tuple[bytes, bytes]) -> None:
    serials = {load(certs.issue_serving_cert(*ca, ["trainguard"])[0]).serial_number for _ in range(3)}
    assert len(serials) == 3
    assert all(0 < s < 2**159 for s in serials)


# --- validity ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "days", [pytest.param(1, id="1d"), pytest.param(30, id="30d"), pytest.param(365, id="1y")]
)
def test_days_are_honoured_and_validity_starts_in_the_past(ca: tuple[bytes, bytes], days: int) -> None:
    before = dt.datetime.now(dt.UTC)
    cert_pem, _ = certs.issue_serving_cert(*ca, ["trainguard"], days=days)
    cert = load(cert_pem)
    end = before + dt.timedelta(days=days)
    assert abs((cert.not_valid_after_utc - end).total_seconds()) < 60
    assert cert.not_valid_before_utc <= before - certs.CLOCK_SKEW + dt.timedelta(seconds=1)
    assert certs.cert_expiry(cert_pem) == cert.not_valid_after_utc
    assert certs.cert_expiry(cert_pem).tzinfo is not None


def test_ca_lasts_ten_years_by_default(ca: tuple[bytes, bytes]) -> None:
    cert = load(ca[0])
    assert (cert.not_valid_after_utc - cert.not_valid_before_utc).days == 3650


@pytest.mark.parametrize("days", [pytest.param(0, id="zero"), pytest.param(-5, id="negative")])
def test_days_must_be_positive(ca: tuple[bytes, bytes], days: int) -> None:
    with pytest.raises(CertificateError, match="days >= 1"):
        certs.issue_serving_cert(*ca, ["trainguard"], days=days)


# --- chain verification --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [pytest.param(x509.DNSName(n), id=n) for n in SERVICE_NAMES]
    + [pytest.param(x509.IPAddress(ipaddress.ip_address("127.0.0.1")), id="127.0.0.1")],
)
def test_serving_cert_verifies_against_its_ca(ca: tuple[bytes, bytes], name: Any) -> None:
    cert_pem, _ = certs.issue_serving_cert(*ca, SERVICE_NAMES, ["127.0.0.1"])
    verify_server(ca[0], cert_pem, name)


def test_serving_cert_does_not_verify_for_another_name_or_ca(
    ca: tuple[bytes, bytes], other_ca: tuple[bytes, bytes]
) -> None:
    cert_pem, _ = certs.issue_serving_cert(*ca, SERVICE_NAMES)
    with pytest.raises(VerificationError):
        verify_server(ca[0], cert_pem, x509.DNSName("evil.example.com"))
    with pytest.raises(VerificationError):
        verify_server(other_ca[0], cert_pem, x509.DNSName("trainguard"))


def test_a_ca_key_that_does_not_match_is_refused(
    ca: tuple[bytes, bytes], other_ca: tuple[bytes, bytes]
) -> None:
    with pytest.raises(CertificateError, match="does not match the CA certificate"):
        certs.issue_serving_cert(ca[0], other_ca[1], ["trainguard"])


def test_a_leaf_is_not_accepted_as_ca(ca: tuple[bytes, bytes]) -> None:
    leaf = certs.issue_serving_cert(*ca, ["trainguard"])
    with pytest.raises(CertificateError, match="not a CA certificate"):
        certs.issue_serving_cert(*leaf, ["x"])


@pytest.mark.parametrize(
    ("cert", "key", "message"),
    [
        pytest.param(b"garbage", None, "not a PEM certificate", id="cert-not-pem"),
        pytest.param(None, b"garbage", "not an unencrypted PEM private key", id="key-not-pem"),
    ],
)
def test_unreadable_ca_material_is_refused(
    ca: tuple[bytes, bytes], cert: bytes | None, key: bytes | None, message: str
) -> None:
    with pytest.raises(CertificateError, match=message):
        certs.check_ca(cert or ca[0], key or ca[1])


def test_a_foreign_rsa_ca_can_sign(tmp_path: Path) -> None:
    # A platform may bring its own CA; RSA is the common case.
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "corp-ca")])
    now = dt.datetime.now(dt.UTC)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    ca_pem = ca_cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    cert_pem, _ = certs.issue_serving_cert(ca_pem, key_pem, ["trainguard"])
    load(cert_pem).verify_directly_issued_by(ca_cert)


# --- caBundle ------------------------------------------------------------------------------------


def test_ca_bundle_is_base64_of_the_pem(ca: tuple[bytes, bytes], other_ca: tuple[bytes, bytes]) -> None:
    assert base64.b64decode(certs.ca_bundle(ca[0])) == ca[0]
    # Two CAs during a CA rotation: both stay trusted.
    assert base64.b64decode(certs.ca_bundle(ca[0] + b"\n" + other_ca[0])) == ca[0] + other_ca[0]


def test_ca_bundle_refuses_a_serving_cert(ca: tuple[bytes, bytes]) -> None:
    with pytest.raises(CertificateError, match="did you mean ca.crt"):
        certs.ca_bundle(certs.issue_serving_cert(*ca, ["trainguard"])[0])


# --- write_bundle --------------------------------------------------------------------------------


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_write_bundle_writes_four_files_with_key_modes(tmp_path: Path) -> None:
    paths = certs.write_bundle(tmp_path / "certs", hosts=["127.0.0.1", "localhost"])
    assert paths.ca_created
    assert sorted(p.name for p in (tmp_path / "certs").iterdir()) == [
        "ca.crt",
        "ca.key",
        "tls.crt",
        "tls.key",
    ]
    assert (mode(paths.ca_key), mode(paths.tls_key)) == (0o600, 0o600)
    assert (mode(paths.ca_cert), mode(paths.tls_cert)) == (0o644, 0o644)
    assert san(load(paths.tls_cert.read_bytes())) == ([*SERVICE_NAMES, "localhost"], ["127.0.0.1"])


def test_key_mode_does_not_depend_on_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        paths = certs.write_bundle(tmp_path)
    finally:
        os.umask(old)
    assert (mode(paths.tls_key), mode(paths.tls_cert)) == (0o600, 0o644)


def test_rewriting_keeps_the_ca_and_the_new_cert_verifies(tmp_path: Path) -> None:
    first = certs.write_bundle(tmp_path)
    ca_cert, ca_key, tls_cert = (
        first.ca_cert.read_bytes(),
        first.ca_key.read_bytes(),
        first.tls_cert.read_bytes(),
    )
    second = certs.write_bundle(tmp_path, days=30)
    assert not second.ca_created
    assert (second.ca_cert.read_bytes(), second.ca_key.read_bytes()) == (ca_cert, ca_key)
    assert second.tls_cert.read_bytes() != tls_cert
    for name in SERVICE_NAMES:
        verify_server(ca_cert, second.tls_cert.read_bytes(), x509.DNSName(name))
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []  # no temporary files left


def test_write_bundle_names_another_service(tmp_path: Path) -> None:
    paths = certs.write_bundle(tmp_path, service="gate", namespace="ml-platform")
    assert san(load(paths.tls_cert.read_bytes()))[0] == certs.service_dns_names("gate", "ml-platform")


@pytest.mark.parametrize(
    ("present", "message"),
    [
        pytest.param("ca.crt", "ca.key does not", id="only-cert"),
        pytest.param("ca.key", "ca.crt does not", id="only-key"),
    ],
)
def test_half_a_ca_is_refused(tmp_path: Path, ca: tuple[bytes, bytes], present: str, message: str) -> None:
    (tmp_path / present).write_bytes(ca[0] if present == "ca.crt" else ca[1])
    with pytest.raises(CertificateError, match=message):
        certs.write_bundle(tmp_path)
    assert not (tmp_path / "tls.crt").exists()


def test_a_mismatched_ca_pair_on_disk_is_refused(
    tmp_path: Path, ca: tuple[bytes, bytes], other_ca: tuple[bytes, bytes]
) -> None:
    (tmp_path / "ca.crt").write_bytes(ca[0])
    (tmp_path / "ca.key").write_bytes(other_ca[1])
    with pytest.raises(CertificateError, match=r"ca\.crt, .*ca\.key: the CA key does not match"):
        certs.write_bundle(tmp_path)


def test_a_cert_outliving_its_ca_is_refused(tmp_path: Path) -> None:
    ca_cert, ca_key = certs.make_ca(days=10)
    (tmp_path / "ca.crt").write_bytes(ca_cert)
    (tmp_path / "ca.key").write_bytes(ca_key)
    with pytest.raises(CertificateError, match="before a 365-day certificate would"):
        certs.write_bundle(tmp_path)
    certs.write_bundle(tmp_path, days=5)


# --- a real TLS handshake ------------------------------------------------------------------------


@contextlib.contextmanager
def tls_server(cert: Path, key: Path, client_ca: Path | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """A one-connection TLS server on 127.0.0.1; the dict receives what the server saw."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    if client_ca is not None:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(client_ca)
    seen: dict[str, Any] = {}
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)

    def serve() -> None:
        try:
            conn, _ = listener.accept()
            with conn, ctx.wrap_socket(conn, server_side=True) as tls:
                seen["peer"] = tls.getpeercert()
                tls.sendall(b"ok")
        except OSError as exc:  # ssl.SSLError included: the client refused us, as a test wanted
            seen["error"] = exc

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], seen
    finally:
        thread.join(10)
        listener.close()


def client_context(ca: Path, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> certs.BundlePaths:
    return certs.write_bundle(tmp_path_factory.mktemp("certs"), hosts=["127.0.0.1", "localhost"])


@pytest.mark.parametrize("server_hostname", [*SERVICE_NAMES, "localhost", "127.0.0.1"])
def test_tls_handshake_verifies_the_server_by_name(bundle: certs.BundlePaths, server_hostname: str) -> None:
    with tls_server(bundle.tls_cert, bundle.tls_key) as (port, _):
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        with client_context(bundle.ca_cert).wrap_socket(raw, server_hostname=server_hostname) as tls:
            assert tls.version() in ("TLSv1.2", "TLSv1.3")
            assert tls.recv(2) == b"ok"


def test_tls_handshake_fails_for_a_name_not_in_the_cert(bundle: certs.BundlePaths) -> None:
    with tls_server(bundle.tls_cert, bundle.tls_key) as (port, seen):
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        with pytest.raises(ssl.SSLCertVerificationError, match="match"), raw:
            client_context(bundle.ca_cert).wrap_socket(raw, server_hostname="evil.example.com")
    assert "error" in seen


def test_mutual_tls_with_a_client_cert(bundle: certs.BundlePaths, tmp_path: Path) -> None:
    cert_pem, key_pem = certs.issue_client_cert(
        bundle.ca_cert.read_bytes(), bundle.ca_key.read_bytes(), "kube-apiserver", ["system:masters"]
    )
    (tmp_path / "client.crt").write_bytes(cert_pem)
    (tmp_path / "client.key").write_bytes(key_pem)
    with tls_server(bundle.tls_cert, bundle.tls_key, client_ca=bundle.ca_cert) as (port, seen):
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        ctx = client_context(bundle.ca_cert, tmp_path / "client.crt", tmp_path / "client.key")
        with ctx.wrap_socket(raw, server_hostname="trainguard.trainguard-system.svc") as tls:
            assert tls.recv(2) == b"ok"
    subject = dict(item for rdn in seen["peer"]["subject"] for item in rdn)
    assert subject == {"commonName": "kube-apiserver", "organizationName": "system:masters"}


@pytest.mark.parametrize(
    ("name", "ignored"),
    [
        pytest.param("ca.key", True, id="ca-key"),
        pytest.param("tls.key", True, id="tls-key"),
        pytest.param("tls.crt", True, id="tls-crt"),
        pytest.param("README.md", False, id="readme"),
        pytest.param(".gitignore", False, id="gitignore"),
    ],
)
def test_certs_dir_keeps_only_its_readme_in_git(name: str, ignored: bool) -> None:
    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", f"certs/{name}"], cwd=root, timeout=30, check=False
    )
    assert result.returncode in (0, 1), "git check-ignore failed"
    assert (result.returncode == 0) is ignored

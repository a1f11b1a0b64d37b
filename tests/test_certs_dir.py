"""`trainguard certs --out DIR`: DIR is the owner's alone whatever the umask, and client certificates.

Run as a subprocess under the umask a careless shell has (000): the modes are the command's doing.
"""

from __future__ import annotations

import os
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

REPO = Path(__file__).resolve().parents[1]


def certs_cli(*args: str, umask: int = 0o000) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "certs", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=lambda: os.umask(umask),  # the child's umask only
    )


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(
    ("out", "umask"),
    [
        pytest.param("new", 0o000, id="new-dir-umask-000"),
        pytest.param("a/b/new", 0o000, id="new-parents-umask-000"),
        pytest.param("new", 0o277, id="umask-removing-the-owners-write-bit"),
    ],
)
def test_the_directory_and_keys_are_private_whatever_the_umask(tmp_path: Path, out: str, umask: int) -> None:
    target = tmp_path / out
    result = certs_cli("--out", str(target), "--client-cert", "kube-apiserver", umask=umask)
    assert result.returncode == 0, result.stderr
    created = [target, *[p for p in target.parents if p.is_relative_to(tmp_path) and p != tmp_path]]
    assert {str(p.relative_to(tmp_path)): mode(p) for p in created} == {
        str(p.relative_to(tmp_path)): 0o700 for p in created
    }
    files = {p.name: mode(p) for p in target.iterdir()}
    assert files == {
        "ca.crt": 0o644,
        "ca.key": 0o600,
        "tls.crt": 0o644,
        "tls.key": 0o600,
        "kube-apiserver.crt": 0o644,
        "kube-apiserver.key": 0o600,
    }


@pytest.mark.parametrize("dir_mode", [0o777, 0o770, 0o722], ids=["world-writable", "group-writable", "go-w"])
def test_a_directory_others_may_write_is_refused(tmp_path: Path, dir_mode: int) -> None:
    target = tmp_path / "shared"
    target.mkdir()
    target.chmod(dir_mode)
    result = certs_cli("--out", str(target))
    assert result.returncode == 2
    assert str(target) in result.stderr and "writable by other users" in result.stderr
    assert "Traceback" not in result.stderr
    assert list(target.iterdir()) == []


def test_the_client_certificate_is_for_client_auth_and_verifies_against_the_ca(tmp_path: Path) -> None:
    result = certs_cli("--out", str(tmp_path / "c"), "--client-cert", "kube-apiserver")
    assert result.returncode == 0, result.stderr
    assert "kube-apiserver.crt" in result.stdout
    cert = x509.load_pem_x509_certificate((tmp_path / "c" / "kube-apiserver.crt").read_bytes())
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "kube-apiserver"
    usage = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usage) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    # Issued by the CA in the same directory: a context trusting ca.crt accepts the pair.
    ctx = ssl.create_default_context(cafile=str(tmp_path / "c" / "ca.crt"))
    ctx.load_cert_chain(tmp_path / "c" / "kube-apiserver.crt", tmp_path / "c" / "kube-apiserver.key")


def test_a_second_run_reuses_the_ca_for_the_client_certificate(tmp_path: Path) -> None:
    assert certs_cli("--out", str(tmp_path / "c")).returncode == 0
    ca_before = (tmp_path / "c" / "ca.crt").read_bytes()
    result = certs_cli("--out", str(tmp_path / "c"), "--client-cert", "apiserver")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "c" / "ca.crt").read_bytes() == ca_before
    cert = x509.load_pem_x509_certificate((tmp_path / "c" / "apiserver.crt").read_bytes())
    assert cert.issuer == x509.load_pem_x509_certificate(ca_before).subject


@pytest.mark.parametrize(
    "name", ["ca", "tls", "../evil", "a b", ""], ids=["ca", "tls", "path", "space", "empty"]
)
def test_a_bad_client_name_exits_2_before_writing(tmp_path: Path, name: str) -> None:
    result = certs_cli("--out", str(tmp_path / "c"), "--client-cert", name)
    assert result.returncode == 2, result.stdout
    assert "client certificate name" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "c").exists()

"""`trainguard certs`: files written, what it prints, CA reuse, and user errors as exit code 2."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from cryptography import x509

from webhook.cli import EXIT_ERROR, main


def sans(path: Path) -> tuple[list[str], list[str]]:
    cert = x509.load_pem_x509_certificate(path.read_bytes())
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ext.get_values_for_type(x509.DNSName), [str(ip) for ip in ext.get_values_for_type(x509.IPAddress)]


def test_writes_ca_and_serving_cert_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "certs"
    assert main(["certs", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out / 'ca.crt'} and {out / 'ca.key'} (new CA)" in printed
    assert f"wrote {out / 'tls.crt'} and {out / 'tls.key'}, valid until" in printed
    assert "trainguard.trainguard-system.svc.cluster.local" in printed
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("args", "dns", "ips"),
    [
        pytest.param(
            [],
            [
                "trainguard",
                "trainguard.trainguard-system",
                "trainguard.trainguard-system.svc",
                "trainguard.trainguard-system.svc.cluster.local",
            ],
            [],
            id="defaults",
        ),
        pytest.param(
            ["--service", "gate", "--namespace", "ml", "--host", "127.0.0.1", "--host", "localhost"],
            ["gate", "gate.ml", "gate.ml.svc", "gate.ml.svc.cluster.local", "localhost"],
            ["127.0.0.1"],
            id="service-namespace-and-hosts",
        ),
        pytest.param(["--host", "::1"], None, ["::1"], id="ipv6-host"),
    ],
)
def test_names_in_the_certificate(
    tmp_path: Path, args: list[str], dns: list[str] | None, ips: list[str]
) -> None:
    assert main(["certs", "--out", str(tmp_path), *args]) == 0
    got_dns, got_ips = sans(tmp_path / "tls.crt")
    assert got_ips == ips
    if dns is not None:
        assert got_dns == dns


def test_days(tmp_path: Path) -> None:
    assert main(["certs", "--out", str(tmp_path), "--days", "7"]) == 0
    cert = x509.load_pem_x509_certificate((tmp_path / "tls.crt").read_bytes())
    assert round((cert.not_valid_after_utc - cert.not_valid_before_utc).total_seconds() / 86400) == 7


def test_second_run_reuses_the_ca(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "--out", str(tmp_path)]) == 0
    ca = (tmp_path / "ca.crt").read_bytes()
    capsys.readouterr()
    assert main(["certs", "--out", str(tmp_path)]) == 0
    assert "reused the CA" in capsys.readouterr().out
    assert (tmp_path / "ca.crt").read_bytes() == ca


def test_a_broken_ca_in_the_directory_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "ca.crt").write_text("not a certificate")
    (tmp_path / "ca.key").write_text("not a key")
    assert main(["certs", "--out", str(tmp_path)]) == EXIT_ERROR
    err = capsys.readouterr().err
    assert err.startswith("trainguard: error: ") and "ca.crt" in err and "not a PEM certificate" in err
    assert not (tmp_path / "tls.crt").exists()


@pytest.mark.parametrize(
    "args",
    [
        pytest.param([], id="missing-out"),
        pytest.param(["--out", "x", "--days", "0"], id="zero-days"),
        pytest.param(["--out", "x", "--days", "a year"], id="days-not-a-number"),
    ],
)
def test_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["certs", *args])
    assert exc.value.code == EXIT_ERROR
    assert "usage:" in capsys.readouterr().err

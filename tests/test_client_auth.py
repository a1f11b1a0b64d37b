"""Mutual TLS (`serve --client-ca`): admissions need a client certificate from that CA, probes do not.

A real server on 127.0.0.1 (as in test_server_tls.py); clients present a certificate from the
client CA, none, one from another CA, or the server's own serving certificate.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.test_server_tls import REVIEW, running, settings_for, url, wait_for
from webhook import certs
from webhook.cli import main as cli_main
from webhook.serve.server import WebhookServer, build
from webhook.serve.settings import ServerError

CLIENT = "kube-apiserver"


@pytest.fixture
def files(files: Path) -> Path:
    certs.write_client_cert(files / "certs", CLIENT, days=2)
    return files


def client(files: Path, cert: tuple[Path, Path] | None) -> httpx.Client:
    ctx = ssl.create_default_context(cafile=str(files / "certs" / "ca.crt"))
    if cert is not None:
        ctx.load_cert_chain(*cert)
    return httpx.Client(verify=ctx, timeout=10)


def other_ca_cert(tmp_path: Path) -> tuple[Path, Path]:
    other = tmp_path / "other"
    certs.write_bundle(other)
    return certs.write_client_cert(other, CLIENT, days=2)


def request(http: httpx.Client, server: WebhookServer, path: str) -> int:
    if path in ("/validate", "/mutate"):
        response = http.post(url(server, path), content=REVIEW, headers={"content-type": "application/json"})
    else:
        response = http.get(url(server, path))
    return response.status_code


@pytest.mark.parametrize(
    ("path", "with_cert", "without_cert"),
    [
        pytest.param("/validate", 200, 401, id="validate-needs-a-certificate"),
        pytest.param("/mutate", 200, 401, id="mutate-needs-a-certificate"),
        pytest.param("/healthz", 200, 200, id="healthz-open-to-the-kubelet"),
        pytest.param("/readyz", 200, 200, id="readyz-open-to-the-kubelet"),
        pytest.param("/metrics", 200, 200, id="metrics-left-to-the-network-policy"),
    ],
)
def test_routes_with_and_without_a_client_certificate(
    files: Path, path: str, with_cert: int, without_cert: int
) -> None:
    pair = (files / "certs" / f"{CLIENT}.crt", files / "certs" / f"{CLIENT}.key")
    with (
        running(settings_for(files, client_ca=str(files / "certs" / "ca.crt"))) as server,
        client(files, pair) as trusted,
        client(files, None) as anonymous,
    ):
        assert request(trusted, server, path) == with_cert
        assert request(anonymous, server, path) == without_cert


@pytest.mark.parametrize(
    ("path", "with_cert", "without_cert"),
    [
        pytest.param("/metrics", 200, 200, id="metrics-open-to-a-scraper-without-a-certificate"),
        pytest.param("/validate", 404, 404, id="no-admission-on-the-metrics-port"),
    ],
)
def test_with_a_metrics_port_scrapers_need_no_certificate_there(
    files: Path, path: str, with_cert: int, without_cert: int
) -> None:
    pair = (files / "certs" / f"{CLIENT}.crt", files / "certs" / f"{CLIENT}.key")
    settings = settings_for(files, client_ca=str(files / "certs" / "ca.crt"), metrics_port=0)
    with (
        running(settings) as server,
        client(files, pair) as trusted,
        client(files, None) as anonymous,
    ):
        at = f"https://127.0.0.1:{server.metrics_port}{path}"

        def status(http: httpx.Client) -> int:
            if path == "/metrics":
                return http.get(at).status_code
            return http.post(at, content=REVIEW, headers={"content-type": "application/json"}).status_code

        assert (status(trusted), status(anonymous)) == (with_cert, without_cert)


def test_the_refusal_says_what_is_missing(files: Path) -> None:
    with (
        running(settings_for(files, client_ca=str(files / "certs" / "ca.crt"))) as server,
        client(files, None) as anonymous,
    ):
        response = anonymous.post(url(server, "/validate"), content=REVIEW)
    assert response.status_code == 401
    assert response.json()["reason"] == "Unauthorized"
    assert "client certificate" in response.json()["message"]


@pytest.mark.parametrize(
    "presented",
    [
        pytest.param("other-ca", id="certificate-from-another-ca"),
        pytest.param("serving", id="the-serving-certificate-is-not-a-client-certificate"),
    ],
)
def test_a_certificate_that_does_not_verify_ends_the_handshake(
    files: Path, tmp_path: Path, presented: str
) -> None:
    pair = (
        other_ca_cert(tmp_path)
        if presented == "other-ca"
        else (files / "certs" / "tls.crt", files / "certs" / "tls.key")
    )
    with (
        running(settings_for(files, client_ca=str(files / "certs" / "ca.crt"))) as server,
        client(files, pair) as untrusted,
        # TLS 1.3 reports the server's alert on the first read, not in the handshake.
        pytest.raises((httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError)),
    ):
        request(untrusted, server, "/validate")


def test_without_client_ca_no_certificate_is_asked_for(files: Path) -> None:
    with running(settings_for(files)) as server, client(files, None) as anonymous:
        assert request(anonymous, server, "/validate") == 200


def test_a_rotated_client_ca_is_trusted_without_a_restart(files: Path, tmp_path: Path) -> None:
    client_ca = tmp_path / "client-ca.crt"
    client_ca.write_bytes((files / "certs" / "ca.crt").read_bytes())
    new_pair = other_ca_cert(tmp_path)
    with running(settings_for(files, client_ca=str(client_ca))) as server:
        with client(files, new_pair) as new_client, pytest.raises(httpx.HTTPError):
            request(new_client, server, "/validate")
        # The operator appends the new CA to the bundle (overlap), as for the serving CA.
        client_ca.write_bytes(client_ca.read_bytes() + (tmp_path / "other" / "ca.crt").read_bytes())

        def accepted() -> bool:
            try:
                with client(files, new_pair) as new_client:
                    return request(new_client, server, "/validate") == 200
            except httpx.HTTPError:
                return False

        wait_for(accepted, "the new client CA to be trusted")


@pytest.mark.parametrize(
    ("content", "words"),
    [
        pytest.param(None, "no such file", id="missing"),
        pytest.param("leaf", "not a CA certificate", id="a-leaf-certificate"),
        pytest.param("garbage", "not a PEM certificate", id="not-pem"),
    ],
)
def test_an_unusable_client_ca_stops_the_start(
    files: Path, tmp_path: Path, content: str | None, words: str
) -> None:
    path = tmp_path / "client-ca.pem"
    if content == "leaf":
        path.write_bytes((files / "certs" / "tls.crt").read_bytes())
    elif content == "garbage":
        path.write_text("not a certificate\n")
    with pytest.raises(ServerError, match=words) as raised:
        build(settings_for(files, client_ca=str(path)))
    assert "--client-ca" in str(raised.value)


def test_serve_exits_2_naming_the_option(files: Path, tmp_path: Path) -> None:
    from tests.test_server_tls import serve_argv

    path = tmp_path / "client-ca.pem"
    path.write_text("not a certificate\n")
    result = subprocess.run(
        [sys.executable, "-m", "webhook", *serve_argv(files, "--port", "0", "--client-ca", str(path))],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2
    assert "--client-ca" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--inject-ca-bundle"], "--inject-ca-bundle needs --ca-bundle", id="inject-without-anything"
        ),
        pytest.param(
            ["--inject-ca-bundle", "--ca-bundle", "CA"], "cluster access", id="inject-without-cluster-access"
        ),
        pytest.param(["--in-cluster", "--inject-ca-bundle"], "--ca-bundle", id="inject-without-ca"),
    ],
)
def test_serve_refuses_ca_bundle_injection_it_cannot_do(
    files: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    from tests.test_server_tls import serve_argv

    args = [str(files / "certs" / "ca.crt") if a == "CA" else a for a in args]
    assert cli_main([*serve_argv(files, *args), "--port", "0"]) == 2
    assert message in capsys.readouterr().err

"""Mutual TLS end to end: the real kube-apiserver presents a client certificate to `serve --client-ca`.

The API server of this module is its own (the session's has no admission configuration): it starts
with `--admission-control-config-file`, whose ValidatingAdmissionWebhook and MutatingAdmissionWebhook
plugins read a kubeconfig (`WebhookAdmissionConfiguration.kubeConfigFile`) holding, for the
webhook's host:port, the client certificate `trainguard certs --client-cert kube-apiserver` issued.
Its admission calls are answered; a client with plain TLS and no certificate gets 401, and one with
a certificate from another CA does not get through the handshake.
"""

from __future__ import annotations

import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from .binaries import Binaries
from .controlplane import HOST, ControlPlane, free_port
from .webhook_server import (
    IMAGE,
    WebhookServer,
    _checked,
    pod,
    trainguard,
)

pytestmark = pytest.mark.e2e

NAMESPACE = "mtls-team"
CLIENT = "kube-apiserver"
REVIEW = (
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":'
    b'{"group":"","version":"v1","kind":"Pod"},"resource":{"group":"","version":"v1","resource":"pods"},'
    b'"operation":"CREATE","namespace":"mtls-team","userInfo":{"username":"u"},"object":'
    b'{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"mtls-team"},'
    b'"spec":{"containers":[{"name":"c","image":"i"}]}}}}'
)


class ClientCAServer(WebhookServer):
    """`trainguard serve` with `--client-ca`, on a port chosen before the API server starts."""

    def __init__(self, *, client_ca: Path, port: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.client_ca = client_ca
        self.port = port

    def argv(self) -> list[str]:
        return [*super().argv(), "--client-ca", str(self.client_ca)]


@dataclass
class Mtls:
    plane: ControlPlane
    server: ClientCAServer
    certs: Path


def admission_config(directory: Path, certs: Path, port: int) -> Path:
    """The API server's admission configuration and the kubeconfig it names, for HOST:port."""
    kubeconfig = directory / "webhook-kubeconfig.yaml"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                # Keyed by the webhook's host:port, as the API server looks its credentials up.
                "users": [
                    {
                        "name": f"{HOST}:{port}",
                        "user": {
                            "client-certificate": str(certs / f"{CLIENT}.crt"),
                            "client-key": str(certs / f"{CLIENT}.key"),
                        },
                    }
                ],
            }
        ),
        encoding="utf-8",
    )
    plugin = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "WebhookAdmissionConfiguration",
        "kubeConfigFile": str(kubeconfig),
    }
    path = directory / "admission-config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apiserver.config.k8s.io/v1",
                "kind": "AdmissionConfiguration",
                "plugins": [
                    {"name": "ValidatingAdmissionWebhook", "configuration": plugin},
                    {"name": "MutatingAdmissionWebhook", "configuration": plugin},
                ],
            }
        ),
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="module")
def mtls(e2e_binaries: Binaries, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mtls]:
    workdir = tmp_path_factory.mktemp("mtls")
    certs = workdir / "certs"
    _checked(
        trainguard("certs", "--out", str(certs), "--host", HOST, "--client-cert", CLIENT), "trainguard certs"
    )
    port = free_port()
    config = admission_config(workdir, certs, port)
    plane = ControlPlane(e2e_binaries, extra_apiserver_flags=[f"--admission-control-config-file={config}"])
    plane.start()
    server = ClientCAServer(
        client_ca=certs / "ca.crt",
        port=port,
        certs=certs,
        config=workdir / "platform.yaml",
        kubeconfig=plane.kubeconfig,
        log=workdir / "serve.log",
    )
    (workdir / "platform.yaml").write_text("apiVersion: trainguard.dev/v1alpha1\nkind: PlatformConfig\n")
    try:
        plane.kubectl("create", "namespace", NAMESPACE)
        server.start()
        rendered = _checked(
            trainguard("webhook-config", "--certs", str(certs), "--url", server.url, "-o", "yaml"),
            "trainguard webhook-config",
        ).stdout
        plane.kubectl("apply", "-f", "-", input=rendered)
        yield Mtls(plane, server, certs)
    finally:
        try:
            server.stop()
        finally:
            server.kill()
            plane.stop()


def dry_run_create(plane: ControlPlane, manifest: dict[str, Any]) -> tuple[int, str, str]:
    result = plane.kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=yaml.safe_dump(manifest), check=False
    )
    return result.returncode, result.stdout, result.stderr


def wait_until_called(setup: Mtls, timeout: float = 30.0) -> None:
    """Until the API server's informer has the configurations and a call reached the webhook."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, _, stderr = dry_run_create(setup.plane, spot_pod())
        if code != 0 and "checkpoint" in stderr:
            return
        time.sleep(0.2)
    pytest.fail(f"the API server never reached the webhook:\n{setup.server.log_tail()}")


def spot_pod() -> dict[str, Any]:
    return pod("spot", NAMESPACE, gpus=1, labels={"trainguard.dev/tier": "preemptible"})


def test_the_api_server_authenticates_with_its_client_certificate(mtls: Mtls) -> None:
    wait_until_called(mtls)
    code, _, stderr = dry_run_create(mtls.plane, spot_pod())
    assert code != 0 and "denied the request" in stderr and "checkpoint" in stderr, stderr
    code, stdout, stderr = dry_run_create(mtls.plane, pod("ok", NAMESPACE, gpus=1))
    assert code == 0, stderr
    created = yaml.safe_load(stdout)
    assert created["metadata"]["labels"]["trainguard.dev/class"] == "A"  # the mutating call too
    assert created["spec"]["containers"][0]["image"] == IMAGE
    assert mtls.server.admission_calls() >= 3  # validate and mutate, each answered over mTLS


def post_validate(setup: Mtls, cert: tuple[Path, Path] | None) -> int:
    context = ssl.create_default_context(cafile=str(setup.certs / "ca.crt"))
    if cert is not None:
        context.load_cert_chain(*cert)
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    request = urllib.request.Request(
        setup.server.url + "/validate",
        data=REVIEW,
        headers={"content-type": "application/json"},
        method="POST",
    )
    try:
        with opener.open(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


@pytest.mark.parametrize(
    ("who", "status"),
    [
        pytest.param("plain-tls", 401, id="no-client-certificate-401"),
        pytest.param("client-certificate", 200, id="the-api-servers-certificate-200"),
    ],
)
def test_a_client_is_answered_by_its_certificate(mtls: Mtls, who: str, status: int) -> None:
    cert = (mtls.certs / f"{CLIENT}.crt", mtls.certs / f"{CLIENT}.key") if who != "plain-tls" else None
    assert post_validate(mtls, cert) == status


def test_a_certificate_from_another_ca_fails_the_handshake(mtls: Mtls, tmp_path: Path) -> None:
    other = tmp_path / "other"
    _checked(trainguard("certs", "--out", str(other), "--client-cert", CLIENT), "trainguard certs")
    with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
        post_validate(mtls, (other / f"{CLIENT}.crt", other / f"{CLIENT}.key"))


def test_the_kubelet_probes_need_no_certificate(mtls: Mtls) -> None:
    assert mtls.server.get("/readyz")[0] == 200
    assert mtls.server.get("/healthz")[0] == 200

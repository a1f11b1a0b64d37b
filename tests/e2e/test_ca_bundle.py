"""`serve --inject-ca-bundle` as the install runs it: the service account's own RBAC, nothing more.

The configurations are created by the operator (here: `trainguard webhook-config` without a CA,
applied as admin); the server runs with a token of the service account `trainguard`, bound to the
ClusterRole of `kubectl kustomize deploy/`, and writes the CA into both caBundles. The API server
then verifies the webhook with it and its calls are answered. Configurations that do not exist are
never created: the server says what is missing.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from .controlplane import ControlPlane
from .waiting import wait_for
from .webhook_server import (
    CONFIGURATION_NAME,
    REPO_ROOT,
    SYSTEM_NS,
    WebhookServer,
    _checked,
    pod,
    trainguard,
)

pytestmark = pytest.mark.e2e

NAMESPACE = "cabundle-team"
KINDS = ("validatingwebhookconfiguration", "mutatingwebhookconfiguration")


class InjectingServer(WebhookServer):
    def argv(self) -> list[str]:
        return [*super().argv(), "--ca-bundle", str(self.certs / "ca.crt"), "--inject-ca-bundle"]


@dataclass
class Setup:
    plane: ControlPlane
    server: InjectingServer
    certs: Path


def service_account_kubeconfig(plane: ControlPlane, path: Path) -> Path:
    token = plane.kubectl("create", "token", "trainguard", "-n", SYSTEM_NS, "--duration=1h").stdout.strip()
    admin = yaml.safe_load(plane.kubeconfig.read_text(encoding="utf-8"))
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": admin["clusters"],
                "users": [{"name": "trainguard", "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "e2e", "user": "trainguard"}}],
                "current-context": "sa",
            }
        ),
        encoding="utf-8",
    )
    return path


def ca_bundles(plane: ControlPlane) -> list[str | None]:
    bundles: list[str | None] = []
    for kind in KINDS:
        result = plane.kubectl("get", kind, CONFIGURATION_NAME, "-o", "json", check=False)
        if result.returncode != 0:
            return []
        bundles += [h["clientConfig"].get("caBundle") for h in yaml.safe_load(result.stdout)["webhooks"]]
    return bundles


@pytest.fixture(scope="module")
def setup(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    workdir = tmp_path_factory.mktemp("cabundle")
    certs = workdir / "certs"
    _checked(trainguard("certs", "--out", str(certs), "--host", "127.0.0.1"), "trainguard certs")
    for namespace in (SYSTEM_NS, NAMESPACE):
        if control_plane.kubectl("get", "namespace", namespace, check=False).returncode != 0:
            control_plane.kubectl("create", "namespace", namespace)
    control_plane.kubectl("create", "serviceaccount", "trainguard", "-n", SYSTEM_NS, check=False)
    rendered = control_plane.kubectl("kustomize", str(REPO_ROOT / "deploy")).stdout
    rbac = [
        d for d in yaml.safe_load_all(rendered) if d and d["kind"] in ("ClusterRole", "ClusterRoleBinding")
    ]
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
    server = InjectingServer(
        certs=certs,
        config=workdir / "platform.yaml",
        kubeconfig=service_account_kubeconfig(control_plane, workdir / "sa-kubeconfig.yaml"),
        log=workdir / "serve.log",
    )
    (workdir / "platform.yaml").write_text("apiVersion: trainguard.dev/v1alpha1\nkind: PlatformConfig\n")
    try:
        server.start()
        configurations = _checked(
            trainguard("webhook-config", "--url", server.url, "-o", "yaml"), "trainguard webhook-config"
        ).stdout
        hooks = [h for d in yaml.safe_load_all(configurations) if d for h in d["webhooks"]]
        assert len(hooks) == 2 and not [h for h in hooks if "caBundle" in h["clientConfig"]]
        control_plane.kubectl("apply", "-f", "-", input=configurations)
        yield Setup(control_plane, server, certs)
    finally:
        try:
            server.stop()
        finally:
            server.kill()
            for kind in KINDS:
                control_plane.kubectl("delete", kind, CONFIGURATION_NAME, "--ignore-not-found", check=False)
            for obj in rbac:
                control_plane.kubectl(
                    "delete", obj["kind"].lower(), obj["metadata"]["name"], "--ignore-not-found", check=False
                )
            control_plane.kubectl("delete", "serviceaccount", "trainguard", "-n", SYSTEM_NS, check=False)


def test_the_server_writes_the_ca_into_both_configurations(setup: Setup) -> None:
    expected = base64.b64encode((setup.certs / "ca.crt").read_bytes()).decode()
    bundles = wait_for(
        "both caBundles", lambda: (b := ca_bundles(setup.plane)) and all(b) and b, log=setup.server.log_tail
    )
    assert base64.b64decode(bundles[0]) == base64.b64decode(expected)
    assert set(bundles) == {bundles[0]} and len(bundles) == 2

    # The API server now trusts the webhook: a preemptible GPU Pod without checkpoints is denied by it.
    manifest = yaml.safe_dump(pod("spot", NAMESPACE, gpus=1, labels={"trainguard.dev/tier": "preemptible"}))

    def denied() -> str | None:
        result = setup.plane.kubectl("create", "--dry-run=server", "-f", "-", input=manifest, check=False)
        return result.stderr if result.returncode != 0 and "checkpoint" in result.stderr else None

    assert "denied the request" in wait_for(
        "the API server to call the webhook", denied, log=setup.server.log_tail
    )


def test_a_missing_configuration_is_reported_and_never_created(setup: Setup) -> None:
    wait_for("both caBundles", lambda: all(ca_bundles(setup.plane) or [None]), log=setup.server.log_tail)
    setup.plane.kubectl("delete", "mutatingwebhookconfiguration", CONFIGURATION_NAME)
    # A new CA file: the server tries again, and finds the mutating configuration gone.
    other = setup.certs.parent / "rotated"
    _checked(trainguard("certs", "--out", str(other), "--host", "127.0.0.1"), "trainguard certs")
    (setup.certs / "ca.crt").write_bytes((other / "ca.crt").read_bytes())
    wait_for(
        "the server to report the missing configuration",
        lambda: "MutatingWebhookConfiguration trainguard does not exist" in setup.server.log_tail(400),
        log=setup.server.log_tail,
    )
    result = setup.plane.kubectl("get", "mutatingwebhookconfiguration", CONFIGURATION_NAME, check=False)
    assert result.returncode != 0 and "NotFound" in result.stderr

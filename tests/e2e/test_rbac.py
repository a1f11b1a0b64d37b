"""deploy/'s RBAC, as the real API server's RBAC authorizer reads it: what the webhook may do, and not.

The ClusterRoles and bindings are rendered by `kubectl kustomize deploy/` (the default install)
and applied; `kubectl auth can-i --as` the webhook's service account then asks the authorizer
itself. The base role reads what the caches watch and may only get and patch trainguard's own two
webhook configurations (their caBundle): no create, no list. Then the self-register component is
applied on top: only it brings `create` (which cannot be limited by name).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .controlplane import ControlPlane
from .webhook_server import REPO_ROOT, exception_crd

SERVICE_ACCOUNT = "system:serviceaccount:trainguard-system:trainguard"
RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding")


def rendered_rbac(control_plane: ControlPlane, directory: Path) -> list[dict[str, Any]]:
    rendered = control_plane.kubectl("kustomize", str(directory)).stdout
    return [d for d in yaml.safe_load_all(rendered) if d and d["kind"] in RBAC_KINDS]


@pytest.fixture(scope="module")
def rbac(control_plane: ControlPlane) -> Iterator[list[dict[str, object]]]:
    objects = rendered_rbac(control_plane, REPO_ROOT / "deploy")
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    try:
        # trainguard's own CRD, so that kubectl can name its resource to the authorizer.
        with exception_crd(control_plane):
            yield objects
    finally:
        for obj in objects:
            control_plane.kubectl(
                "delete", obj["kind"].lower(), obj["metadata"]["name"], "--ignore-not-found", check=False
            )


@pytest.mark.parametrize(
    ("verb", "resource", "allowed"),
    [
        pytest.param("watch", "priorityclasses.scheduling.k8s.io", True, id="watch-priorityclasses"),
        pytest.param("list", "trainingruntimes.trainer.kubeflow.org", True, id="list-trainingruntimes"),
        pytest.param(
            "watch", "clustertrainingruntimes.trainer.kubeflow.org", True, id="watch-clustertrainingruntimes"
        ),
        pytest.param("list", "policyexceptions.trainguard.dev", True, id="list-policyexceptions"),
        pytest.param("watch", "namespaces", False, id="no-namespaces"),
        pytest.param("list", "localqueues.kueue.x-k8s.io", False, id="no-localqueues"),
        pytest.param("list", "pods", False, id="no-pods"),
        pytest.param("get", "secrets", False, id="no-secrets"),
        pytest.param("patch", "validatingwebhookconfigurations/trainguard", True, id="patch-own-validating"),
        pytest.param("patch", "mutatingwebhookconfigurations/trainguard", True, id="patch-own-mutating"),
        pytest.param("get", "mutatingwebhookconfigurations/trainguard", True, id="get-own-mutating"),
        pytest.param(
            "patch", "validatingwebhookconfigurations/someone-else", False, id="not-others-configurations"
        ),
        pytest.param("get", "mutatingwebhookconfigurations/someone-else", False, id="not-others-read"),
        pytest.param("list", "validatingwebhookconfigurations", False, id="no-list-of-configurations"),
        pytest.param("update", "validatingwebhookconfigurations/trainguard", False, id="no-update"),
        pytest.param("delete", "validatingwebhookconfigurations/trainguard", False, id="no-delete"),
        pytest.param("create", "validatingwebhookconfigurations", False, id="no-create-by-default"),
        pytest.param("create", "policyexceptions.trainguard.dev", False, id="no-exceptions-of-its-own"),
        pytest.param("patch", "priorityclasses.scheduling.k8s.io", False, id="no-writes-to-caches"),
    ],
)
def test_the_authorizer_grants_what_the_code_uses(
    control_plane: ControlPlane, rbac: list[dict[str, object]], verb: str, resource: str, allowed: bool
) -> None:
    result = control_plane.kubectl("auth", "can-i", verb, resource, f"--as={SERVICE_ACCOUNT}", check=False)
    assert result.stdout.strip() == ("yes" if allowed else "no"), result.stdout + result.stderr


@pytest.mark.parametrize(
    ("verb", "resource", "allowed"),
    [
        pytest.param("create", "validatingwebhookconfigurations", True, id="create-configurations"),
        pytest.param("create", "mutatingwebhookconfigurations", True, id="create-mutating"),
        pytest.param("update", "validatingwebhookconfigurations/trainguard", True, id="update-own"),
        pytest.param("delete", "validatingwebhookconfigurations/trainguard", False, id="still-no-delete"),
        pytest.param("patch", "mutatingwebhookconfigurations/someone-else", False, id="still-not-others"),
    ],
)
def test_self_registration_is_what_brings_create(
    control_plane: ControlPlane,
    rbac: list[dict[str, object]],
    tmp_path: Path,
    verb: str,
    resource: str,
    allowed: bool,
) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "resources": [os.path.relpath(REPO_ROOT / "deploy", overlay)],
                "components": [os.path.relpath(REPO_ROOT / "deploy" / "self-register", overlay)],
            }
        )
    )
    extra = [
        o
        for o in rendered_rbac(control_plane, overlay)
        if o["metadata"]["name"] not in {str(base["metadata"]["name"]) for base in rbac}  # type: ignore[index]
    ]
    assert [o["metadata"]["name"] for o in extra] == ["trainguard-self-register", "trainguard-self-register"]
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(extra))
    try:
        result = control_plane.kubectl(
            "auth", "can-i", verb, resource, f"--as={SERVICE_ACCOUNT}", check=False
        )
        assert result.stdout.strip() == ("yes" if allowed else "no"), result.stdout + result.stderr
    finally:
        for obj in extra:
            control_plane.kubectl(
                "delete", obj["kind"].lower(), obj["metadata"]["name"], "--ignore-not-found", check=False
            )

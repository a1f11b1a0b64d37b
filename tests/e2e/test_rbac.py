"""deploy/'s RBAC, as the real API server's RBAC authorizer reads it: what the webhook may do, and not.

The ClusterRoles and bindings are rendered by `kubectl kustomize deploy/` (with the self-register
component, as shipped) and applied; `kubectl auth can-i --as` the webhook's service account then
asks the authorizer itself. The base role reads what the caches watch; only the self-register role
writes, and only trainguard's own webhook configurations (create excepted: it cannot be limited
by name).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from .controlplane import ControlPlane
from .webhook_server import REPO_ROOT

SERVICE_ACCOUNT = "system:serviceaccount:trainguard-system:trainguard"
RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding")


@pytest.fixture(scope="module")
def rbac(control_plane: ControlPlane) -> Iterator[list[dict[str, object]]]:
    rendered = control_plane.kubectl("kustomize", str(REPO_ROOT / "deploy")).stdout
    objects = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] in RBAC_KINDS]
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    # trainguard's own CRD, so that kubectl can name its resource to the authorizer.
    control_plane.kubectl(
        "apply", "-f", str(REPO_ROOT / "deploy" / "crds" / "trainguard.dev_policyexceptions.yaml")
    )
    control_plane.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s", "crd/policyexceptions.trainguard.dev"
    )
    try:
        yield objects
    finally:
        control_plane.kubectl(
            "delete",
            "crd",
            "policyexceptions.trainguard.dev",
            "--ignore-not-found",
            "--timeout=60s",
            check=False,
        )
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
        pytest.param(
            "patch", "validatingwebhookconfigurations/someone-else", False, id="not-others-configurations"
        ),
        pytest.param("delete", "validatingwebhookconfigurations/trainguard", False, id="no-delete"),
        pytest.param("create", "validatingwebhookconfigurations", True, id="create-configurations"),
        pytest.param("patch", "priorityclasses.scheduling.k8s.io", False, id="no-writes-to-caches"),
    ],
)
def test_the_authorizer_grants_what_the_code_uses(
    control_plane: ControlPlane, rbac: list[dict[str, object]], verb: str, resource: str, allowed: bool
) -> None:
    result = control_plane.kubectl("auth", "can-i", verb, resource, f"--as={SERVICE_ACCOUNT}", check=False)
    assert result.stdout.strip() == ("yes" if allowed else "no"), result.stdout + result.stderr

"""deploy/audit: the optional component renders, grants exactly what `serve --audit` uses, and turns it on."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.audit.cluster_serve import LEASE_NAME
from webhook.audit.report_objects import APIS
from webhook.kinds import KINDS

ROOT = Path(__file__).parents[2]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with its built-in kustomize) is needed to render deploy/"
    overlay = tmp_path_factory.mktemp("overlay")
    deploy = os.path.relpath(ROOT / "deploy", overlay)
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [deploy],
                "components": [f"{deploy}/audit"],
            }
        ),
        encoding="utf-8",
    )
    result = subprocess.run(
        [kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def grants(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for rule in rules
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_cluster_role_reads_every_kind_trainguard_decides_and_writes_only_reports(rendered) -> None:
    role = one(rendered, "ClusterRole", "trainguard-audit")
    expected = {(k.group, k.plural, verb) for k in KINDS for verb in ("list", "watch")}
    for api in APIS.values():
        for plural in (api.plural, api.cluster_plural):
            expected |= {(api.group, plural, verb) for verb in ("list", "create", "patch", "delete")}
    assert grants(role["rules"]) == expected


def test_lease_access_is_limited_to_the_audit_lease_in_trainguards_namespace(rendered) -> None:
    role = one(rendered, "Role", "trainguard-audit-lease")
    assert role["metadata"]["namespace"] == "trainguard-system"
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [LEASE_NAME],
            "verbs": ["get", "update"],
        }
    ]
    binding = one(rendered, "RoleBinding", "trainguard-audit-lease")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "trainguard", "namespace": "trainguard-system"}
    ]


def test_the_deployment_runs_with_audit_on(rendered) -> None:
    (container,) = one(rendered, "Deployment", "trainguard")["spec"]["template"]["spec"]["containers"]
    assert "--audit" in container["args"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in container["env"]

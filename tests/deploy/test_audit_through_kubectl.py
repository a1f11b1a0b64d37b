"""`kubectl trainguard audit` and `serve --audit`'s metrics, against a real kube-apiserver.

Both need the audit command of the trainguard being tested; a build without it has nothing to
run here (the plugin's refusal is tested in test_kubectl_plugin.py).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.deploy.test_monitoring import Server, audit_metric_names, make_certs
from tests.e2e.controlplane import ControlPlane, clean_environment

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        importlib.util.find_spec("webhook.cli.audit") is None, reason="this trainguard has no audit command"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
DENIED = ROOT / "deploy" / "counterexamples" / "bare-torchrun-pod.yaml"


def test_audit_through_kubectl_reads_the_context_namespace(
    apiserver: ControlPlane, fresh_namespace: str, tmp_path: Path
) -> None:
    pod = yaml.safe_load(DENIED.read_text("utf-8"))
    pod["metadata"].pop("namespace", None)
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod), encoding="utf-8")
    apiserver.kubectl("-n", fresh_namespace, "create", "-f", str(tmp_path / "pod.yaml"))
    # The reader's kubeconfig: its current context points at the namespace with the denied Pod.
    kubeconfig = tmp_path / "config"
    shutil.copy(apiserver.kubeconfig, kubeconfig)
    env = {
        **clean_environment(),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(kubeconfig),
        "HOME": str(tmp_path),
    }
    subprocess.run(
        ["kubectl", "config", "set-context", "--current", f"--namespace={fresh_namespace}"],
        env=env,
        check=True,
    )
    result = subprocess.run(
        ["kubectl", "trainguard", "audit", "-o", "json"], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert pod["metadata"]["name"] in result.stdout
    assert json.loads(result.stdout)


def test_serve_audit_exports_the_audit_panels_metrics(
    apiserver: ControlPlane, fresh_namespace: str, tmp_path: Path
) -> None:
    """The audit's series appear once its first pass has run (a Pod to decide is there)."""
    pod = yaml.safe_load(DENIED.read_text("utf-8"))
    pod["metadata"]["namespace"] = fresh_namespace
    apiserver.kubectl("create", "-f", "-", input=yaml.safe_dump(pod))
    # The reports it writes (the real CRDs), and the Lease that elects the writer, in its namespace.
    apiserver.apply_crds(sorted((ROOT / "tests" / "e2e" / "crds").glob("wgpolicyk8s.io_*.yaml")))
    lease_namespace = f"tg-lease-{fresh_namespace}"
    apiserver.kubectl("create", "namespace", lease_namespace)
    certs = make_certs(tmp_path / "certs")
    server = Server(
        certs,
        tmp_path / "serve.log",
        *("--audit", "--kubeconfig", str(apiserver.kubeconfig), "--webhook-namespace", lease_namespace),
    )
    wanted = audit_metric_names()
    exported: set[str] = set()
    try:
        server.wait_ready()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not wanted <= exported:
            exported = server.exported()
            time.sleep(1)
    finally:
        server.stop()
    assert wanted <= exported, sorted(wanted - exported)

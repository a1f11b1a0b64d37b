"""The control plane the e2e suite runs against is a real one: version, CRDs, storage, admission."""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from .controlplane import (
    CertificateAuthority,
    ControlPlane,
    KubectlError,
    crd_established,
    shared_dir,
    write_cert,
    write_key,
)

CORPUS_PYTORCHJOB = Path("kubeflow-training-operator-v1/simple.yaml")

# The 21 upstream CRD files of the shared folder (or their stand-ins in tests/e2e/crds) define these
# 20 CRDs: two files define mpijobs.kubeflow.org, and the suite installs the mpi-operator's v2beta1.
TRAINING_CRDS = {
    "pytorchjobs.kubeflow.org",
    "mpijobs.kubeflow.org",
    "trainjobs.trainer.kubeflow.org",
    "trainingruntimes.trainer.kubeflow.org",
    "clustertrainingruntimes.trainer.kubeflow.org",
    "jobs.batch.volcano.sh",
    "podgroups.scheduling.volcano.sh",
    "queues.scheduling.volcano.sh",
    "hypernodes.topology.volcano.sh",
    "jobsets.jobset.x-k8s.io",
    "rayjobs.ray.io",
    "rayclusters.ray.io",
    "leaderworkersets.leaderworkerset.x-k8s.io",
    "localqueues.kueue.x-k8s.io",
    "clusterqueues.kueue.x-k8s.io",
    "resourceflavors.kueue.x-k8s.io",
    "workloadpriorityclasses.kueue.x-k8s.io",
    "workloads.kueue.x-k8s.io",
    "topologies.kueue.x-k8s.io",
    "podgroups.scheduling.x-k8s.io",
}
# The policy report APIs `serve --audit` writes (4 more files, 4 CRDs).
REPORT_CRDS = {
    "policyreports.wgpolicyk8s.io",
    "clusterpolicyreports.wgpolicyk8s.io",
    "reports.openreports.io",
    "clusterreports.openreports.io",
}


def _pytorchjob_manifest() -> dict[str, Any]:
    path = shared_dir() / "corpus" / CORPUS_PYTORCHJOB
    if path.is_file():
        manifest = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert isinstance(manifest, dict)
        return manifest
    return {  # the same object, for a checkout without the shared folder
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pytorch-simple", "namespace": "kubeflow"},
        "spec": {
            "pytorchReplicaSpecs": {
                role: {
                    "replicas": 1,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "pytorch",
                                    "image": "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727",
                                    "command": ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"],
                                }
                            ]
                        }
                    },
                }
                for role in ("Master", "Worker")
            }
        },
    }


def _apply_in(
    control_plane: ControlPlane, namespace: str, manifest: dict[str, Any], *flags: str
) -> dict[str, Any]:
    document = json.loads(json.dumps(manifest))
    document["metadata"]["namespace"] = namespace
    result = control_plane.kubectl("apply", *flags, "-o", "json", "-f", "-", input=json.dumps(document))
    answered: dict[str, Any] = json.loads(result.stdout)
    return answered


def test_server_reports_the_pinned_release(control_plane: ControlPlane) -> None:
    version = json.loads(control_plane.kubectl("version", "-o", "json").stdout)["serverVersion"]
    pinned = control_plane.binaries.kubernetes_version
    assert version["gitVersion"] == pinned
    assert (version["major"], version["minor"]) == tuple(pinned.lstrip("v").split(".")[:2])


def test_every_training_crd_is_established(control_plane: ControlPlane) -> None:
    crds = control_plane.kubectl_json("get", "customresourcedefinitions")["items"]
    established = {crd["metadata"]["name"] for crd in crds if crd_established(crd)}
    assert established == TRAINING_CRDS | REPORT_CRDS
    assert len(established) == 24


def test_mpijob_is_the_mpi_operator_v2beta1(control_plane: ControlPlane) -> None:
    crd = control_plane.kubectl_json("get", "customresourcedefinition", "mpijobs.kubeflow.org")
    assert [version["name"] for version in crd["spec"]["versions"]] == ["v2beta1"]


def test_corpus_pytorchjob_is_stored_and_read_back(control_plane: ControlPlane, namespace: str) -> None:
    manifest = _pytorchjob_manifest()
    created = _apply_in(control_plane, namespace, manifest)
    assert created["metadata"]["uid"]

    stored = control_plane.kubectl_json("get", "pytorchjobs.kubeflow.org", "pytorch-simple", "-n", namespace)
    assert stored["metadata"]["uid"] == created["metadata"]["uid"]
    specs = stored["spec"]["pytorchReplicaSpecs"]
    expected = manifest["spec"]["pytorchReplicaSpecs"]
    assert set(specs) == {"Master", "Worker"}
    for role in ("Master", "Worker"):
        assert specs[role]["replicas"] == expected[role]["replicas"]
        container = specs[role]["template"]["spec"]["containers"][0]
        assert container["image"] == expected[role]["template"]["spec"]["containers"][0]["image"]
        assert container["command"] == expected[role]["template"]["spec"]["containers"][0]["command"]


def test_server_dry_run_persists_nothing(control_plane: ControlPlane, namespace: str) -> None:
    manifest = _pytorchjob_manifest()
    manifest["metadata"]["name"] = "dry-run-only"
    answered = _apply_in(control_plane, namespace, manifest, "--server-side", "--dry-run=server")
    assert answered["metadata"]["name"] == "dry-run-only"

    with pytest.raises(KubectlError, match="NotFound"):
        control_plane.kubectl("get", "pytorchjobs.kubeflow.org", "dry-run-only", "-n", namespace)
    listed = control_plane.kubectl_json("get", "pytorchjobs.kubeflow.org", "-n", namespace)
    assert listed["items"] == []


def test_priority_plugin_resolves_priority_class_name(control_plane: ControlPlane, namespace: str) -> None:
    priority_class = f"e2e-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl(
        "apply",
        "-f",
        "-",
        input=json.dumps(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": priority_class},
                "value": 4242,
            }
        ),
    )
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {
            "priorityClassName": priority_class,
            "containers": [{"name": "main", "image": "busybox:1.36"}],
        },
    }
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(pod))

    stored = control_plane.kubectl_json("get", "pod", "trainer", "-n", namespace)
    assert stored["spec"]["priority"] == 4242
    # No scheduler or kubelet runs: the Pod is admitted and stored, and stays Pending.
    assert stored["status"].get("phase", "Pending") == "Pending"


def test_namespaces_get_no_default_service_account(control_plane: ControlPlane, namespace: str) -> None:
    """No controller-manager: the ServiceAccount controller never runs (documented in controlplane.py)."""
    accounts = control_plane.kubectl_json("get", "serviceaccounts", "-n", namespace)
    assert accounts["items"] == []


class _DenyingWebhook(BaseHTTPRequestHandler):
    """Answers every AdmissionReview with a denial, and counts the calls."""

    calls = 0

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).calls += 1
        body = json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {
                    "uid": review["request"]["uid"],
                    "allowed": False,
                    "status": {"code": 403, "message": "denied by the loopback test webhook"},
                },
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def loopback_webhook(tmp_path: Path) -> Iterator[tuple[str, bytes]]:
    """A TLS webhook on 127.0.0.1: yields its URL and its CA bundle (PEM)."""
    ca = CertificateAuthority("loopback-webhook-ca")
    cert, key = ca.issue("loopback-webhook", ip_addresses=["127.0.0.1"], server=True)
    write_cert(tmp_path / "tls.crt", cert)
    write_key(tmp_path / "tls.key", key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DenyingWebhook)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        write_cert(tmp_path / "ca.crt", ca.cert)
        yield f"https://127.0.0.1:{server.server_address[1]}/validate", (tmp_path / "ca.crt").read_bytes()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_api_server_calls_a_webhook_on_loopback(
    control_plane: ControlPlane, namespace: str, loopback_webhook: tuple[str, bytes]
) -> None:
    url, ca_bundle = loopback_webhook
    name = f"loopback-{namespace}"
    configuration = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "loopback.e2e.trainguard.dev",
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_bundle).decode()},
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                    }
                ],
                # Only this test's namespace: the control plane is shared by the whole session.
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 5,
            }
        ],
    }
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(configuration))
    try:
        # The API server picks the configuration up from its informer, within a second or so.
        deadline = time.monotonic() + 30
        while True:
            result = control_plane.kubectl(
                "create", "configmap", "probe", "-n", namespace, "--dry-run=server", check=False
            )
            if result.returncode != 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert "denied by the loopback test webhook" in result.stderr
        assert _DenyingWebhook.calls >= 1
    finally:
        control_plane.kubectl("delete", "validatingwebhookconfiguration", name)

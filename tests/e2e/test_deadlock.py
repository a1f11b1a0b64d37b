"""The webhook is down, and the cluster still admits what nodes need to come back.

trainguard's validating webhook fails closed. A node agent (CNI, CSI, GPU device plugin) that waited
on it could keep nodes, the webhook's own included, from ever becoming usable. The configurations
rendered by `trainguard webhook-config` skip such Pods with a matchCondition the API server
evaluates itself, so they are created with nothing listening. A training Pod in the same namespace
is refused, naming the webhook.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from .webhook_server import VALIDATING_WEBHOOK, Admission, pod

# What the DaemonSet controller puts on every Pod it creates (pkg/controller/daemon/util and
# pkg/controller/daemon/daemon_controller.go): the controller reference, a node affinity on the
# node's name, and tolerations for the node conditions a fresh node has.
DAEMONSET_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


def daemonset_pod(name: str, namespace: str) -> dict[str, Any]:
    manifest = pod(name, namespace)
    manifest["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "name": "gpu-feature-discovery",
            "uid": "6b1f9c1e-4d7a-4f0e-9d55-1d2b3c4d5e6f",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    manifest["metadata"]["labels"] = {"app": "gpu-feature-discovery", "pod-template-generation": "1"}
    manifest["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-node-1"]}]}
                ]
            }
        }
    }
    manifest["spec"]["tolerations"] = copy.deepcopy(DAEMONSET_TOLERATIONS)
    return manifest


def gpu_daemonset_pod(name: str, namespace: str, command: list[str]) -> dict[str, Any]:
    """A DaemonSet's Pod that asks for a GPU: a workload in an agent's shape, decided like any other."""
    manifest = daemonset_pod(name, namespace)
    manifest["metadata"]["labels"] = {"app": "gpu-job", "pod-template-generation": "1"}
    container = manifest["spec"]["containers"][0]
    container["command"] = command
    container["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    return manifest


def critical_pod(name: str, namespace: str, priority_class: str) -> dict[str, Any]:
    manifest = pod(name, namespace)
    manifest["spec"]["priorityClassName"] = priority_class
    return manifest


def tolerate_everything_pod(name: str, namespace: str, gpus: int = 0) -> dict[str, Any]:
    manifest = pod(name, namespace, gpus=gpus)
    manifest["spec"]["tolerations"] = [{"operator": "Exists"}]
    return manifest


def node_level_pods(namespace: str) -> list[Any]:
    return [
        pytest.param(daemonset_pod("tg-ds-agent", namespace), id="daemonset-owned"),
        pytest.param(
            critical_pod("tg-node-critical", namespace, "system-node-critical"), id="system-node-critical"
        ),
        pytest.param(
            critical_pod("tg-cluster-critical", namespace, "system-cluster-critical"),
            id="system-cluster-critical",
        ),
        pytest.param(tolerate_everything_pod("tg-tolerate-all", namespace), id="tolerates-everything"),
    ]


def test_node_level_pods_are_created_while_the_webhook_is_down(admission: Admission, namespace: str) -> None:
    server = admission.server
    assert server.stop() == 0, f"trainguard serve did not stop cleanly:\n{server.log_tail()}"
    try:
        for param in node_level_pods(namespace):
            (manifest,) = param.values
            created = admission.apply(
                manifest, transcript="deadlock", title=f"the webhook is down: {param.id} Pod"
            )
            assert created.returncode == 0, f"{param.id}: {created.stderr}"
            stored = admission.get(manifest)
            assert stored is not None, param.id
            # Created, not merely dry-run: the API server stored what it was sent.
            assert stored["metadata"]["uid"]

        # A training Pod in the same ordinary namespace: refused, and the message names the webhook.
        trainer = pod("tg-trainer", namespace, gpus=8)
        refused = admission.apply(trainer, transcript="deadlock", title="the webhook is down: a training Pod")
        assert refused.returncode != 0
        assert f'failed calling webhook "{VALIDATING_WEBHOOK}"' in refused.stderr, refused.stderr
        assert admission.get(trainer) is None

        # An agent's shape does not carry a training Pod past the webhook: asking for GPUs, a
        # tolerate-everything Pod is sent (and refused while nobody answers).
        disguised = tolerate_everything_pod("tg-disguised-trainer", namespace, gpus=8)
        refused = admission.apply(
            disguised, transcript="deadlock", title="the webhook is down: a tolerate-everything GPU Pod"
        )
        assert f'failed calling webhook "{VALIDATING_WEBHOOK}"' in refused.stderr, refused.stderr
        assert admission.get(disguised) is None

        # Nor does a DaemonSet's: its Pods that ask for GPUs are sent, the agent's above were not.
        gpu_job = gpu_daemonset_pod("tg-ds-gpu-job", namespace, ["python", "serve.py"])
        refused = admission.apply(
            gpu_job, transcript="deadlock", title="the webhook is down: a DaemonSet's GPU Pod"
        )
        assert f'failed calling webhook "{VALIDATING_WEBHOOK}"' in refused.stderr, refused.stderr
        assert admission.get(gpu_job) is None
    finally:
        server.start()


# A DaemonSet's GPU Pods as the webhook decides them: a 4-node torchrun on 1 GPU is refused like
# any training Pod's, and a plain GPU Pod is admitted and patched as a member of its DaemonSet.
GPU_DAEMONSET_PODS = [
    pytest.param(
        ["torchrun", "--nnodes=4", "--nproc-per-node=8", "train.py"],
        "torchrun-consistency",
        id="four-node-torchrun-refused",
    ),
    pytest.param(["python", "serve.py"], None, id="gpu-pod-patched-as-a-member"),
]


@pytest.mark.parametrize(("command", "denied_by"), GPU_DAEMONSET_PODS)
def test_a_daemonsets_gpu_pods_are_decided(
    admission: Admission, namespace: str, command: list[str], denied_by: str | None
) -> None:
    manifest = gpu_daemonset_pod(f"tg-ds-gpu-{command[0]}", namespace, command)
    result = admission.apply(
        manifest, transcript="deadlock", title=f"a DaemonSet's GPU Pod: {' '.join(command)}"
    )
    cli = admission.check_manifest(manifest, namespace)
    assert cli.get("skipped") in (None, ""), cli
    if denied_by is not None:
        assert result.returncode != 0
        assert f'admission webhook "{VALIDATING_WEBHOOK}" denied the request' in result.stderr, result.stderr
        assert f"{denied_by}:" in result.stderr
        assert admission.get(manifest) is None
        assert cli["allowed"] is False and denied_by in [v["policy"] for v in cli["violations"]]
    else:
        assert result.returncode == 0, result.stderr
        stored = admission.get(manifest)
        assert stored is not None
        # mutate-class-label stamps every member Pod it decides.
        assert stored["metadata"]["labels"]["trainguard.dev/class"] == "A"
        assert cli["allowed"] is True


def test_the_cli_leaves_node_level_pods_alone_too(admission: Admission, namespace: str) -> None:
    """`trainguard check` decides them as the cluster does: not judged (skipped), not denied."""
    files = []
    for number, param in enumerate(node_level_pods(namespace)):
        (manifest,) = param.values
        path = admission.workdir / f"node-level-{number}.json"
        path.write_text(json.dumps(manifest), encoding="utf-8")
        files.append(path)
    report = admission.check(files, namespace)
    for record in report["results"]:
        assert record["allowed"] is True, record
        assert str(record["skipped"]).startswith("node-level Pod: "), record

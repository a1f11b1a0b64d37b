"""Launch values a training operator injects, as the adapters feed them to the torchrun view."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from webhook.config import load_config
from webhook.workloads import AdaptContext, build_workload

PYTORCHJOB = """
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: j, namespace: ml}
spec:
  %s
  pytorchReplicaSpecs:
    Master: {replicas: 1, template: {spec: {containers: [{name: pytorch, image: x, command: %s}]}}}
    Worker: {replicas: 3, template: {spec: {containers: [{name: pytorch, image: x, command: %s}]}}}
"""

RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch"},
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "x"}]}}}
                        },
                    }
                ]
            }
        },
    },
}


def torchrun_facts(obj: dict[str, Any], runtimes: dict[Any, Any] | None = None) -> list[tuple[Any, ...]]:
    ctx = AdaptContext(config=load_config(), runtimes=runtimes or {}, namespace="ml")
    w = build_workload(obj, ctx)
    assert w is not None
    return [(g.name, t.nnodes, t.nproc_per_node, t.sources, t.injected) for g, _, t in w.torchrun]


OP = "operator"


@pytest.mark.parametrize(
    ("spec", "command", "expected"),
    [
        pytest.param(
            'nprocPerNode: "4"', "[torchrun, t.py]",
            ("4", "4", {"nnodes": OP, "nproc_per_node": OP},
             {"nnodes": "spec.pytorchReplicaSpecs[*].replicas", "nproc_per_node": "spec.nprocPerNode"}),
            id="replica-sum-and-nproc-per-node",
        ),
        pytest.param(
            "elasticPolicy: {minReplicas: 2, maxReplicas: 6, nProcPerNode: 8}", "[torchrun, t.py]",
            ("2:6", "8", {"nnodes": OP, "nproc_per_node": OP},
             {"nnodes": "spec.elasticPolicy.minReplicas/maxReplicas", "nproc_per_node": "spec.elasticPolicy.nProcPerNode"}),
            id="elastic-range-and-deprecated-nproc",
        ),
        pytest.param(
            "elasticPolicy: {maxRestarts: 3}", "[torchrun, t.py]",
            ("3", None, {"nnodes": OP}, {"nnodes": "spec.pytorchReplicaSpecs.Worker.replicas"}),
            id="elastic-without-range-is-worker-replicas",
        ),
        pytest.param(
            'nprocPerNode: "4"', "[torchrun, --nproc-per-node=8, --nnodes=4, t.py]",
            ("4", "8", {"nnodes": "flag", "nproc_per_node": "flag"}, {}),
            id="flags-override-injected-values",
        ),
        pytest.param(
            'nprocPerNode: "4"', "[bash, -c, 'export PET_NPROC_PER_NODE=2; torchrun t.py']",
            ("4", "2", {"nnodes": OP, "nproc_per_node": "env"}, {"nnodes": "spec.pytorchReplicaSpecs[*].replicas"}),
            id="script-export-overrides-injected-value",
        ),
    ],
)  # fmt: skip
def test_pytorchjob(spec: str, command: str, expected: tuple[Any, ...]) -> None:
    obj = yaml.safe_load(PYTORCHJOB % (spec, command, command))
    assert torchrun_facts(obj) == [("Master", *expected), ("Worker", *expected)]


def test_pytorchjob_values_feed_no_launch() -> None:
    obj = yaml.safe_load(PYTORCHJOB % ('nprocPerNode: "4"', "[python, t.py]", "[python, t.py]"))
    assert torchrun_facts(obj) == []


@pytest.mark.parametrize(
    ("trainer", "runtime", "expected"),
    [
        pytest.param(
            {"numNodes": 2, "numProcPerNode": 4}, True,
            [("node", "2", "4", {"nnodes": OP, "nproc_per_node": OP},
              {"nnodes": "spec.trainer.numNodes", "nproc_per_node": "spec.trainer.numProcPerNode"})],
            id="trainer-fields",
        ),
        pytest.param(
            {}, True,
            [("node", "1", None, {"nnodes": OP}, {"nnodes": "ClusterTrainingRuntime/torch:spec.mlPolicy.numNodes"})],
            id="runtime-num-nodes",
        ),
        pytest.param(
            {"numProcPerNode": 4}, False,
            [("node", None, "4", {"nproc_per_node": OP}, {"nproc_per_node": "spec.trainer.numProcPerNode"})],
            id="unknown-runtime-num-nodes-not-guessed",
        ),
    ],
)  # fmt: skip
def test_trainjob(trainer: dict[str, Any], runtime: bool, expected: list[tuple[Any, ...]]) -> None:
    obj = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": "ml"},
        "spec": {"runtimeRef": {"name": "torch"}, "trainer": {"command": ["torchrun", "t.py"], **trainer}},
    }
    assert torchrun_facts(obj, {(None, "torch"): RUNTIME} if runtime else None) == expected

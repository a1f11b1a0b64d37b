"""Adapters per API: each case is a manifest and the Workload fields it must produce.

`expected` maps an attribute path of the Workload (`gang.min_available`, `groups[1].template_pointer`,
`groups[0].containers[0].gpus`) to its value.
"""

from __future__ import annotations

import copy
import re
import textwrap
from typing import Any

import pytest
import yaml

from webhook.config import PlatformConfig, load_config
from webhook.errors import InputError
from webhook.workloads import AdaptContext, build_workload
from webhook.workloads.model import ElasticRange, Owner, TopologyConstraint, Workload

_DEFAULTS = load_config()


def _config() -> PlatformConfig:
    raw = copy.deepcopy(_DEFAULTS.raw)
    raw["tiers"]["priorityClasses"] = {"guaranteed": ["prod-critical"], "preemptible": ["spot-batch"]}
    raw["tiers"]["kueuePriorityClass"] = {"guaranteed": "kueue-high", "preemptible": "kueue-low"}
    return PlatformConfig(raw=raw, source="test")


CONFIG = _config()

TORCH_RUNTIME = yaml.safe_load(
    textwrap.dedent(
        """
        apiVersion: trainer.kubeflow.org/v1alpha1
        kind: ClusterTrainingRuntime
        metadata: {name: torch-gang}
        spec:
          mlPolicy: {numNodes: 2, torch: {}}
          podGroupPolicy:
            volcano:
              networkTopology: {mode: hard, highestTierAllowed: 2}
          template:
            spec:
              failurePolicy: {maxRestarts: 3}
              replicatedJobs:
                - name: dataset-initializer
                  template:
                    metadata:
                      labels: {trainer.kubeflow.org/trainjob-ancestor-step: dataset-initializer}
                    spec:
                      template:
                        spec:
                          containers: [{name: dataset-initializer, image: init}]
                - name: node
                  template:
                    metadata:
                      labels: {trainer.kubeflow.org/trainjob-ancestor-step: trainer}
                    spec:
                      template:
                        metadata:
                          annotations: {kueue.x-k8s.io/podset-preferred-topology: example.com/rack}
                        spec:
                          priorityClassName: spot-batch
                          nodeSelector: {trainguard.dev/pool: inference}
                          containers:
                            - name: node
                              image: pytorch
                              env: [{name: FROM_RUNTIME, value: "1"}]
                              resources: {limits: {nvidia.com/gpu: 1}}
        """
    )
)
NAMESPACED_RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainingRuntime",
    "metadata": {"name": "team-runtime", "namespace": "team-a"},
    "spec": {"mlPolicy": {"numNodes": 4}},
}
LEGACY_RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {"name": "torch-elastic-v2.0"},
    "spec": {
        "mlPolicy": {
            "numNodes": 2,
            "torch": {"elasticPolicy": {"minNodes": 1, "maxNodes": 4, "maxRestarts": 5}},
        }
    },
}
RUNTIMES: dict[tuple[str | None, str], dict[str, Any]] = {
    (None, "torch-gang"): TORCH_RUNTIME,
    ("team-a", "team-runtime"): NAMESPACED_RUNTIME,
    (None, "torch-elastic-v2.0"): LEGACY_RUNTIME,
    (None, "broken"): {
        "kind": "ClusterTrainingRuntime",
        "spec": {
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {"spec": {"template": {"spec": {"containers": [{"env": "x"}]}}}},
                        }
                    ]
                }
            }
        },
    },
}
CTX = AdaptContext(config=CONFIG, runtimes=RUNTIMES, namespace="default")


def _load(manifest: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(manifest, dict):
        return manifest
    data = yaml.safe_load(textwrap.dedent(manifest))
    assert isinstance(data, dict)
    return data


def _build(manifest: str | dict[str, Any], ctx: AdaptContext = CTX) -> Workload:
    w = build_workload(_load(manifest), ctx)
    assert w is not None
    return w


_STEP = re.compile(r"[^.\[\]]+|\[\d+\]")


def _get(obj: Any, path: str) -> Any:
    for step in _STEP.findall(path):
        if step.startswith("["):
            obj = obj[int(step[1:-1])]
        elif isinstance(obj, dict):
            obj = obj[step]
        else:
            obj = getattr(obj, step)
    return obj


def _pytorchjob(
    workers: dict[str, Any] | None = None,
    *,
    master: bool = True,
    spec: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A PyTorchJob: Master (1) + Worker (2), 8 GPUs per pod; `workers` overrides the Worker spec."""

    def template() -> dict[str, Any]:
        container = {"name": "pytorch", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 8}}}
        return {"spec": {"containers": [container]}}

    replica_specs: dict[str, Any] = {}
    if master:
        replica_specs["Master"] = {"replicas": 1, "template": template()}
    replica_specs["Worker"] = {
        "replicas": 2,
        "restartPolicy": "OnFailure",
        "template": template(),
        **(workers or {}),
    }
    metadata: dict[str, Any] = {"name": "ddp", "namespace": "research"}
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": metadata,
        "spec": {**(spec or {}), "pytorchReplicaSpecs": replica_specs},
    }


CASES = [
    # ---------------------------------------------------------------- PyTorchJob
    pytest.param(
        _pytorchjob(),
        {
            "kind": "PyTorchJob",
            "namespace": "research",
            "klass": "B",
            "role": "training",
            "tier": "guaranteed",
            "tier_source": "default",
            "total_pods": 3,
            "total_gpus": 24,
            "gang.mechanisms": (),
            "elastic": None,
            "groups[0].name": "Master",
            "groups[0].template_pointer": "/spec/pytorchReplicaSpecs/Master/template",
            "groups[1].template_pointer": "/spec/pytorchReplicaSpecs/Worker/template",
            "groups[1].replicas": 2,
            "groups[1].restart_policy": "OnFailure",
            "groups[1].containers[0].pointer": "/spec/pytorchReplicaSpecs/Worker/template/spec/containers/0",
            "groups[1].gpus_per_pod": 8,
            "suspend_path": "/spec/runPolicy/suspend",
            "suspended": False,
            "restarts.bound": None,
        },
        id="pytorchjob-master-worker-class-b",
    ),
    pytest.param(
        _pytorchjob(workers={"replicas": None}),
        {"total_pods": 2, "groups[1].replicas": 1, "klass": "B"},
        id="pytorchjob-replicas-default-to-one",
    ),
    pytest.param(
        _pytorchjob(workers={"replicas": "3"}),
        {"total_pods": 4, "groups[1].replicas": 3},
        id="pytorchjob-replicas-as-numeric-string",
    ),
    pytest.param(
        _pytorchjob(master=False, workers={"replicas": 1}),
        {"klass": "A", "total_pods": 1, "total_gpus": 8, "tier": "guaranteed"},
        id="pytorchjob-single-worker-class-a",
    ),
    pytest.param(
        _pytorchjob(
            master=False,
            spec={
                "elasticPolicy": {
                    "rdzvBackend": "c10d",
                    "minReplicas": 1,
                    "maxReplicas": 4,
                    "maxRestarts": 100,
                }
            },
        ),
        {
            "klass": "C",
            "elastic": ElasticRange(1, 4, "spec.elasticPolicy.minReplicas"),
            "tier": "preemptible",
            "tier_source": "default",
            "restarts.bound": 100,
            "restarts.field": "spec.elasticPolicy.maxRestarts",
            "total_pods": 2,
        },
        id="pytorchjob-elastic-worker-only-class-c",
    ),
    pytest.param(
        _pytorchjob(spec={"elasticPolicy": {"minReplicas": 2, "maxReplicas": 6}}),
        {"klass": "C", "elastic": ElasticRange(3, 7, "spec.elasticPolicy.minReplicas", fixed=1)},
        id="pytorchjob-elastic-range-counts-the-master",
    ),
    pytest.param(
        _pytorchjob(workers={"replicas": 3}, spec={"elasticPolicy": {"minReplicas": 3, "maxReplicas": 3}}),
        {"klass": "B", "elastic": None},
        id="pytorchjob-elastic-policy-min-equals-max-is-class-b",
    ),
    pytest.param(
        _pytorchjob(
            spec={
                "runPolicy": {
                    "backoffLimit": 4,
                    "suspend": True,
                    "schedulingPolicy": {"minAvailable": 3, "priorityClass": "spot-batch"},
                }
            },
        ),
        {
            "gang.mechanisms": ("scheduling-policy",),
            "gang.min_available": 3,
            "gang.min_field": "spec.runPolicy.schedulingPolicy.minAvailable",
            "restarts.bound": 4,
            "restarts.field": "spec.runPolicy.backoffLimit",
            "suspended": True,
            "priority_class": "spot-batch",
            "tier": "preemptible",
            "tier_source": "priority-class",
        },
        id="pytorchjob-scheduling-policy-gang-backoff-suspend",
    ),
    pytest.param(
        _pytorchjob(
            labels={"kueue.x-k8s.io/queue-name": "team-q", "kueue.x-k8s.io/priority-class": "kueue-low"}
        ),
        {
            "gang.mechanisms": ("kueue",),
            "gang.queue_name": "team-q",
            "gang.min_available": None,
            "tier": "preemptible",
            "tier_source": "priority-class",
        },
        id="pytorchjob-kueue-queue-label-and-workload-priority-class",
    ),
    pytest.param(
        """
        apiVersion: kubeflow.org/v1
        kind: PyTorchJob
        metadata: {name: vc}
        spec:
          pytorchReplicaSpecs:
            Worker:
              replicas: 4
              template:
                spec:
                  schedulerName: volcano
                  containers: [{name: pytorch, image: x}]
        """,
        {"gang.mechanisms": ("volcano",), "groups[0].scheduler_name": "volcano", "klass": "B"},
        id="pytorchjob-volcano-scheduler-in-template",
    ),
    pytest.param(
        """
        apiVersion: kubeflow.org/v1
        kind: PyTorchJob
        metadata: {name: torchrun-elastic}
        spec:
          pytorchReplicaSpecs:
            Worker:
              replicas: 2
              template:
                spec:
                  containers:
                    - name: pytorch
                      image: x
                      command: [torchrun, --nnodes=2:4, --nproc-per-node=8, train.py]
        """,
        {
            "klass": "C",
            "elastic": ElasticRange(
                2, 4, "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0]", launcher=True
            ),
            "groups[0].containers[0].torchrun.nnodes_min": 2,
            "groups[0].containers[0].torchrun.nproc_per_node_int": 8,
        },
        id="pytorchjob-torchrun-elastic-range-when-the-kind-is-silent",
    ),
    pytest.param(
        _pytorchjob(
            labels={"trainguard.dev/tier": "preemptible", "trainguard.dev/role": "inference"},
            annotations={
                "trainguard.dev/checkpoint-interval": "30m",
                "trainguard.dev/checkpoint-uri": "s3://bucket/run-1",
                "trainguard.dev/checkpoint-owner": "ml-team",
                "trainguard.dev/topology-slo": "best-effort",
            },
        ),
        {
            "tier": "preemptible",
            "tier_source": "label",
            "role": "inference",
            "checkpoint.declared": True,
            "checkpoint.interval": "30m",
            "checkpoint.interval_seconds": 1800,
            "checkpoint.uri_scheme": "s3",
            "checkpoint.owner": "ml-team",
            "topology.best_effort": True,
        },
        id="pytorchjob-labels-tier-role-checkpoint-best-effort",
    ),
    pytest.param(
        _pytorchjob(
            labels={"trainguard.dev/tier": "spot"},
            annotations={
                "trainguard.dev/checkpoint-interval": "soon",
                "trainguard.dev/checkpoint-uri": "pvc://ckpt/run-1",
            },
        ),
        {
            "tier": "guaranteed",
            "tier_source": "label-invalid",
            "checkpoint.declared": True,
            "checkpoint.interval_seconds": None,
            "checkpoint.uri_scheme": "pvc",
            "checkpoint.owner": None,
        },
        id="pytorchjob-invalid-tier-label-and-interval",
    ),
    pytest.param(
        _pytorchjob(),
        {"checkpoint.declared": False, "topology.best_effort": False, "topology.constraints": ()},
        id="pytorchjob-without-checkpoint-or-topology",
    ),
    pytest.param(
        """
        apiVersion: kubeflow.org/v1
        kind: PyTorchJob
        metadata: {name: placed}
        spec:
          pytorchReplicaSpecs:
            Worker:
              replicas: 2
              template:
                metadata:
                  annotations: {kueue.x-k8s.io/podset-required-topology: cloud.provider.com/topology-rack}
                spec:
                  nodeSelector: {trainguard.dev/pool: inference}
                  affinity:
                    nodeAffinity:
                      requiredDuringSchedulingIgnoredDuringExecution:
                        nodeSelectorTerms:
                          - matchExpressions:
                              - {key: trainguard.dev/pool, operator: In, values: [training, inference]}
                              - {key: trainguard.dev/pool, operator: NotIn, values: [other]}
                    podAffinity:
                      requiredDuringSchedulingIgnoredDuringExecution:
                        - {labelSelector: {}, topologyKey: example.com/block}
                    podAntiAffinity:
                      preferredDuringSchedulingIgnoredDuringExecution:
                        - weight: 1
                          podAffinityTerm: {labelSelector: {}, topologyKey: kubernetes.io/hostname}
                  tolerations:
                    - {key: trainguard.dev/pool, operator: Exists, effect: NoSchedule}
                    - {key: trainguard.dev/pool, value: training}
                    - {key: nvidia.com/gpu, operator: Exists}
                  containers: [{name: pytorch, image: x}]
        """,
        {
            "pool_targets": (
                {
                    "pool": "inference",
                    "field": "spec.pytorchReplicaSpecs.Worker.template.spec.nodeSelector[trainguard.dev/pool]",
                    "via": "nodeSelector",
                },
                {
                    "pool": "training",
                    "field": "spec.pytorchReplicaSpecs.Worker.template.spec.affinity.nodeAffinity"
                    ".requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]",
                    "via": "affinity",
                },
                {
                    "pool": "inference",
                    "field": "spec.pytorchReplicaSpecs.Worker.template.spec.affinity.nodeAffinity"
                    ".requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]",
                    "via": "affinity",
                },
                {
                    "pool": "*",
                    "field": "spec.pytorchReplicaSpecs.Worker.template.spec.tolerations[0]",
                    "via": "toleration",
                },
                {
                    "pool": "training",
                    "field": "spec.pytorchReplicaSpecs.Worker.template.spec.tolerations[1]",
                    "via": "toleration",
                },
            ),
            "topology.constraints": (
                TopologyConstraint("pod-affinity", "example.com/block", True, "Worker"),
                TopologyConstraint("kueue-tas-required", "cloud.provider.com/topology-rack", True, "Worker"),
            ),
            "groups[0].pod_affinity_topology_keys": ("example.com/block", "kubernetes.io/hostname"),
            "groups[0].required_node_terms[0][1].operator": "NotIn",
            "groups[0].node_selector": {"trainguard.dev/pool": "inference"},
        },
        id="pytorchjob-pool-targets-tas-and-pod-affinity",
    ),
    pytest.param(
        """
        apiVersion: kubeflow.org/v1
        kind: PyTorchJob
        metadata: {name: accel}
        spec:
          pytorchReplicaSpecs:
            Worker:
              replicas: 2
              template:
                spec:
                  terminationGracePeriodSeconds: 120
                  initContainers:
                    - {name: warmup, image: x, resources: {limits: {nvidia.com/gpu: 2}}}
                  containers:
                    - name: a
                      image: x
                      resources:
                        limits: {nvidia.com/mig-3g.20gb: 2, nvidia.com/gpumem: 4000, cpu: "4"}
                        requests: {nvidia.com/mig-3g.20gb: 1, amd.com/gpu: "1"}
                      env:
                        - {name: LITERAL, value: "x"}
                        - {name: EMPTY}
                        - name: FROM_SECRET
                          valueFrom: {secretKeyRef: {name: s, key: k}}
                    - name: b
                      image: x
                      resources: {limits: {google.com/tpu: "4", aws.amazon.com/neuroncore: 1k}}
        """,
        {
            "groups[0].containers[0].accelerators": {"nvidia.com/mig-3g.20gb": 2, "amd.com/gpu": 1},
            "groups[0].containers[0].gpus": 3,
            "groups[0].containers[0].env": {"LITERAL": "x", "EMPTY": "", "FROM_SECRET": None},
            "groups[0].containers[1].gpus": 1004,
            "groups[0].gpus_per_pod": 1007,
            "groups[0].termination_grace_period_seconds": 120,
            "total_gpus": 2014,
        },
        id="pytorchjob-accelerators-limits-else-requests-and-env",
    ),
    # ---------------------------------------------------------------- MPIJob
    pytest.param(
        """
        apiVersion: kubeflow.org/v2beta1
        kind: MPIJob
        metadata: {name: pi, labels: {kueue.x-k8s.io/queue-name: q}}
        spec:
          runPolicy: {backoffLimit: 2, schedulingPolicy: {minAvailable: 3}}
          mpiReplicaSpecs:
            Launcher:
              template: {spec: {containers: [{name: launcher, image: x}]}}
            Worker:
              replicas: 2
              template:
                spec:
                  containers: [{name: worker, image: x, resources: {limits: {nvidia.com/gpu: 4}}}]
        """,
        {
            "klass": "B",
            "total_pods": 3,
            "total_gpus": 8,
            "groups[0].replicas": 1,
            "groups[1].template_pointer": "/spec/mpiReplicaSpecs/Worker/template",
            "gang.mechanisms": ("kueue", "scheduling-policy"),
            "gang.min_available": 3,
            "restarts.bound": 2,
            "suspend_path": "/spec/runPolicy/suspend",
        },
        id="mpijob-v2beta1-launcher-and-workers-class-b",
    ),
    pytest.param(
        """
        apiVersion: kubeflow.org/v1
        kind: MPIJob
        metadata: {name: legacy}
        spec:
          mpiReplicaSpecs:
            Launcher:
              replicas: 1
              template: {spec: {containers: [{name: launcher, image: x}]}}
            Worker:
              template: {spec: {containers: [{name: worker, image: x}]}}
        """,
        {"klass": "A", "total_pods": 1, "groups[1].replicas": 0},
        id="mpijob-v1-workers-default-to-zero",
    ),
    # ---------------------------------------------------------------- TrainJob
    pytest.param(
        """
        apiVersion: trainer.kubeflow.org/v1alpha1
        kind: TrainJob
        metadata: {name: tj, labels: {kueue.x-k8s.io/queue-name: q}}
        spec:
          suspend: true
          runtimeRef: {name: torch-gang}
          trainer:
            numNodes: 3
            command: [torchrun, --nnodes=3, --nproc-per-node=4, train.py]
            env: [{name: FROM_JOB, value: "2"}]
            resourcesPerNode: {limits: {nvidia.com/gpu: 4}}
        """,
        {
            "klass": "B",
            "total_pods": 4,
            "total_gpus": 12,
            "gang.mechanisms": ("kueue", "runtime-podgroup"),
            "gang.min_available": None,
            "groups[0].name": "dataset-initializer",
            "groups[0].replicas": 1,
            "groups[0].patchable": False,
            "groups[0].template_pointer": "",
            "groups[0].containers[0].pointer": "",
            "groups[1].name": "node",
            "groups[1].replicas": 3,
            "groups[1].patchable": False,
            "groups[1].template_pointer": "",
            "groups[1].containers[0].pointer": "/spec/trainer",
            "groups[1].containers[0].env": {"FROM_RUNTIME": "1", "FROM_JOB": "2"},
            "groups[1].containers[0].gpus": 4,
            "groups[1].containers[0].torchrun.nnodes_max": 3,
            "priority_class": "spot-batch",
            "tier": "preemptible",
            "tier_source": "priority-class",
            "topology.constraints": (
                TopologyConstraint("kueue-tas-preferred", "example.com/rack", False, "node"),
                TopologyConstraint("volcano-network-topology", "2", True, None),
            ),
            "pool_targets": (
                {
                    "pool": "inference",
                    "field": "spec.template.spec.replicatedJobs[1].template.spec.template.spec.nodeSelector[trainguard.dev/pool]",
                    "via": "nodeSelector",
                    "object": "ClusterTrainingRuntime/torch-gang",
                },
            ),
            "restarts.bound": 3,
            "restarts.field": "ClusterTrainingRuntime/torch-gang:"
            "spec.template.spec.failurePolicy.maxRestarts",
            "suspend_path": "/spec/suspend",
            "suspended": True,
        },
        id="trainjob-cluster-runtime-groups-gang-and-trainer-override",
    ),
    pytest.param(
        """
        apiVersion: trainer.kubeflow.org/v1alpha1
        kind: TrainJob
        metadata: {name: tj}
        spec:
          runtimeRef: {name: torch-gang}
        """,
        {"klass": "B", "groups[1].replicas": 2, "groups[1].containers[0].gpus": 1, "total_gpus": 2},
        id="trainjob-num-nodes-from-the-runtime",
    ),
    pytest.param(
        """
        apiVersion: trainer.kubeflow.org/v1alpha1
        kind: TrainJob
        metadata: {name: flux}
        spec:
          runtimeRef: {name: not-known}
          trainer:
            numNodes: 2
            resourcesPerNode: {limits: {nvidia.com/gpu: "1"}}
        """,
        {
            "klass": "B",
            "total_pods": 2,
            "total_gpus": 2,
            "gang.mechanisms": (),
            "groups[0].name": "node",
            "groups[0].patchable": False,
            "groups[0].template_pointer": "",
            "groups[0].containers[0].pointer": "/spec/trainer",
        },
        id="trainjob-unknown-runtime-stands-in-the-trainer-pods",
    ),
    pytest.param(
        """
        apiVersion: trainer.kubeflow.org/v1alpha1
        kind: TrainJob
        metadata: {name: tj}
        spec:
          runtimeRef: {name: not-known}
        """,
        {"klass": "A", "total_pods": 1},
        id="trainjob-num-nodes-default-one-class-a",
    ),
    pytest.param(
        """
        apiVersion: trainer.kubeflow.org/v1alpha1
        kind: TrainJob
        metadata: {name: tj, namespace: team-a}
        spec:
          runtimeRef: {kind: TrainingRuntime, name: team-runtime}
        """,
        {"klass": "B", "total_pods": 4},
        id="trainjob-namespaced-training-runtime",
    ),
    pytest.param(
        """
        apiVersion: trainer.kubeflow.org/v1alpha1
        kind: TrainJob
        metadata: {name: tj}
        spec:
          runtimeRef: {name: torch-elastic-v2.0}
        """,
        {
            "klass": "C",
            "elastic": ElasticRange(
                1, 4, "ClusterTrainingRuntime/torch-elastic-v2.0:spec.mlPolicy.torch.elasticPolicy.minNodes"
            ),
            "restarts.bound": 5,
        },
        id="trainjob-legacy-runtime-elastic-policy-class-c",
    ),
    # ---------------------------------------------------------------- Volcano Job
    pytest.param(
        """
        apiVersion: batch.volcano.sh/v1alpha1
        kind: Job
        metadata: {name: vj, labels: {kueue.x-k8s.io/queue-name: ignored}}
        spec:
          minAvailable: 3
          schedulerName: volcano
          maxRetry: 5
          priorityClassName: spot-batch
          networkTopology: {mode: soft, highestTierAllowed: 1}
          tasks:
            - name: master
              replicas: 1
              template: {spec: {containers: [{name: m, image: x}]}}
            - name: worker
              replicas: 5
              partitionPolicy: {networkTopology: {highestTierName: leaf}}
              template: {spec: {containers: [{name: w, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]}}
        """,
        {
            "klass": "C",
            "total_pods": 6,
            "total_gpus": 5,
            "elastic": ElasticRange(3, 6, "spec.minAvailable"),
            "gang.mechanisms": ("volcano",),
            "gang.min_available": 3,
            "gang.min_field": "spec.minAvailable",
            "gang.queue_name": None,
            "restarts.bound": 5,
            "restarts.field": "spec.maxRetry",
            "priority_class": "spot-batch",
            "tier": "preemptible",
            "groups[1].template_pointer": "/spec/tasks/1/template",
            "topology.constraints": (
                TopologyConstraint("volcano-network-topology", "leaf", True, "worker"),
                TopologyConstraint("volcano-network-topology", "1", False, None),
            ),
            "suspend_path": None,
            "suspended": None,
        },
        id="volcano-min-available-below-total-class-c",
    ),
    pytest.param(
        """
        apiVersion: batch.volcano.sh/v1alpha1
        kind: Job
        metadata: {name: vj}
        spec:
          tasks:
            - {name: worker, replicas: 4, template: {spec: {containers: [{name: w, image: x}]}}}
        """,
        {"klass": "B", "gang.mechanisms": ("volcano",), "gang.min_available": None, "elastic": None},
        id="volcano-default-scheduler-and-min-available-class-b",
    ),
    pytest.param(
        """
        apiVersion: batch.volcano.sh/v1alpha1
        kind: Job
        metadata: {name: vj}
        spec:
          schedulerName: default-scheduler
          tasks:
            - {name: worker, replicas: 4, template: {spec: {containers: [{name: w, image: x}]}}}
        """,
        {"klass": "B", "gang.mechanisms": ()},
        id="volcano-other-scheduler-has-no-gang",
    ),
    # ---------------------------------------------------------------- JobSet
    pytest.param(
        """
        apiVersion: jobset.x-k8s.io/v1alpha2
        kind: JobSet
        metadata:
          name: js
          annotations: {alpha.jobset.sigs.k8s.io/exclusive-topology: cloud.google.com/gke-nodepool}
        spec:
          failurePolicy: {maxRestarts: 2}
          replicatedJobs:
            - name: driver
              template:
                spec:
                  template: {spec: {containers: [{name: d, image: x}]}}
            - name: workers
              replicas: 2
              template:
                metadata:
                  annotations: {alpha.jobset.sigs.k8s.io/exclusive-topology: example.com/block}
                spec:
                  parallelism: 4
                  completions: 3
                  template:
                    spec:
                      schedulingGroup: {podGroupName: pg}
                      containers: [{name: w, image: x, resources: {limits: {nvidia.com/gpu: 8}}}]
        """,
        {
            "klass": "B",
            "total_pods": 7,
            "total_gpus": 48,
            "groups[0].replicas": 1,
            "groups[1].replicas": 6,
            "groups[1].template_pointer": "/spec/replicatedJobs/1/template/spec/template",
            "gang.mechanisms": ("workload-api",),
            "restarts.bound": 2,
            "restarts.field": "spec.failurePolicy.maxRestarts",
            "topology.constraints": (
                TopologyConstraint("jobset-exclusive-topology", "cloud.google.com/gke-nodepool", True, None),
                TopologyConstraint("jobset-exclusive-topology", "example.com/block", True, "workers"),
            ),
            "suspend_path": "/spec/suspend",
        },
        id="jobset-replicas-times-parallelism-exclusive-topology-was",
    ),
    # ---------------------------------------------------------------- Ray
    pytest.param(
        """
        apiVersion: ray.io/v1
        kind: RayCluster
        metadata:
          name: rc
          labels:
            ray.io/gang-scheduling-enabled: "true"
            volcano.sh/network-topology-mode: hard
            volcano.sh/network-topology-highest-tier-allowed: "2"
        spec:
          headGroupSpec:
            template: {spec: {containers: [{name: head, image: ray}]}}
          workerGroupSpecs:
            - groupName: tpu
              replicas: 1
              numOfHosts: 4
              template:
                spec:
                  containers: [{name: w, image: ray, resources: {limits: {google.com/tpu: 4}}}]
            - groupName: clamped
              replicas: 10
              minReplicas: 1
              maxReplicas: 2
              template: {spec: {containers: [{name: w, image: ray}]}}
        """,
        {
            "klass": "B",
            "total_pods": 7,
            "total_gpus": 16,
            "groups[0].name": "head",
            "groups[0].template_pointer": "/spec/headGroupSpec/template",
            "groups[1].replicas": 4,
            "groups[2].replicas": 2,
            "groups[2].template_pointer": "/spec/workerGroupSpecs/1/template",
            "gang.mechanisms": ("ray-batch-scheduler",),
            "topology.constraints": (TopologyConstraint("volcano-network-topology", "2", True, None),),
            "elastic": None,
        },
        id="raycluster-head-plus-workers-times-hosts",
    ),
    pytest.param(
        """
        apiVersion: ray.io/v1
        kind: RayJob
        metadata: {name: rj, labels: {kueue.x-k8s.io/queue-name: q}}
        spec:
          backoffLimit: 2
          rayClusterSpec:
            enableInTreeAutoscaling: true
            headGroupSpec:
              template: {spec: {containers: [{name: head, image: ray}]}}
            workerGroupSpecs:
              - groupName: small
                replicas: 1
                minReplicas: 1
                maxReplicas: 5
                template: {spec: {containers: [{name: w, image: ray}]}}
        """,
        {
            "klass": "C",
            "total_pods": 2,
            "elastic": ElasticRange(2, 6, "spec.rayClusterSpec.workerGroupSpecs[0].minReplicas", fixed=1),
            "gang.mechanisms": ("kueue",),
            "restarts.bound": 2,
            "restarts.field": "spec.backoffLimit",
            "groups[1].template_pointer": "/spec/rayClusterSpec/workerGroupSpecs/0/template",
            "tier": "preemptible",
        },
        id="rayjob-autoscaling-class-c",
    ),
    pytest.param(
        """
        apiVersion: ray.io/v1
        kind: RayJob
        metadata: {name: rj}
        spec:
          clusterSelector: {ray.io/cluster: shared}
        """,
        {"klass": "A", "total_pods": 0, "groups": ()},
        id="rayjob-on-an-existing-cluster-has-no-pods",
    ),
    pytest.param(
        """
        apiVersion: ray.io/v1
        kind: RayJob
        metadata: {name: rj}
        spec:
          rayClusterSpec:
            headGroupSpec:
              template:
                metadata: {labels: {scheduling.x-k8s.io/pod-group: rj}}
                spec: {containers: [{name: head, image: ray}]}
            workerGroupSpecs:
              - groupName: gpu
                replicas: 2
                template:
                  metadata: {labels: {scheduling.x-k8s.io/pod-group: rj}}
                  spec:
                    containers: [{name: w, image: ray, resources: {limits: {nvidia.com/gpu: 4}}}]
          submitterPodTemplate:
            spec:
              restartPolicy: Never
              containers: [{name: submit, image: ray, resources: {limits: {nvidia.com/gpu: 1}}}]
        """,
        {
            "klass": "B",
            "total_pods": 3,
            "total_gpus": 9,
            "groups[2].name": "submitter",
            "groups[2].replicas": 1,
            "groups[2].template_pointer": "/spec/submitterPodTemplate",
            "gang.mechanisms": ("coscheduling",),
            "gang.gaps": (),
        },
        id="rayjob-submitter-is-a-template-outside-the-cluster-count-and-gang",
    ),
    pytest.param(
        """
        apiVersion: ray.io/v1
        kind: RayJob
        metadata: {name: rj}
        spec:
          submissionMode: HTTPMode
          rayClusterSpec:
            headGroupSpec:
              template: {spec: {containers: [{name: head, image: ray}]}}
          submitterPodTemplate:
            spec:
              nodeSelector: {trainguard.dev/pool: inference}
              containers: [{name: submit, image: ray, resources: {limits: {nvidia.com/gpu: 1}}}]
        """,
        {"klass": "A", "total_pods": 1, "total_gpus": 0, "pool_targets": ()},
        id="rayjob-submitter-template-unused-in-http-mode",
    ),
    pytest.param(
        """
        apiVersion: ray.io/v1
        kind: RayJob
        metadata: {name: rj}
        spec:
          clusterSelector: {ray.io/cluster: shared}
          submitterPodTemplate:
            spec: {containers: [{name: submit, image: ray}]}
        """,
        {"klass": "A", "total_pods": 0, "groups[0].name": "submitter"},
        id="rayjob-on-an-existing-cluster-still-has-its-submitter",
    ),
    pytest.param(
        """
        apiVersion: ray.io/v1
        kind: RayService
        metadata: {name: serve}
        spec:
          serveConfigV2: "applications: []"
          rayClusterConfig:
            enableInTreeAutoscaling: true
            headGroupSpec:
              template: {spec: {containers: [{name: head, image: ray}]}}
            workerGroupSpecs:
              - groupName: gpu
                replicas: 2
                minReplicas: 1
                maxReplicas: 4
                template:
                  spec:
                    nodeSelector: {trainguard.dev/pool: training}
                    containers: [{name: w, image: ray, resources: {limits: {nvidia.com/gpu: 1}}}]
        """,
        {
            "role": "inference",
            "total_pods": 3,
            "total_gpus": 2,
            "suspend_path": None,
            "groups[1].template_pointer": "/spec/rayClusterConfig/workerGroupSpecs/0/template",
            "elastic": ElasticRange(2, 5, "spec.rayClusterConfig.workerGroupSpecs[0].minReplicas", fixed=1),
            "pool_targets": (
                {
                    "pool": "training",
                    "field": "spec.rayClusterConfig.workerGroupSpecs[0].template.spec.nodeSelector"
                    "[trainguard.dev/pool]",
                    "via": "nodeSelector",
                },
            ),
        },
        id="rayservice-is-an-inference-ray-cluster",
    ),
    # ---------------------------------------------------------------- LeaderWorkerSet
    pytest.param(
        """
        apiVersion: leaderworkerset.x-k8s.io/v1
        kind: LeaderWorkerSet
        metadata:
          name: vllm
          annotations: {leaderworkerset.sigs.k8s.io/exclusive-topology: example.com/rack}
        spec:
          replicas: 2
          leaderWorkerTemplate:
            size: 4
            leaderTemplate:
              spec: {containers: [{name: l, image: vllm, resources: {limits: {nvidia.com/gpu: 8}}}]}
            workerTemplate:
              spec:
                schedulerName: volcano
                containers: [{name: w, image: vllm, resources: {limits: {nvidia.com/gpu: 8}}}]
        """,
        {
            "role": "inference",
            "klass": "B",
            "total_pods": 8,
            "total_gpus": 64,
            "groups[0].name": "leader",
            "groups[0].replicas": 2,
            "groups[0].template_pointer": "/spec/leaderWorkerTemplate/leaderTemplate",
            "groups[1].replicas": 6,
            "groups[1].template_pointer": "/spec/leaderWorkerTemplate/workerTemplate",
            "gang.mechanisms": ("volcano",),
            "topology.constraints": (
                TopologyConstraint("lws-exclusive-topology", "example.com/rack", True, None),
            ),
            "suspend_path": None,
        },
        id="lws-leader-and-workers-inference",
    ),
    pytest.param(
        """
        apiVersion: leaderworkerset.x-k8s.io/v1
        kind: LeaderWorkerSet
        metadata: {name: lws}
        spec:
          leaderWorkerTemplate:
            workerTemplate: {spec: {containers: [{name: w, image: x}]}}
        """,
        {"klass": "A", "total_pods": 1, "groups[0].name": "worker", "role": "inference"},
        id="lws-defaults-one-group-of-one",
    ),
    # ---------------------------------------------------------------- batch/v1 Job
    pytest.param(
        """
        apiVersion: batch/v1
        kind: Job
        metadata: {name: j}
        spec:
          backoffLimit: 3
          template: {spec: {containers: [{name: t, image: x, resources: {limits: {nvidia.com/gpu: 2}}}]}}
        """,
        {
            "klass": "A",
            "total_pods": 1,
            "total_gpus": 2,
            "groups[0].name": "main",
            "groups[0].template_pointer": "/spec/template",
            "restarts.bound": 3,
            "restarts.field": "spec.backoffLimit",
            "suspended": False,
        },
        id="job-parallelism-defaults-to-one-class-a",
    ),
    pytest.param(
        """
        apiVersion: batch/v1
        kind: Job
        metadata: {name: j}
        spec:
          parallelism: 4
          completions: 2
          suspend: true
          template: {spec: {containers: [{name: t, image: x}]}}
        """,
        {"klass": "B", "total_pods": 2, "suspended": True},
        id="job-parallelism-capped-by-completions",
    ),
    pytest.param(
        """
        apiVersion: batch/v1
        kind: Job
        metadata:
          name: j
          labels: {kueue.x-k8s.io/queue-name: q}
          annotations: {kueue.x-k8s.io/elastic-job: "true", kueue.x-k8s.io/job-min-parallelism: "2"}
        spec:
          parallelism: 6
          template: {spec: {containers: [{name: t, image: x}]}}
        """,
        {
            "klass": "C",
            "elastic": ElasticRange(2, 6, "metadata.annotations['kueue.x-k8s.io/job-min-parallelism']"),
            "gang.mechanisms": ("kueue",),
            "gang.min_available": 2,
            "tier": "preemptible",
        },
        id="job-kueue-elastic-job-with-min-parallelism-class-c",
    ),
    pytest.param(
        """
        apiVersion: batch/v1
        kind: Job
        metadata:
          name: j
          annotations: {kueue.x-k8s.io/elastic-job: "true"}
        spec:
          template: {spec: {containers: [{name: t, image: x}]}}
        """,
        {"klass": "C", "elastic": ElasticRange(1, 1, "metadata.annotations['kueue.x-k8s.io/elastic-job']")},
        id="job-kueue-elastic-job-is-class-c-even-at-one-pod",
    ),
    pytest.param(
        """
        apiVersion: batch/v1
        kind: Job
        metadata:
          name: j
          labels: {kueue.x-k8s.io/queue-name: q}
          annotations: {kueue.x-k8s.io/job-min-parallelism: "5"}
        spec:
          parallelism: 20
          template: {spec: {containers: [{name: t, image: x}]}}
        """,
        {
            "klass": "C",
            "elastic": ElasticRange(5, 20, "metadata.annotations['kueue.x-k8s.io/job-min-parallelism']"),
            "gang.min_available": 5,
            "gang.min_field": "metadata.annotations['kueue.x-k8s.io/job-min-parallelism']",
        },
        id="job-kueue-partial-admission-class-c",
    ),
    pytest.param(
        """
        apiVersion: batch/v1
        kind: Job
        metadata: {name: j}
        spec:
          parallelism: 10
          template:
            metadata:
              annotations: {kueue.x-k8s.io/podset-unconstrained-topology: "true"}
            spec: {containers: [{name: t, image: x}]}
        """,
        {"topology.constraints": (TopologyConstraint("kueue-tas-unconstrained", "", False, "main"),)},
        id="job-kueue-tas-unconstrained-is-recorded",
    ),
    pytest.param(
        """
        apiVersion: batch/v1
        kind: Job
        metadata: {name: j}
        spec:
          parallelism: 8
          template:
            metadata:
              annotations:
                kueue.x-k8s.io/podset-slice-required-topology-constraints: >-
                  [{"topology": "example.com/block", "size": 8}, {"topology": "example.com/rack", "size": 4}]
            spec: {containers: [{name: t, image: x}]}
        """,
        {
            "topology.constraints": (
                TopologyConstraint("kueue-tas-slice-required", "example.com/block", True, "main"),
                TopologyConstraint("kueue-tas-slice-required", "example.com/rack", True, "main"),
            )
        },
        id="job-kueue-tas-multi-layer-slices",
    ),
    # ---------------------------------------------------------------- Deployment / StatefulSet
    pytest.param(
        """
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: serve}
        spec:
          replicas: 3
          template:
            metadata: {labels: {kueue.x-k8s.io/queue-name: serving}}
            spec: {containers: [{name: s, image: x, resources: {limits: {nvidia.com/gpu: 1}}}]}
        """,
        {
            "role": "inference",
            "klass": "B",
            "total_pods": 3,
            "total_gpus": 3,
            "gang.mechanisms": ("kueue",),
            "gang.queue_name": "serving",
            "suspend_path": None,
        },
        id="deployment-inference-replicas-template-queue-label",
    ),
    pytest.param(
        """
        apiVersion: apps/v1
        kind: StatefulSet
        metadata: {name: db, labels: {trainguard.dev/role: training}}
        spec:
          template: {spec: {containers: [{name: s, image: x}]}}
        """,
        {"role": "training", "klass": "A", "total_pods": 1},
        id="statefulset-role-label-override",
    ),
    # ---------------------------------------------------------------- Pod
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: p, labels: {kueue.x-k8s.io/queue-name: q}}
        spec:
          containers: [{name: t, image: x, resources: {limits: {nvidia.com/gpu: 4}}}]
        """,
        {
            "klass": "A",
            "role": "training",
            "total_pods": 1,
            "total_gpus": 4,
            "groups[0].name": "pod",
            "groups[0].template_pointer": "",
            "groups[0].containers[0].pointer": "/spec/containers/0",
            "gang.mechanisms": (),
            "gang.queue_name": "q",
            "owner": None,
            "kueue_managed": False,
            "suspend_path": None,
        },
        id="pod-bare-single-class-a",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: p}
        spec:
          nodeSelector: {trainguard.dev/pool: training}
          containers:
            - name: t
              image: x
              command: [torchrun, --nnodes=4, --nproc-per-node=8, train.py]
              resources: {limits: {nvidia.com/gpu: 8}}
        """,
        {
            "klass": "B",
            "total_pods": 4,
            "total_gpus": 32,
            "gang.mechanisms": (),
            "pool_targets": (
                {
                    "pool": "training",
                    "field": "spec.nodeSelector[trainguard.dev/pool]",
                    "via": "nodeSelector",
                },
            ),
        },
        id="pod-bare-torchrun-nnodes-4-stands-for-a-gang-class-b",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: p}
        spec:
          containers:
            - name: t
              image: x
              command: [bash, -c, "torchrun --nnodes=2:4 --rdzv-backend=c10d train.py"]
        """,
        {"klass": "C", "total_pods": 4, "elastic": ElasticRange(2, 4, "spec.containers[0]", launcher=True)},
        id="pod-bare-torchrun-elastic-class-c",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: p}
        spec:
          containers: [{name: t, image: x, command: [torchrun, --standalone, --nproc-per-node=8, train.py]}]
        """,
        {"klass": "A", "total_pods": 1},
        id="pod-bare-torchrun-standalone-class-a",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata:
          name: p
          labels: {kueue.x-k8s.io/queue-name: q}
          annotations: {kueue.x-k8s.io/pod-group-name: g, kueue.x-k8s.io/pod-group-total-count: "3"}
        spec:
          containers: [{name: t, image: x, resources: {limits: {nvidia.com/gpu: 2}}}]
        """,
        {
            "klass": "B",
            "total_pods": 3,
            "total_gpus": 6,
            "gang.mechanisms": ("kueue-pod-group",),
            "gang.min_available": 3,
            "gang.min_field": "metadata.annotations['kueue.x-k8s.io/pod-group-total-count']",
        },
        id="pod-kueue-pod-group-name-as-annotation",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata:
          name: p
          labels: {scheduling.x-k8s.io/pod-group: pg}
          annotations: {scheduling.k8s.io/group-name: vpg}
        spec:
          schedulingGroup: {podGroupName: was}
          containers: [{name: t, image: x}]
        """,
        {"gang.mechanisms": ("workload-api", "coscheduling", "volcano-podgroup"), "gang.min_available": None},
        id="pod-coscheduling-volcano-and-workload-api-groups",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata:
          name: ddp-worker-1
          namespace: research
          labels:
            training.kubeflow.org/job-name: ddp
            training.kubeflow.org/operator-name: pytorchjob-controller
            training.kubeflow.org/replica-type: worker
            training.kubeflow.org/replica-index: "1"
          ownerReferences:
            - {apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: ddp, uid: u, controller: true}
        spec:
          containers:
            - name: pytorch
              image: x
              command: [torchrun, train.py]
              env:
                - {name: PET_NNODES, value: "3"}
                - {name: PET_NPROC_PER_NODE, value: "8"}
                - {name: PET_NODE_RANK, value: "2"}
              resources: {limits: {nvidia.com/gpu: 8}}
        """,
        {
            "owner": Owner("PyTorchJob", "ddp", "label training.kubeflow.org/job-name"),
            "member": True,
            "klass": "B",
            "total_pods": 3,
            "role": "training",
            "groups[0].containers[0].torchrun.sources": {"nnodes": "env", "nproc_per_node": "env"},
        },
        id="pod-member-of-pytorchjob-class-from-pet-nnodes",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata:
          name: ddp-worker-0
          labels:
            training.kubeflow.org/job-name: ddp
            trainguard.dev/class: C
          ownerReferences:
            - {apiVersion: kubeflow.org/v1, kind: PyTorchJob, name: ddp, uid: u, controller: true}
        spec:
          containers: [{name: pytorch, image: x, env: [{name: PET_NNODES, value: "4"}]}]
        """,
        {"klass": "C", "owner.kind": "PyTorchJob", "total_pods": 4},
        id="pod-member-class-label-stamped-on-the-template-wins",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata:
          name: js-workers-0-1
          labels:
            jobset.sigs.k8s.io/jobset-name: js
            jobset.sigs.k8s.io/replicatedjob-name: workers
            batch.kubernetes.io/job-name: js-workers-0
            job-name: js-workers-0
          ownerReferences:
            - {apiVersion: batch/v1, kind: Job, name: js-workers-0, uid: u, controller: true}
        spec:
          containers: [{name: w, image: x, command: [torchrun, --nnodes=4, train.py]}]
        """,
        {
            "owner": Owner("JobSet", "js", "label jobset.sigs.k8s.io/jobset-name"),
            "klass": "B",
            "total_pods": 4,
        },
        id="pod-member-of-jobset",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata:
          name: sample-job-abc
          labels:
            batch.kubernetes.io/job-name: sample-job
            kueue.x-k8s.io/queue-name: q
            kueue.x-k8s.io/podset: main
          ownerReferences:
            - {apiVersion: batch/v1, kind: Job, name: sample-job, uid: u, controller: true}
        spec:
          schedulingGates: [{name: kueue.x-k8s.io/admission}]
          containers: [{name: w, image: x}]
        """,
        {
            "owner": Owner("Job", "sample-job", "label batch.kubernetes.io/job-name"),
            "kueue_managed": True,
            "klass": "A",
        },
        id="pod-member-kueue-managed",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata:
          name: plain
          labels: {kueue.x-k8s.io/managed: "true"}
        spec:
          containers: [{name: w, image: x}]
        """,
        {"owner": None, "kueue_managed": True},
        id="pod-kueue-managed-label",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata:
          name: web-7d9-x
          ownerReferences:
            - {apiVersion: apps/v1, kind: ReplicaSet, name: web-7d9, uid: u, controller: true}
        spec:
          containers: [{name: w, image: x}]
        """,
        {"owner": Owner("ReplicaSet", "web-7d9", "ownerReferences"), "role": "inference"},
        id="pod-owned-by-a-replicaset-is-inference",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata:
          name: vllm-0-1
          labels: {leaderworkerset.sigs.k8s.io/name: vllm, trainguard.dev/role: training}
        spec:
          containers: [{name: w, image: x}]
        """,
        {"owner.kind": "LeaderWorkerSet", "role": "training"},
        id="pod-lws-member-role-label-override",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata:
          name: rc-head
          labels:
            ray.io/cluster: rj-raycluster-x
            ray.io/originated-from-crd: RayJob
            ray.io/originated-from-cr-name: rj
        spec:
          containers: [{name: w, image: x}]
        """,
        {"owner": Owner("RayJob", "rj", "label ray.io/originated-from-crd"), "role": "training"},
        id="pod-ray-member-points-at-the-rayjob",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata:
          name: tj-node-0-0
          labels:
            jobset.sigs.k8s.io/jobset-name: tj
            trainer.kubeflow.org/trainjob-ancestor-step: trainer
        spec:
          containers: [{name: node, image: x}]
        """,
        {"owner": Owner("TrainJob", "tj", "label jobset.sigs.k8s.io/jobset-name")},
        id="pod-trainjob-member",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata:
          generateName: worker-
          labels: {volcano.sh/job-name: vj}
        spec:
          tolerations: [{operator: Exists}]
          containers: [{name: w, image: x}]
        """,
        {
            "name": "worker-",
            "namespace": "default",
            "owner": Owner("Job", "vj", "label volcano.sh/job-name"),
            "pool_targets": ({"pool": "*", "field": "spec.tolerations[0]", "via": "toleration"},),
        },
        id="pod-volcano-member-generate-name-tolerate-all",
    ),
]


# Gang, group identity and TrainJob runtimePatches: how each scheduler actually gangs pods.
CASES += [
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata:
          name: node-0
          labels: {kueue.x-k8s.io/queue-name: q, scheduling.x-k8s.io/pod-group: run-1}
        spec:
          containers: [{name: t, image: x, command: [torchrun, --nnodes=2, train.py]}]
        """,
        {"gang.mechanisms": ("coscheduling",), "gang.group_name": "run-1", "group_identity": "run-1"},
        id="pod-coscheduling-group-names-the-pods",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: node-0, labels: {kueue.x-k8s.io/queue-name: q}}
        spec:
          containers: [{name: t, image: x, command: [torchrun, --nnodes=2, train.py]}]
        """,
        {"gang.mechanisms": (), "gang.group_name": None, "group_identity": "", "klass": "B"},
        id="pod-without-a-group-has-no-identity-to-share",
    ),
    pytest.param(
        """
        apiVersion: v1
        kind: Pod
        metadata:
          name: worker-0
          labels: {training.kubeflow.org/job-name: ddp, scheduling.x-k8s.io/pod-group: ddp}
        spec:
          containers: [{name: t, image: x}]
        """,
        {"gang.group_name": None, "group_identity": "worker-0"},
        id="pod-of-a-controller-keeps-its-own-identity",
    ),
    pytest.param(
        """
        apiVersion: kubeflow.org/v1
        kind: MPIJob
        metadata: {name: m, labels: {kueue.x-k8s.io/queue-name: q}}
        spec:
          mpiReplicaSpecs:
            Launcher: {template: {spec: {containers: [{name: l, image: x}]}}}
            Worker: {replicas: 2, template: {spec: {containers: [{name: w, image: x}]}}}
        """,
        {"gang.mechanisms": (), "gang.queue_name": "q"},
        id="mpijob-v1-queue-label-is-no-gang",
    ),
    pytest.param(
        """
        apiVersion: jobset.x-k8s.io/v1alpha2
        kind: JobSet
        metadata: {name: js}
        spec:
          replicatedJobs:
            - name: idle
              replicas: 0
              template: {spec: {template: {spec: {containers: [{name: i, image: x}]}}}}
            - name: workers
              replicas: 2
              template:
                spec:
                  template:
                    metadata: {labels: {scheduling.x-k8s.io/pod-group: js}}
                    spec: {containers: [{name: w, image: x}]}
        """,
        {"gang.mechanisms": ("coscheduling",), "gang.gaps": ()},
        id="jobset-coscheduling-on-every-template-that-runs-pods",
    ),
    pytest.param(
        """
        apiVersion: jobset.x-k8s.io/v1alpha2
        kind: JobSet
        metadata: {name: js}
        spec:
          replicatedJobs:
            - name: driver
              template: {spec: {template: {spec: {containers: [{name: d, image: x}]}}}}
            - name: workers
              replicas: 2
              template:
                spec:
                  template:
                    metadata: {labels: {scheduling.x-k8s.io/pod-group: js}}
                    spec: {containers: [{name: w, image: x}]}
        """,
        {
            "gang.mechanisms": (),
            "gang.gaps": (
                {
                    "group": "driver",
                    "field": "spec.replicatedJobs[0].template.spec.template.metadata.labels",
                    "problem": "lacks label scheduling.x-k8s.io/pod-group that the other templates carry",
                },
            ),
        },
        id="jobset-template-without-the-coscheduling-label-is-a-gap",
    ),
    pytest.param(
        """
        apiVersion: batch.volcano.sh/v1alpha1
        kind: Job
        metadata: {name: vj}
        spec:
          minAvailable: 3
          tasks:
            - {name: ps, replicas: 1, template: {spec: {schedulerName: default-scheduler, containers: [{name: p, image: x}]}}}
            - {name: worker, replicas: 2, template: {spec: {containers: [{name: w, image: x}]}}}
        """,
        {
            "gang.mechanisms": (),
            "gang.min_available": 3,
            "gang.gaps[0].field": "spec.tasks[0].template.spec.schedulerName",
        },
        id="volcano-task-pinning-default-scheduler-escapes",
    ),
    pytest.param(
        """
        apiVersion: batch.volcano.sh/v1alpha1
        kind: Job
        metadata: {name: vj}
        spec:
          minAvailable: 3
          tasks:
            - {name: ps, replicas: 1, template: {spec: {schedulerName: volcano, containers: [{name: p, image: x}]}}}
            - {name: worker, replicas: 2, template: {spec: {containers: [{name: w, image: x}]}}}
        """,
        {"gang.mechanisms": ("volcano",), "gang.gaps": ()},
        id="volcano-task-naming-volcano-stays-in-the-gang",
    ),
    pytest.param(
        """
        apiVersion: kubeflow.org/v1
        kind: PyTorchJob
        metadata: {name: p}
        spec:
          pytorchReplicaSpecs:
            Master: {template: {spec: {schedulerName: volcano, containers: [{name: m, image: x}]}}}
            Worker:
              replicas: 2
              template: {spec: {schedulerName: default-scheduler, containers: [{name: w, image: x}]}}
        """,
        {"gang.mechanisms": (), "gang.gaps[0].group": "Worker"},
        id="pytorchjob-worker-pinning-another-scheduler-escapes-volcano",
    ),
    pytest.param(
        """
        apiVersion: trainer.kubeflow.org/v1alpha1
        kind: TrainJob
        metadata: {name: tj, namespace: default}
        spec:
          runtimeRef: {name: torch-gang}
          trainer: {numNodes: 4}
          runtimePatches:
            - manager: kueue.x-k8s.io/manager
              trainingRuntimeSpec:
                template:
                  metadata:
                    annotations: {alpha.jobset.sigs.k8s.io/exclusive-topology: example.com/block}
                  spec:
                    replicatedJobs:
                      - name: node
                        template:
                          spec:
                            template:
                              metadata:
                                annotations: {kueue.x-k8s.io/podset-preferred-topology: example.com/rack}
                              spec:
                                affinity:
                                  podAffinity:
                                    requiredDuringSchedulingIgnoredDuringExecution:
                                      - {labelSelector: {matchLabels: {a: b}}, topologyKey: example.com/host}
        """,
        {
            "unknown_runtime": None,
            # The runtime's own two constraints, then the three the Kueue-managed patch adds.
            "topology.constraints": (
                TopologyConstraint("kueue-tas-preferred", "example.com/rack", False, "node"),
                TopologyConstraint("volcano-network-topology", "2", True, None),
                TopologyConstraint("jobset-exclusive-topology", "example.com/block", True, None),
                TopologyConstraint("kueue-tas-preferred", "example.com/rack", False, "node"),
                TopologyConstraint("pod-affinity", "example.com/host", True, "node"),
            ),
        },
        id="trainjob-runtime-patches-are-constraints",
    ),
    pytest.param(
        """
        apiVersion: trainer.kubeflow.org/v1alpha1
        kind: TrainJob
        metadata: {name: tj}
        spec:
          runtimeRef: {name: nowhere, kind: TrainingRuntime}
          trainer: {numNodes: 2, resourcesPerNode: {limits: {nvidia.com/gpu: 4}}}
        """,
        {"unknown_runtime": "TrainingRuntime/nowhere", "total_gpus": 8, "groups[0].name": "node"},
        id="trainjob-unknown-runtime-is-named",
    ),
    pytest.param(
        """
        apiVersion: trainer.kubeflow.org/v1alpha1
        kind: TrainJob
        metadata: {name: tj}
        spec:
          runtimeRef: {name: nowhere}
          runtimePatches:
            - manager: kueue.x-k8s.io/manager
              trainingRuntimeSpec:
                template:
                  spec:
                    replicatedJobs:
                      - name: node
                        template:
                          spec:
                            template:
                              spec:
                                nodeSelector: {trainguard.dev/pool: training}
                                tolerations: [{key: trainguard.dev/pool, operator: Exists}]
        """,
        {
            "pool_targets": (
                {
                    "pool": "training",
                    "field": "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
                    ".template.spec.template.spec.nodeSelector[trainguard.dev/pool]",
                    "via": "nodeSelector",
                },
                {
                    "pool": "*",
                    "field": "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0]"
                    ".template.spec.template.spec.tolerations[0]",
                    "via": "toleration",
                },
            )
        },
        id="trainjob-runtime-patches-target-pools",
    ),
    pytest.param(
        "{apiVersion: v1, kind: Pod, metadata: {name: p, labels: {kueue.x-k8s.io/pod-group-name: g}},"
        " spec: {containers: [{name: t, image: x}]}}",
        {
            "gang.mechanisms": (),
            "gang.group_name": "g",
            "gang.group_count_errors": (
                {
                    "group": "g",
                    "groupField": "metadata.labels['kueue.x-k8s.io/pod-group-name']",
                    "countField": "metadata.annotations['kueue.x-k8s.io/pod-group-total-count']",
                    "count": "",
                },
            ),
        },
        id="kueue-pod-group-without-its-count-is-a-fact-not-an-input-error",
    ),
    pytest.param(
        "{apiVersion: v1, kind: Pod, metadata: {name: x, labels: {kueue.x-k8s.io/pod-group-name: g},"
        " annotations: {kueue.x-k8s.io/pod-group-total-count: two}}, spec: {}}",
        {"gang.mechanisms": (), "gang.group_count_errors[0].count": "two", "total_pods": 1},
        id="pod-group-total-count-not-an-integer-is-a-fact",
    ),
    pytest.param(
        "{apiVersion: v1, kind: Pod, metadata: {name: x, labels: {kueue.x-k8s.io/pod-group-name: g},"
        " annotations: {kueue.x-k8s.io/pod-group-total-count: ' 3 '}}, spec: {}}",
        {"gang.mechanisms": ("kueue-pod-group",), "gang.group_count_errors": (), "total_pods": 3},
        id="pod-group-total-count-read",
    ),
]


@pytest.mark.parametrize(("manifest", "expected"), CASES)
def test_adapter(manifest: str | dict[str, Any], expected: dict[str, Any]) -> None:
    w = _build(manifest)
    got = {path: _get(w, path) for path in expected}
    assert got == expected
    w.view()  # the CEL view renders for every case


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}, id="service"),
        pytest.param({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}, id="configmap"),
        pytest.param(TORCH_RUNTIME, id="cluster-training-runtime"),
        pytest.param({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue"}, id="cluster-queue"),
        pytest.param({"apiVersion": "kubeflow.org/v9", "kind": "PyTorchJob"}, id="unknown-version"),
        pytest.param({"kind": "Pod"}, id="no-api-version"),
    ],
)
def test_not_a_workload(obj: dict[str, Any]) -> None:
    assert build_workload(obj, CTX) is None


@pytest.mark.parametrize(
    ("manifest", "field", "message"),
    [
        pytest.param(
            _pytorchjob(workers={"replicas": "abc"}), "spec.pytorchReplicaSpecs.Worker.replicas", "integer"
        ),
        pytest.param(
            _pytorchjob(workers={"replicas": -1}), "spec.pytorchReplicaSpecs.Worker.replicas", "negative"
        ),
        pytest.param(
            _pytorchjob(workers={"replicas": True}), "spec.pytorchReplicaSpecs.Worker.replicas", "integer"
        ),
        pytest.param(
            "{apiVersion: kubeflow.org/v1, kind: PyTorchJob, metadata: {name: x},"
            " spec: {pytorchReplicaSpecs: {Worker: {template: [a]}}}}",
            "spec.pytorchReplicaSpecs.Worker.template",
            "mapping",
            id="template-not-a-mapping",
        ),
        pytest.param(
            "{apiVersion: batch/v1, kind: Job, metadata: {name: x},"
            " spec: {template: {spec: {containers: x}}}}",
            "spec.template.spec.containers",
            "list",
            id="containers-not-a-list",
        ),
        pytest.param(
            "{apiVersion: batch/v1, kind: Job, metadata: {name: x},"
            " spec: {template: {spec: {containers: [{name: c,"
            " resources: {limits: {nvidia.com/gpu: abc}}}]}}}}",
            "spec.template.spec.containers[0].resources.limits['nvidia.com/gpu']",
            "whole number",
            id="gpu-quantity-not-a-number",
        ),
        pytest.param(
            "{apiVersion: batch/v1, kind: Job, metadata: {name: x},"
            " spec: {template: {spec: {containers: [{name: c,"
            " resources: {limits: {nvidia.com/gpu: 500m}}}]}}}}",
            "spec.template.spec.containers[0].resources.limits['nvidia.com/gpu']",
            "whole number",
            id="gpu-quantity-fractional",
        ),
        pytest.param(
            "{apiVersion: v1, kind: Pod, metadata: {name: x}, spec: {terminationGracePeriodSeconds: soon}}",
            "spec.terminationGracePeriodSeconds",
            "integer",
            id="grace-period-not-an-integer",
        ),
        pytest.param(
            "{apiVersion: v1, kind: Pod, metadata: [x]}",
            "metadata",
            "mapping",
            id="metadata-not-a-mapping",
        ),
        pytest.param(
            "{apiVersion: batch/v1, kind: Job, metadata: {name: x}, spec: [x]}",
            "spec",
            "mapping",
            id="spec-not-a-mapping",
        ),
        pytest.param(
            "{apiVersion: batch/v1, kind: Job, metadata: {name: x, annotations:"
            " {kueue.x-k8s.io/job-min-parallelism: many}}, spec: {}}",
            "metadata.annotations['kueue.x-k8s.io/job-min-parallelism']",
            "integer",
            id="job-min-parallelism-not-an-integer",
        ),
        pytest.param(
            "{apiVersion: trainer.kubeflow.org/v1alpha1, kind: TrainJob, metadata: {name: x},"
            " spec: {runtimeRef: {name: torch-gang}, trainer: {numNodes: -2}}}",
            "spec.trainer.numNodes",
            "negative",
            id="trainjob-negative-num-nodes",
        ),
        pytest.param(
            "{apiVersion: trainer.kubeflow.org/v1alpha1, kind: TrainJob, metadata: {name: x},"
            " spec: {runtimeRef: {name: torch-gang},"
            " trainer: {resourcesPerNode: {limits: {nvidia.com/gpu: x}}}}}",
            "spec.trainer.resourcesPerNode.limits['nvidia.com/gpu']",
            "whole number",
            id="trainjob-resources-per-node-gpu-not-a-number",
        ),
        pytest.param(
            "{apiVersion: trainer.kubeflow.org/v1alpha1, kind: TrainJob, metadata: {name: x},"
            " spec: {runtimeRef: {name: torch-gang}, trainer: {env: {A: b}}}}",
            "spec.trainer.env",
            "list",
            id="trainjob-trainer-env-not-a-list",
        ),
        pytest.param(
            "{apiVersion: trainer.kubeflow.org/v1alpha1, kind: TrainJob, metadata: {name: x},"
            " spec: {runtimeRef: {name: broken}}}",
            "ClusterTrainingRuntime/broken:spec.template.spec.replicatedJobs[0].template.spec.template"
            ".spec.containers[0].env",
            "list",
            id="trainjob-runtime-error-names-the-runtime",
        ),
        pytest.param(
            "{apiVersion: batch.volcano.sh/v1alpha1, kind: Job, metadata: {name: x}, spec: {tasks: {a: b}}}",
            "spec.tasks",
            "list",
            id="volcano-tasks-not-a-list",
        ),
        pytest.param(
            "{apiVersion: trainer.kubeflow.org/v1alpha1, kind: TrainJob, metadata: {name: t},"
            " spec: {runtimeRef: {name: r}, runtimePatches: [{manager: m, trainingRuntimeSpec: {template: []}}]}}",
            "spec.runtimePatches[0].trainingRuntimeSpec.template",
            "mapping",
            id="trainjob-runtime-patch-template-not-a-mapping",
        ),
    ],
)
def test_undecidable_input_names_the_field(manifest: str | dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        build_workload(_load(manifest), CTX)
    assert err.value.field == field
    assert message in err.value.message


@pytest.mark.parametrize(
    "manifest",
    [
        pytest.param("{apiVersion: batch/v1, kind: Job, metadata: {name: x}}", id="job-without-spec"),
        pytest.param(
            "{apiVersion: batch/v1, kind: Job, metadata: {name: x}, spec: {template: {}}}", id="no-pod-spec"
        ),
        pytest.param(
            "{apiVersion: kubeflow.org/v1, kind: PyTorchJob, metadata: {name: x},"
            " spec: {pytorchReplicaSpecs: {Worker: {replicas: 2}}}}",
            id="replica-spec-without-template",
        ),
        pytest.param("{apiVersion: v1, kind: Pod}", id="pod-without-metadata-or-spec"),
        pytest.param("{apiVersion: v1, kind: Pod, metadata: null, spec: null}", id="pod-with-null-metadata"),
        pytest.param(
            "{apiVersion: jobset.x-k8s.io/v1alpha2, kind: JobSet, metadata: {name: x},"
            " spec: {replicatedJobs: [{name: a, template: null}]}}",
            id="jobset-replicated-job-without-template",
        ),
        pytest.param(
            "{apiVersion: trainer.kubeflow.org/v1alpha1, kind: TrainJob, metadata: {name: x}, spec: {}}",
            id="trainjob-without-runtime-ref",
        ),
        pytest.param(
            "{apiVersion: v1, kind: Pod, metadata: {name: x, labels: {a: 1, b: true, c: null}},"
            " spec: {containers: [{name: c, command: torchrun, env: [{name: N, value: 3}, {value: x}]}]}}",
            id="scalars-where-strings-belong",
        ),
        pytest.param(
            "{apiVersion: ray.io/v1, kind: RayCluster, metadata: {name: x}, spec: {workerGroupSpecs: [{}]}}",
            id="ray-group-with-nothing",
        ),
        pytest.param(
            "{apiVersion: leaderworkerset.x-k8s.io/v1, kind: LeaderWorkerSet, metadata: {name: x}, spec: {}}",
            id="lws-without-templates",
        ),
    ],
)
def test_odd_but_valid_input_still_builds(manifest: str) -> None:
    w = _build(manifest)
    assert w.klass in ("A", "B", "C")
    w.view()


def test_labels_are_copies_not_views_of_the_object() -> None:
    obj = _pytorchjob(labels={"team": "a"})
    w = _build(obj)
    obj["metadata"]["labels"]["team"] = "b"
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["name"] = "renamed"
    assert w.labels == {"team": "a"}
    assert w.groups[1].containers[0].name == "pytorch"


def test_pod_namespace_falls_back_to_the_context() -> None:
    w = _build(
        "{apiVersion: v1, kind: Pod, metadata: {name: x}}", AdaptContext(config=CONFIG, namespace="ml")
    )
    assert w.namespace == "ml"


def test_config_pool_keys_are_used() -> None:
    raw = copy.deepcopy(_DEFAULTS.raw)
    raw["pools"].update(labelKey="example.com/node-pool", taintKey="example.com/dedicated")
    ctx = AdaptContext(config=PlatformConfig(raw=raw, source="test"))
    w = _build(
        """
        apiVersion: v1
        kind: Pod
        metadata: {name: p}
        spec:
          nodeSelector: {example.com/node-pool: gpu-inference, trainguard.dev/pool: training}
          tolerations: [{key: example.com/dedicated, value: gpu-inference, effect: NoSchedule}]
        """,
        ctx,
    )
    assert [(p["pool"], p["via"]) for p in w.pool_targets] == [
        ("gpu-inference", "nodeSelector"),
        ("gpu-inference", "toleration"),
    ]


def test_pointers_escape_keys_per_rfc_6901() -> None:
    from jsonpointer import resolve_pointer

    obj = _pytorchjob()
    obj["spec"]["pytorchReplicaSpecs"]["a/b~c"] = obj["spec"]["pytorchReplicaSpecs"].pop("Worker")
    w = _build(obj)
    assert w.groups[1].template_pointer == "/spec/pytorchReplicaSpecs/a~1b~0c/template"
    assert resolve_pointer(obj, w.groups[1].containers[0].pointer)["name"] == "pytorch"

"""What the benchmarks feed trainguard: the corpus, the ~11.6 KB training Pod, AdmissionReview
bodies, an engine of the shipped policies (how they measure and report is in measure.py).

Bodies are AdmissionReview v1 requests built from the corpus's training Pods and jobs (each
rendered as the API server would send it: uid, kind, resource, namespace, userInfo, the object
with a uid, a creationTimestamp and managedFields), plus one large bare training Pod of about
11.6 KB, the size the design's engine bar speaks of.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BENCH_DIR = Path(__file__).resolve().parent
if importlib.util.find_spec("webhook") is None:  # not installed, nor on PYTHONPATH: this checkout
    sys.path.insert(0, str(REPO))

# Bodies the HTTP benchmarks cycle through: realistic sizes for one training object.
MIN_BODY_BYTES = 1024
MAX_BODY_BYTES = 12 * 1024
BIG_POD_TARGET_BYTES = 11_600  # compact JSON of the object itself


def shared_dir() -> Path:
    env = os.environ.get("TRAINGUARD_SHARED_DIR")
    path = Path(env) if env else REPO.parent / "shared"
    if not (path / "corpus").is_dir():
        raise SystemExit(f"no corpus at {path}/corpus (set TRAINGUARD_SHARED_DIR)")
    return path


def corpus_files() -> list[Path]:
    return sorted((shared_dir() / "corpus").rglob("*.yaml"))


def corpus_documents() -> list[tuple[str, dict[str, Any]]]:
    """(source, object) for every document of the corpus, as `trainguard check` reads them."""
    from webhook.documents import read_manifests

    root = shared_dir() / "corpus"
    docs = read_manifests([str(root)])
    return [(str(Path(d.path).relative_to(root)) + f"#{d.index}", d.data) for d in docs]


def engine_for(backend: str = "cel-expr-python", policies: Sequence[str | Path] | None = None) -> Any:
    from webhook.config import load_config
    from webhook.engine import Engine, default_policies_dir, load_policy_set

    paths = list(policies) if policies else [default_policies_dir()]
    return Engine(load_policy_set(paths, backend), load_config())


def decider(engine: Any) -> Any:
    """The engine's method that decides one object: `decide`, or `review` in trees from before it
    was renamed (compare_engine.py and compare_decisions.py run an older tree beside this one)."""
    return getattr(engine, "decide", None) or engine.review


def corpus_workloads() -> list[tuple[str, dict[str, Any]]]:
    """Corpus documents that trainguard decides (a Workload), namespace defaulted."""
    from webhook.config import load_config
    from webhook.workloads import AdaptContext, build_workload

    ctx = AdaptContext(config=load_config(), runtimes={}, priority_classes={}, namespace="default")
    out = []
    for source, obj in corpus_documents():
        try:
            if build_workload(obj, ctx) is not None:
                out.append((source, obj))
        except Exception:  # an object the adapters refuse is not a benchmark input
            continue
    return out


# -- the ~11.6 KB training Pod --------------------------------------------------------------------

_NCCL_ENV = {
    "NCCL_DEBUG": "WARN",
    "NCCL_SOCKET_IFNAME": "eth0",
    "NCCL_IB_DISABLE": "0",
    "NCCL_IB_HCA": "mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7",
    "NCCL_IB_GID_INDEX": "3",
    "NCCL_NET_GDR_LEVEL": "PHB",
    "NCCL_CROSS_NIC": "0",
    "NCCL_ALGO": "Ring,Tree",
    "NCCL_MIN_NCHANNELS": "4",
    "NCCL_ASYNC_ERROR_HANDLING": "1",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    "TORCH_DISTRIBUTED_DEBUG": "OFF",
    "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "OMP_NUM_THREADS": "8",
    "HF_HOME": "/cache/huggingface",
    "HF_DATASETS_CACHE": "/cache/huggingface/datasets",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_PROJECT": "llm-pretrain",
    "WANDB_MODE": "offline",
    "MASTER_PORT": "29500",
    "LOGLEVEL": "INFO",
}


def big_training_pod(target_bytes: int = BIG_POD_TARGET_BYTES) -> dict[str, Any]:
    """A bare torchrun Pod of a 4-pod Kueue pod group, 8 GPUs, preemptible with a checkpoint
    contract, as the API server hands it to a webhook (managedFields included); padded with
    realistic env vars until its compact JSON is about `target_bytes`."""
    name = "llama-70b-pretrain-worker-0"
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in _NCCL_ENV.items()]
    env += [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
        {
            "name": "WANDB_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key", "optional": True}},
        },
        {"name": "MASTER_ADDR", "value": "llama-70b-pretrain-worker-0.llama-70b-pretrain"},
    ]
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml-research",
            "uid": "5d1c8a4e-2f0b-4c37-9a51-7c2e0f9b6d13",
            "creationTimestamp": "2025-06-01T12:00:00Z",
            "labels": {
                "app.kubernetes.io/name": "llama-70b-pretrain",
                "app.kubernetes.io/part-of": "llm-pretrain",
                "team": "foundation-models",
                "trainguard.dev/tier": "preemptible",
                "kueue.x-k8s.io/queue-name": "research",
                "kueue.x-k8s.io/pod-group-name": "llama-70b-pretrain",
            },
            "annotations": {
                "kueue.x-k8s.io/pod-group-total-count": "4",
                "trainguard.dev/checkpoint-interval": "30m",
                "trainguard.dev/checkpoint-uri": "s3://ml-checkpoints/llama-70b/run-0412",
                "trainguard.dev/checkpoint-owner": "foundation-models@example.com",
                "kueue.x-k8s.io/podset-preferred-topology": "cloud.provider.com/topology-rack",
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 300,
            "schedulerName": "default-scheduler",
            "serviceAccountName": "trainer",
            "hostname": name,
            "subdomain": "llama-70b-pretrain",
            "nodeSelector": {
                "trainguard.dev/pool": "training",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
            },
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "trainguard.dev/pool",
                    "operator": "Equal",
                    "value": "training",
                    "effect": "NoSchedule",
                },
            ],
            "initContainers": [
                {
                    "name": "fetch-tokenizer",
                    "image": "registry.example.com/ml/tools:2025.05",
                    "command": ["sh", "-c", "cp -r /opt/tokenizer /cache/tokenizer"],
                    "volumeMounts": [{"name": "cache", "mountPath": "/cache"}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.example.com/ml/llm-train:2025.05-cuda12.4-torch2.6",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["torchrun"],
                    "args": [
                        "--nnodes=4",
                        "--nproc-per-node=8",
                        "--rdzv-backend=c10d",
                        "--rdzv-endpoint=llama-70b-pretrain-worker-0.llama-70b-pretrain:29500",
                        "--max-restarts=3",
                        "/workspace/train.py",
                        "--config=/workspace/configs/llama-70b.yaml",
                        "--micro-batch-size=1",
                        "--global-batch-size=1024",
                        "--seq-length=8192",
                        "--bf16",
                        "--fsdp=full_shard",
                        "--checkpoint-dir=/checkpoints",
                    ],
                    "ports": [{"name": "c10d", "containerPort": 29500, "protocol": "TCP"}],
                    "env": env,
                    "resources": {
                        "limits": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1600Gi", "rdma/ib": "8"},
                        "requests": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1600Gi", "rdma/ib": "8"},
                    },
                    "volumeMounts": [
                        {"name": "dshm", "mountPath": "/dev/shm"},
                        {"name": "cache", "mountPath": "/cache"},
                        {"name": "data", "mountPath": "/data", "readOnly": True},
                        {"name": "checkpoints", "mountPath": "/checkpoints"},
                    ],
                    "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                    "readinessProbe": {"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 30},
                },
                {
                    "name": "metrics-exporter",
                    "image": "registry.example.com/ml/dcgm-sidecar:3.3",
                    "ports": [{"name": "metrics", "containerPort": 9400}],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                },
            ],
            "volumes": [
                {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "256Gi"}},
                {"name": "cache", "emptyDir": {}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "pretrain-corpus", "readOnly": True}},
                {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "llama-70b-checkpoints"}},
            ],
        },
    }
    pod["metadata"]["managedFields"] = [
        {
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2025-06-01T12:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": _fields_v1(pod),
        }
    ]
    # Pad with more environment (the usual way training pods grow) up to the target size.
    extra = 0
    container = pod["spec"]["containers"][0]
    while len(json.dumps(pod, separators=(",", ":"))) < target_bytes - 60 and extra < 500:
        container["env"].append({"name": f"EXPERIMENT_PARAM_{extra:03d}", "value": f"value-{extra:03d}"})
        extra += 1
    return pod


def _fields_v1(obj: Any) -> Any:
    """A FieldsV1 tree shaped like the API server's (f:key / k:{...} entries)."""
    if isinstance(obj, dict):
        return {f"f:{k}": _fields_v1(v) for k, v in obj.items() if k not in ("managedFields", "uid")} or {}
    if isinstance(obj, list):
        out: dict[str, Any] = {".": {}}
        for item in obj:
            if isinstance(item, dict) and "name" in item:
                out[f'k:{{"name":"{item["name"]}"}}'] = _fields_v1(item)
            else:
                out[f"v:{json.dumps(item)}"] = {}
        return out
    return {}


# -- AdmissionReview bodies ------------------------------------------------------------------------

_RESOURCES = {
    "Pod": "pods",
    "Job": "jobs",
    "PyTorchJob": "pytorchjobs",
    "MPIJob": "mpijobs",
    "TrainJob": "trainjobs",
    "JobSet": "jobsets",
    "RayJob": "rayjobs",
    "RayCluster": "rayclusters",
    "LeaderWorkerSet": "leaderworkersets",
    "Deployment": "deployments",
    "StatefulSet": "statefulsets",
}


def admission_review(
    obj: dict[str, Any], namespace: str = "default", uid: str | None = None
) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    meta.setdefault("namespace", namespace)
    if "name" not in meta:
        meta["name"] = (meta.get("generateName") or "bench-") + "x7k2q"
    meta.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL, meta["name"])))
    meta.setdefault("creationTimestamp", "2025-06-01T12:00:00Z")
    if "managedFields" not in meta:
        meta["managedFields"] = [
            {
                "manager": "kubectl-create",
                "operation": "Update",
                "apiVersion": obj.get("apiVersion"),
                "time": "2025-06-01T12:00:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": _fields_v1(meta), "f:spec": {}},
            }
        ]
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    kind = str(obj.get("kind"))
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {
                "group": group,
                "version": version,
                "resource": _RESOURCES.get(kind, kind.lower() + "s"),
            },
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {
                "group": group,
                "version": version,
                "resource": _RESOURCES.get(kind, kind.lower() + "s"),
            },
            "name": meta["name"],
            "namespace": meta["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "alice@example.com", "groups": ["ml-research", "system:authenticated"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def review_body(obj: dict[str, Any], namespace: str = "default", uid: str | None = None) -> bytes:
    """admission_review() as the API server sends it: compact JSON."""
    return json.dumps(admission_review(obj, namespace, uid), separators=(",", ":")).encode()


def bench_bodies() -> list[tuple[str, bytes]]:
    """(label, body) for the HTTP benchmarks: corpus training Pods and jobs of 1-12 KB, and the big Pod."""
    out: list[tuple[str, bytes]] = []
    for source, obj in corpus_workloads():
        body = review_body(obj, uid=f"bench-{len(out)}")
        if MIN_BODY_BYTES <= len(body) <= MAX_BODY_BYTES:
            out.append((source, body))
    big = review_body(big_training_pod(), uid="bench-big")
    out.append(("training-pod-11.6KB", big))
    return out


def padded_review(target: int) -> bytes:
    """The 11.6 KB training Pod with environment entries added until its review is `target` bytes.

    Many small entries: more Python objects per byte than any other shape of the same size.
    """
    pod = big_training_pod()
    env = pod["spec"]["containers"][0].setdefault("env", [])
    entry = 96  # bytes of JSON per entry below
    base = len(review_body(pod))
    for i in range(max(0, (target - base) // entry)):
        env.append({"name": f"PAD_{i:06d}", "value": "v" * (entry - 35)})
    return review_body(pod)

"""The workloads the fleet's scenarios apply, written as their users would write them.

Training pods tolerate the training pool's taint (a team that knows its pool), or with `pool=None`
every pool's (``operator: Exists``: the toleration a team copies so that its job runs "on any GPU
node"). Without trainguard nothing else steers them; with trainguard the pool mutation pins them
to the training pool. A PyTorchJob launches a plain ``torchrun
train.py`` and lets the training operator inject ``PET_NNODES`` / ``PET_NPROC_PER_NODE``; an
indexed batch Job states ``--nnodes`` itself (nothing injects it).
"""

from __future__ import annotations

from typing import Any

from .fleet import GPUS_PER_NODE, POOL_KEY, QUEUE_LABEL

IMAGE = "ghcr.io/example/train:1.0"


def toleration(pool: str | None) -> dict[str, str]:
    """Of one pool's taint, or with `None` of any pool's (``operator: Exists``)."""
    if pool is None:
        return {"key": POOL_KEY, "operator": "Exists", "effect": "NoSchedule"}
    return {"key": POOL_KEY, "operator": "Equal", "value": pool, "effect": "NoSchedule"}


def _container(command: list[str], gpus: int) -> dict[str, Any]:
    return {
        "name": "pytorch",
        "image": IMAGE,
        "command": command,
        "resources": {"limits": {"nvidia.com/gpu": gpus}},
    }


def _labels(queue: str | None, extra: dict[str, str] | None) -> dict[str, str]:
    labels = dict(extra or {})
    if queue:
        labels[QUEUE_LABEL] = queue
    return labels


def pytorchjob(
    name: str,
    namespace: str,
    *,
    pods: int,
    gpus: int = GPUS_PER_NODE,
    queue: str | None = None,
    labels: dict[str, str] | None = None,
    pool: str | None = None,
) -> dict[str, Any]:
    """Master + (pods - 1) Workers, `gpus` each, class B."""

    def replica(replicas: int) -> dict[str, Any]:
        return {
            "replicas": replicas,
            "restartPolicy": "OnFailure",
            "template": {
                "spec": {
                    "tolerations": [toleration(pool)],
                    "containers": [_container(["torchrun", "train.py"], gpus)],
                }
            },
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(queue, labels)},
        "spec": {
            "nprocPerNode": str(gpus),
            "pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(pods - 1)},
        },
    }


def indexed_job(
    name: str,
    namespace: str,
    *,
    pods: int,
    gpus: int = GPUS_PER_NODE,
    queue: str | None = None,
    labels: dict[str, str] | None = None,
    pool: str | None = None,
) -> dict[str, Any]:
    """An indexed batch Job of `pods` torchrun workers started together (class B when pods > 1)."""
    command = ["torchrun", f"--nnodes={pods}", f"--nproc-per-node={gpus}", "train.py"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(queue, labels)},
        "spec": {
            "completions": pods,
            "parallelism": pods,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [toleration(pool)],
                    "containers": [_container(command, gpus)],
                }
            },
        },
    }


def inference(name: str, namespace: str, *, replicas: int, gpus: int = GPUS_PER_NODE) -> dict[str, Any]:
    """A serving Deployment pinned to the inference pool, as inference teams pin themselves."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {POOL_KEY: "inference"},
                    "tolerations": [
                        {"key": POOL_KEY, "operator": "Equal", "value": "inference", "effect": "NoSchedule"}
                    ],
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.6.0",
                            "resources": {"limits": {"nvidia.com/gpu": gpus}},
                        }
                    ],
                },
            },
        },
    }


def node_agent(name: str, namespace: str) -> dict[str, Any]:
    """A DaemonSet that runs on every node whatever its taints (a GPU device plugin or a log agent)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "tolerations": [{"operator": "Exists"}],
                    "containers": [
                        {
                            "name": "agent",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                        }
                    ],
                },
            },
        },
    }

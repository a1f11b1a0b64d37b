"""Objects that help decide a workload without being decided themselves.

A TrainJob's gang policy lives in its TrainingRuntime; a Pod's priority value in its PriorityClass.
The webhook reads them from cluster caches; the CLI and the policy tests take them from the files
given beside the workloads. This module is that second source.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")

# (Cluster)TrainingRuntimes by (namespace | None, name): the one spelling of the type.
Runtimes = Mapping[tuple[str | None, str], dict[str, Any]]


def context_objects(
    objects: Iterable[dict[str, Any]],
) -> tuple[dict[tuple[str | None, str], dict[str, Any]], dict[str, int]]:
    """(Cluster)TrainingRuntimes keyed (namespace | None, name), and PriorityClass name -> value."""
    runtimes: dict[tuple[str | None, str], dict[str, Any]] = {}
    priority_classes: dict[str, int] = {}
    for obj in objects:
        if not isinstance(obj, dict):
            continue
        kind = obj.get("kind")
        meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
        name = meta.get("name")
        if not isinstance(name, str):
            continue
        if kind in RUNTIME_KINDS and str(obj.get("apiVersion", "")).startswith("trainer.kubeflow.org/"):
            namespace = meta.get("namespace") if kind == "TrainingRuntime" else None
            runtimes[(namespace, name)] = obj
        elif kind == "PriorityClass" and isinstance(obj.get("value"), int):
            priority_classes[name] = obj["value"]
    return runtimes, priority_classes

"""Adapters: one module per workload API, each turning an object into the normalised Workload.

    build_workload(obj, ctx) -> Workload | None
    workload_viewer(paths) -> a function rendering a Workload's CEL view with only those paths

This module is the package's face: outside webhook.workloads, import only from here (the
layer contract in .importlinter).

`None` means the object is not a kind trainguard decides (a Service, a ClusterQueue, a
TrainingRuntime, …). An object trainguard decides but cannot read (replicas "abc", a template that
is a list) raises `webhook.errors.InputError` naming the field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from webhook.errors import InputError
from webhook.kinds import lookup
from webhook.workloads import (
    apps,
    batch,
    jobset,
    lws,
    mpijob,
    pod,
    pytorchjob,
    ray,
    trainjob,
    volcano,
)
from webhook.workloads.classify import finish
from webhook.workloads.draft import POD_GROUP_NAME, AdaptContext, Draft, workload_name
from webhook.workloads.model import (
    Paths,
    PodGroup,
    TopologyConstraint,
    View,
    Workload,
    compiled_viewer,
)
from webhook.workloads.torchrun import Deferred

__all__ = [
    "POD_GROUP_NAME",
    "AdaptContext",
    "Deferred",
    "PodGroup",
    "TopologyConstraint",
    "Workload",
    "build_workload",
    "workload_name",
    "workload_viewer",
]

_ADAPTERS: dict[tuple[str, str], Callable[[Draft], None]] = {
    ("kubeflow.org", "PyTorchJob"): pytorchjob.adapt,
    ("kubeflow.org", "MPIJob"): mpijob.adapt,
    ("trainer.kubeflow.org", "TrainJob"): trainjob.adapt,
    ("batch.volcano.sh", "Job"): volcano.adapt,
    ("jobset.x-k8s.io", "JobSet"): jobset.adapt,
    ("ray.io", "RayJob"): ray.adapt,
    ("ray.io", "RayCluster"): ray.adapt,
    ("ray.io", "RayService"): ray.adapt,
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): lws.adapt,
    ("batch", "Job"): batch.adapt,
    ("apps", "Deployment"): apps.adapt,
    ("apps", "StatefulSet"): apps.adapt,
    ("", "Pod"): pod.adapt,
}


def build_workload(obj: dict[str, Any], ctx: AdaptContext) -> Workload | None:
    """The Workload an object describes, or None when trainguard does not decide its kind."""
    if not isinstance(obj, dict):
        raise InputError(f"expected a Kubernetes object (a mapping), got {type(obj).__name__}")
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return None
    info = lookup(api_version, kind)
    if info is None:
        return None
    draft = Draft.start(obj, ctx, info)
    _ADAPTERS[(info.group, info.kind)](draft)
    return finish(draft)


def workload_viewer(paths: Paths) -> View:
    """A function that renders a Workload's CEL view (Workload.view()) with only `paths`, in the
    form engine/reads.py writes them ({} the whole value, a map the keys kept, "*" each element
    of a list): made once per policy set, called on every admission."""
    return compiled_viewer(Workload, paths)

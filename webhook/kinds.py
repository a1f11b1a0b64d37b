"""The workload APIs trainguard understands: group, versions, kind, resource, default role.

One table, read by the adapters (which adapter decides an object), the webhook-config renderer
(which resources the API server sends us) and the docs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from webhook.fields import pointer_tokens

Role = Literal["training", "inference"]


@dataclass(frozen=True, slots=True)
class KindInfo:
    group: str
    versions: tuple[str, ...]
    kind: str
    plural: str
    role: Role
    # JSON pointer of the field that suspends the workload, for kinds Kueue suspends.
    suspend_path: str | None
    # its tokens, split once: every admission of the kind reads the field (fields.walk)
    suspend_tokens: tuple[str, ...] | None = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        tokens = pointer_tokens(self.suspend_path) if self.suspend_path is not None else None
        object.__setattr__(self, "suspend_tokens", tokens)

    @property
    def api_versions(self) -> tuple[str, ...]:
        return tuple(f"{self.group}/{v}" if self.group else v for v in self.versions)


KINDS: tuple[KindInfo, ...] = (
    KindInfo("kubeflow.org", ("v1",), "PyTorchJob", "pytorchjobs", "training", "/spec/runPolicy/suspend"),
    KindInfo("kubeflow.org", ("v2beta1", "v1"), "MPIJob", "mpijobs", "training", "/spec/runPolicy/suspend"),
    KindInfo("trainer.kubeflow.org", ("v1alpha1",), "TrainJob", "trainjobs", "training", "/spec/suspend"),
    KindInfo("batch.volcano.sh", ("v1alpha1",), "Job", "jobs", "training", None),
    KindInfo("jobset.x-k8s.io", ("v1alpha2",), "JobSet", "jobsets", "training", "/spec/suspend"),
    KindInfo("ray.io", ("v1",), "RayJob", "rayjobs", "training", "/spec/suspend"),
    KindInfo("ray.io", ("v1",), "RayCluster", "rayclusters", "training", "/spec/suspend"),
    # Serving: its Ray cluster runs Ray Serve replicas. Kueue does not suspend it.
    KindInfo("ray.io", ("v1",), "RayService", "rayservices", "inference", None),
    KindInfo("leaderworkerset.x-k8s.io", ("v1",), "LeaderWorkerSet", "leaderworkersets", "inference", None),
    KindInfo("batch", ("v1",), "Job", "jobs", "training", "/spec/suspend"),
    KindInfo("apps", ("v1",), "Deployment", "deployments", "inference", None),
    KindInfo("apps", ("v1",), "StatefulSet", "statefulsets", "inference", None),
    KindInfo("", ("v1",), "Pod", "pods", "training", None),
)

_BY_API: dict[tuple[str, str], KindInfo] = {
    (api_version, info.kind): info for info in KINDS for api_version in info.api_versions
}


def lookup(api_version: str, kind: str) -> KindInfo | None:
    """The KindInfo for an object's apiVersion and kind, or None when trainguard does not decide it."""
    return _BY_API.get((api_version, kind))

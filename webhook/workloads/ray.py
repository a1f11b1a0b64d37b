"""RayCluster, RayJob and RayService (ray.io/v1): a head pod plus worker groups, autoscaling,
batch schedulers.

Pods = 1 head + Σ workerGroupSpecs[] desired replicas × numOfHosts, where the desired replicas
are clamped to [minReplicas, maxReplicas] as KubeRay does. A RayJob's submitter pod
(`submitterPodTemplate`, K8sJobMode) is a launcher outside the Ray cluster (and outside a Volcano
gang): its template is one of the RayJob's pod templates (pools, accelerators, checkpoint env), but
it is not counted in the pods that size the cluster or its gang. A RayService serves: its
`rayClusterConfig` is read as a RayCluster's spec, under the kind's inference role. In-tree
autoscaling with min < max makes the cluster elastic (class C).
"""

from __future__ import annotations

from typing import Any

from webhook.workloads.draft import (
    Draft,
    count,
    mapping,
    optional_count,
    sequence,
    text,
)
from webhook.workloads.model import ElasticRange, Restarts
from webhook.workloads.podtemplate import read_template

_MAX_REPLICAS = 2**31 - 1
# Labels that hand a Ray cluster to a gang-scheduling batch scheduler (operator --batch-scheduler).
_BATCH_SCHEDULER_LABELS = (
    "ray.io/gang-scheduling-enabled",
    "ray.io/scheduler-name",
    "volcano.sh/queue-name",
    "kai.scheduler/queue",
)
_NETWORK_TOPOLOGY_MODE = "volcano.sh/network-topology-mode"
_NETWORK_TOPOLOGY_TIER = "volcano.sh/network-topology-highest-tier-allowed"
_PRIORITY_LABEL = "ray.io/priority-class-name"


def adapt(d: Draft) -> None:
    kind = d.info.kind
    if kind == "RayJob":
        cluster = d.spec.get("rayClusterSpec")
        where, pointer = "spec.rayClusterSpec", "/spec/rayClusterSpec"
        limit = optional_count(d.spec.get("backoffLimit"), "spec.backoffLimit")
        # The RayJob CRD defaults backoffLimit to 0 (no retry) before any webhook sees it.
        d.restarts = Restarts(
            limit if limit is not None else 0,
            "spec.backoffLimit" + ("" if limit is not None else " (default)"),
        )
    elif kind == "RayService":
        cluster, where, pointer = (
            d.spec.get("rayClusterConfig"),
            "spec.rayClusterConfig",
            "/spec/rayClusterConfig",
        )
    else:
        cluster, where, pointer = d.spec, "spec", "/spec"
    spec = mapping(cluster, where)
    _batch_scheduler(d)
    d.elastic_declared = True
    if spec:  # else a RayJob that runs on an existing cluster (clusterSelector)
        _cluster(d, spec, where, pointer)
    if kind == "RayJob":
        _submitter(d)


def _submitter(d: Draft) -> None:
    """The submitter pod's template: read, but not counted in the cluster's pods or its gang."""
    template = d.spec.get("submitterPodTemplate")
    mode = text(d.spec.get("submissionMode"))
    # Only K8sJobMode (the default) runs a submitter pod; other modes submit over HTTP or from a
    # sidecar in the head pod and never use the template.
    if template is None or mode not in (None, "", "K8sJobMode"):
        return
    cluster_pods = sum(g.replicas for g in d.groups)
    read_template(d, template, "/spec/submitterPodTemplate", "submitter", 1)
    d.total_pods = cluster_pods
    d.outside_gang.add(len(d.groups) - 1)


def _cluster(d: Draft, spec: dict[str, Any], where: str, pointer: str) -> None:
    head = mapping(spec.get("headGroupSpec"), f"{where}.headGroupSpec")
    read_template(d, head.get("template"), f"{pointer}/headGroupSpec/template", "head", 1)
    lo = hi = 1
    scaling: list[str] = []  # worker groups whose size may change
    for i, raw in enumerate(sequence(spec.get("workerGroupSpecs"), f"{where}.workerGroupSpecs")):
        gw = f"{where}.workerGroupSpecs[{i}]"
        group = mapping(raw, gw)
        name = text(group.get("groupName")) or f"workers-{i}"
        low = count(group.get("minReplicas"), f"{gw}.minReplicas", 0)
        high = count(group.get("maxReplicas"), f"{gw}.maxReplicas", _MAX_REPLICAS)
        hosts = count(group.get("numOfHosts"), f"{gw}.numOfHosts", 1)
        desired = count(group.get("replicas"), f"{gw}.replicas", low)
        # KubeRay: replicas default to minReplicas, clamped to [minReplicas, maxReplicas].
        desired = high if low > high else min(max(desired, low), high)
        if group.get("suspend") is True:
            desired = 0
        read_template(
            d, group.get("template"), f"{pointer}/workerGroupSpecs/{i}/template", name, desired * hosts
        )
        lo += low * hosts
        hi += high * hosts
        if low < high:
            scaling.append(f"{gw}.minReplicas")
    if spec.get("enableInTreeAutoscaling") is True and lo < hi:
        # The range in pods (head included); its field names the minimum when one group scales.
        field = scaling[0] if len(scaling) == 1 else f"{where}.enableInTreeAutoscaling"
        d.elastic = ElasticRange(lo, hi, field, fixed=1)  # the head pod
    if not any(g.priority_class_name for g in d.groups):
        d.priority_class = d.labels.get(_PRIORITY_LABEL)


def _batch_scheduler(d: Draft) -> None:
    for key in _BATCH_SCHEDULER_LABELS:
        value = d.labels.get(key)
        if value and value.lower() != "false":
            d.gang("ray-batch-scheduler")
            break
    mode = d.labels.get(_NETWORK_TOPOLOGY_MODE)
    tier = d.labels.get(_NETWORK_TOPOLOGY_TIER)
    if mode or tier:
        d.constraint("volcano-network-topology", tier or "", (mode or "hard").lower() != "soft")

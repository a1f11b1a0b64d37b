"""Gang and min-available: how the workload is placed all-or-nothing, and with what minimum."""

from __future__ import annotations

from webhook import fields
from webhook.reviewgate.questions._facts import Described, Evidence, Facts, base, metadata_keys, pods
from webhook.workloads import Workload

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

_MECHANISMS = {
    "kueue": "Kueue",
    "scheduling-policy": "gang-scheduler minimum (runPolicy.schedulingPolicy)",
    "volcano": "the Volcano scheduler",
    "runtime-podgroup": "the TrainingRuntime's podGroupPolicy",
    "kueue-pod-group": "a Kueue pod group",
    "coscheduling": "a coscheduling PodGroup",
    "volcano-podgroup": "a Volcano PodGroup",
    "workload-api": "a Workload API pod group",
    "ray-batch-scheduler": "a Ray batch scheduler",
}
_MECHANISM_KEYS: dict[str, tuple[str, ...]] = {
    "kueue": (QUEUE_LABEL,),
    "kueue-pod-group": ("kueue.x-k8s.io/pod-group-name",),
    "coscheduling": ("scheduling.x-k8s.io/pod-group",),
    "volcano-podgroup": ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name"),
    "ray-batch-scheduler": (
        "ray.io/gang-scheduling-enabled",
        "ray.io/scheduler-name",
        "volcano.sh/queue-name",
        "kai.scheduler/queue",
    ),
}


def describe(f: Facts) -> Described:
    w = f.workload
    evidence = [e for m in w.gang.mechanisms for e in _mechanism_evidence(f, m)]
    if w.gang.min_field:
        evidence.append(f.field_evidence(w.gang.min_field, w.gang.min_available))
    if w.elastic is not None:
        elastic = f.field_evidence(w.elastic.field)
        if elastic.value is None or isinstance(elastic.value, dict | list):
            elastic = f.field_evidence(w.elastic.field, f"{w.elastic.min}..{w.elastic.max} pods")
        evidence.append(elastic)
    if w.klass == "A":
        return Described(f"Single node ({pods(w.total_pods)}): nothing to gang.", evidence)
    shape = (
        f"elastic (class C, {w.elastic.min} to {w.elastic.max} pods)"
        if w.klass == "C" and w.elastic is not None
        else f"multi-node (class {w.klass}, {pods(w.total_pods)})"
    )
    mechanisms = ", ".join(_mechanism_name(w, m) for m in w.gang.mechanisms)
    if w.role == "inference":
        said = f"gang: {mechanisms}" if mechanisms else "no gang mechanism declared"
        return Described(f"Inference, {pods(w.total_pods)}; {said}.", evidence)
    shape = shape[0].upper() + shape[1:]
    if not w.gang.mechanisms:
        return Described(f"{shape} with no gang mechanism declared.", evidence)
    minimum = w.gang.min_available
    if minimum is None:
        return Described(f"{shape}, gang-scheduled by {mechanisms}; {_default_minimum(w)}.", evidence)
    field = fields.normalise(w.gang.min_field) if w.gang.min_field else "the gang minimum"
    return Described(f"{shape}, gang-scheduled by {mechanisms}; min-available {minimum} ({field}).", evidence)


def _mechanism_name(w: Workload, mechanism: str) -> str:
    name = _MECHANISMS.get(mechanism, mechanism)
    if mechanism == "kueue" and w.gang.queue_name:
        name += f" (queue {w.gang.queue_name})"
    return name


def _default_minimum(w: Workload) -> str:
    mechs = w.gang.mechanisms
    if "kueue" in mechs:
        return f"no separate minimum: Kueue admits all {w.total_pods} pods at once"
    if "volcano" in mechs and w.api_version.startswith("batch.volcano.sh/"):
        return f"no minAvailable: Volcano's default is all {w.total_pods} pods"
    if "runtime-podgroup" in mechs:
        return "the runtime's PodGroup requires all pods (minMember = all)"
    return "the minimum is set on the PodGroup the pods name, outside this object"


def _mechanism_evidence(f: Facts, mechanism: str) -> list[Evidence]:
    w, obj = f.workload, f.obj
    keys = _MECHANISM_KEYS.get(mechanism)
    if keys is not None:
        found = metadata_keys(f, "", keys)
        if not found and mechanism == "kueue":  # Deployment / StatefulSet: the template label
            found = [
                e for g in w.groups if base(g) is not None for e in metadata_keys(f, base(g) or "", keys)
            ]
        return found[:1]
    if mechanism == "volcano":
        if w.api_version.startswith("batch.volcano.sh/"):
            if fields.lookup(obj, "/spec/schedulerName") is fields.MISSING:
                return [f.evidence("/spec/schedulerName", "unset (Volcano defaults it to volcano)")]
            return [f.evidence("/spec/schedulerName")]
        return [
            f.evidence(f"{base(g)}/spec/schedulerName")
            for g in w.groups
            if base(g) is not None and g.scheduler_name == "volcano"
        ][:1]
    if mechanism == "runtime-podgroup":
        return [f.evidence("/spec/runtimeRef")]
    if mechanism == "workload-api":
        for g in w.groups:
            at = base(g)
            for leaf in ("/spec/schedulingGroup", "/spec/workloadRef"):
                if at is not None and fields.lookup(obj, at + leaf) is not fields.MISSING:
                    return [f.evidence(at + leaf)]
    return []

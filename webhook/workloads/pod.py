"""Pod (v1): a bare pod, or a member of a workload that a controller created.

A bare pod may stand for a gang of N: a Kueue pod group (`pod-group-name` + annotation
`pod-group-total-count`; a name without a count, or with one that is not a number, is
recorded for the pod-group-count policy to deny, as Kueue refuses it), a coscheduling
or Volcano PodGroup, or torchrun `--nnodes N`. A Kueue queue label alone gangs nothing: Kueue
makes each such pod its own one-pod Workload. The group's name is the pods' shared identity. Its
`total_pods` is the declared group size, else torchrun's node count (the maximum when elastic),
else 1, and its class follows torchrun: MIN < MAX → C, more than one node → B, else A.

A pod created by a controller (labels of reference §2, else a controlling ownerReference) gets an
`owner`; its class is the `trainguard.dev/class` label trainguard stamped on the template, else
what its torchrun / PET_* environment says. Kueue-managed pods are marked so nothing relabels them.
"""

from __future__ import annotations

from typing import cast

from webhook.fields import pointer_to_path
from webhook.workloads.draft import (
    CLASS_LABEL,
    COSCHEDULING_LABEL,
    POD_GROUP_NAME,
    POD_GROUP_TOTAL,
    VALID_CLASSES,
    Draft,
    annotation_path,
    text,
)
from webhook.workloads.model import ElasticRange, Owner, PodGroup, TorchrunSpec, WorkloadClass
from webhook.workloads.podtemplate import read_template

VOLCANO_GROUP_ANNOTATIONS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
KUEUE_MANAGED = "kueue.x-k8s.io/managed"
KUEUE_PODSET = "kueue.x-k8s.io/podset"
KUEUE_ADMISSION_GATE = "kueue.x-k8s.io/admission"

_KUBEFLOW_JOB = "training.kubeflow.org/job-name"
_KUBEFLOW_OPERATORS = {
    "pytorchjob-controller": "PyTorchJob",
    "mpijob-controller": "MPIJob",
    "mpi-operator": "MPIJob",
    "tfjob-controller": "TFJob",
    "xgboostjob-controller": "XGBoostJob",
    "paddlejob-controller": "PaddleJob",
    "jaxjob-controller": "JAXJob",
}
_RAY_KINDS = frozenset(("RayJob", "RayCluster", "RayService"))
# (label, top-level kind) in the order that finds the top-level object first: a JobSet's pods
# also carry the batch Job labels, a TrainJob's pods the JobSet labels.
_MEMBER_LABELS: tuple[tuple[str, str], ...] = (
    ("mpi-job-name", "MPIJob"),
    ("jobset.sigs.k8s.io/jobset-name", "JobSet"),
    ("leaderworkerset.sigs.k8s.io/name", "LeaderWorkerSet"),
    ("volcano.sh/job-name", "Job"),
    ("batch.kubernetes.io/job-name", "Job"),
    ("job-name", "Job"),
)
_TRAINJOB_STEP = "trainer.kubeflow.org/trainjob-ancestor-step"
_INFERENCE_OWNERS = frozenset(("ReplicaSet", "Deployment", "StatefulSet", "LeaderWorkerSet", "RayService"))


def adapt(d: Draft) -> None:
    group = read_template(d, d.obj, "", "pod", 1, metadata=(d.labels, d.annotations))
    d.owner = owner_of(d)
    if d.owner is not None and d.owner.kind in _INFERENCE_OWNERS:
        d.role = "inference"
    d.kueue_managed = _kueue_managed(d)

    total = _gang(d)
    torchrun, pointer = _torchrun(group)
    d.elastic_declared = True
    nodes = 1
    if torchrun is not None and torchrun.nnodes_max is not None:
        nodes = torchrun.nnodes_max
        lo = torchrun.nnodes_min
        if lo is not None and lo < nodes:
            d.elastic = ElasticRange(lo, nodes, pointer_to_path(pointer), launcher=True)
    if total is None:
        total = nodes
    declared = d.labels.get(CLASS_LABEL) if d.owner is not None else None
    if declared in VALID_CLASSES:
        d.klass = cast(WorkloadClass, declared)
    elif d.elastic is not None:
        d.klass = "C"
    else:
        d.klass = "B" if max(total, nodes) > 1 else "A"
    d.total_pods = total
    d.total_gpus = group.gpus_per_pod * total


def owner_of(d: Draft) -> Owner | None:
    """The workload that created this pod, as far as its labels and ownerReferences tell."""
    labels = d.labels
    ref = _controller_ref(d)
    job = labels.get(_KUBEFLOW_JOB)
    if job:
        kind = _KUBEFLOW_OPERATORS.get(labels.get("training.kubeflow.org/operator-name", ""))
        if kind is None:
            kind = ref[0] if ref is not None and ref[0] not in ("Job", "") else "PyTorchJob"
        return Owner(kind, job, f"label {_KUBEFLOW_JOB}")
    cluster = labels.get("ray.io/cluster")
    if cluster:
        kind = labels.get("ray.io/originated-from-crd", "")
        name = labels.get("ray.io/originated-from-cr-name")
        if kind in _RAY_KINDS and name:
            return Owner(kind, name, "label ray.io/originated-from-crd")
        return Owner("RayCluster", cluster, "label ray.io/cluster")
    for key, kind in _MEMBER_LABELS:
        name = labels.get(key)
        if name:
            if kind == "JobSet" and labels.get(_TRAINJOB_STEP):
                return Owner("TrainJob", name, f"label {key}")
            return Owner(kind, name, f"label {key}")
    if ref is not None:
        return Owner(ref[0], ref[1], "ownerReferences")
    return None


def _controller_ref(d: Draft) -> tuple[str, str] | None:
    refs = (d.obj.get("metadata") or {}).get("ownerReferences")
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if isinstance(ref, dict) and ref.get("controller") is True:
            return text(ref.get("kind")) or "", text(ref.get("name")) or ""
    return None


def _kueue_managed(d: Draft) -> bool:
    if d.labels.get(KUEUE_MANAGED) == "true" or KUEUE_PODSET in d.labels:
        return True
    gates = d.spec.get("schedulingGates")
    if isinstance(gates, list):
        return any(isinstance(g, dict) and g.get("name") == KUEUE_ADMISSION_GATE for g in gates)
    return False


def _gang(d: Draft) -> int | None:
    """Record the pod's gang mechanisms; returns the declared group size, if any."""
    total = None
    # Kueue reads the annotation first, then the label (the label is the older spelling).
    kueue_group = d.annotations.get(POD_GROUP_NAME) or d.labels.get(POD_GROUP_NAME)
    if kueue_group:
        raw = d.annotations.get(POD_GROUP_TOTAL)
        where = annotation_path(POD_GROUP_TOTAL)
        count = raw.strip() if raw is not None else ""
        if count.isdigit():
            total = int(count)
            d.gang("kueue-pod-group", total, where)
        elif count or d.owner is None:
            # Readable but wrong (Kueue refuses such a pod): a fact the pod-group-count policy
            # denies, not input trainguard cannot read. A controller's pod without a count is
            # fine: its workload, not the pod, says how big the gang is.
            named = (
                annotation_path(POD_GROUP_NAME)
                if d.annotations.get(POD_GROUP_NAME)
                else f"metadata.labels['{POD_GROUP_NAME}']"
            )
            d.group_count_errors.append(
                {"group": kueue_group, "groupField": named, "countField": where, "count": raw or ""}
            )
    coscheduling = d.labels.get(COSCHEDULING_LABEL)
    if coscheduling:
        d.gang("coscheduling")
    volcano = next((v for key in VOLCANO_GROUP_ANNOTATIONS if (v := d.annotations.get(key))), None)
    if volcano:
        d.gang("volcano-podgroup")
    if d.owner is None:
        d.group_name = kueue_group or coscheduling or volcano
    return total


def _torchrun(group: PodGroup) -> tuple[TorchrunSpec | None, str]:
    """The container launch that says the most about the job's size."""
    found: tuple[TorchrunSpec | None, str] = (None, "")
    for c in group.containers:
        t = c.torchrun
        if t is None:
            continue
        if t.nnodes_max is not None:
            return t, c.pointer
        if found[0] is None:
            found = (t, c.pointer)
    return found

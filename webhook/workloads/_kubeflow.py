"""Kubeflow v1-style jobs (PyTorchJob, MPIJob): replica specs keyed by type, and `runPolicy`."""

from __future__ import annotations

from webhook.workloads.classify import gang_scheduler_gaps
from webhook.workloads.draft import Draft, count, escape, mapping, optional_count, text
from webhook.workloads.model import Restarts
from webhook.workloads.podtemplate import read_template


def read_replica_specs(d: Draft, key: str, defaults: dict[str, int]) -> dict[str, int]:
    """One PodGroup per replica type, in manifest order; returns replicas per type.

    `defaults` maps the lower-cased replica type to its default replica count (else 1).
    """
    where = f"spec.{key}"
    counts: dict[str, int] = {}
    for rtype, raw in mapping(d.spec.get(key), where).items():
        rtype = str(rtype)
        rs = mapping(raw, f"{where}.{rtype}")
        n = count(rs.get("replicas"), f"{where}.{rtype}.replicas", defaults.get(rtype.lower(), 1))
        read_template(
            d,
            rs.get("template"),
            f"/spec/{escape(key)}/{escape(rtype)}/template",
            rtype,
            n,
            restart_policy=text(rs.get("restartPolicy")),
        )
        counts[rtype] = n
    return counts


def read_run_policy(d: Draft) -> None:
    """Gang minimum, gang scheduler, priority class and backoff limit from `spec.runPolicy`."""
    rp = mapping(d.spec.get("runPolicy"), "spec.runPolicy")
    sp = mapping(rp.get("schedulingPolicy"), "spec.runPolicy.schedulingPolicy")
    where = "spec.runPolicy.schedulingPolicy.minAvailable"
    minimum = optional_count(sp.get("minAvailable"), where)
    if minimum is not None:
        d.gang("scheduling-policy", minimum, where)
    if any(g.scheduler_name == "volcano" for g in d.groups) and gang_scheduler_gaps(d, "volcano"):
        d.gang("volcano")
    if not any(g.priority_class_name for g in d.groups):
        d.priority_class = text(sp.get("priorityClass"))
    limit = optional_count(rp.get("backoffLimit"), "spec.runPolicy.backoffLimit")
    if limit is not None:
        d.restarts = Restarts(limit, "spec.runPolicy.backoffLimit")

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


# -- what the cluster says about earlier preemptions and evictions --------------------------------

KUEUE_GROUP = "kueue.x-k8s.io/"
EVICTION_CONDITIONS = ("Evicted", "Preempted")
# Job kinds that record their own restarts: (apiVersion prefix, kind) -> (status field, condition).
_JOB_RESTARTS: dict[tuple[str, str], tuple[str | None, str | None]] = {
    ("kubeflow.org/", "PyTorchJob"): (None, "Restarting"),
    ("kubeflow.org/", "MPIJob"): (None, "Restarting"),
    ("jobset.x-k8s.io/", "JobSet"): ("restarts", None),
    ("batch.volcano.sh/", "Job"): ("retryCount", None),
}

Evictions = dict[str, dict[str, Any]]


def eviction_key(namespace: str | None, kind: str, name: str) -> str:
    """How policies and the resume controller name a workload in `cluster.evictions`."""
    return f"{namespace or ''}/{kind}/{name}"


def eviction_entries(obj: Any) -> list[tuple[str, dict[str, Any]]]:
    """(key, record) for each name under which `obj` says its workload was preempted or evicted.

    A Kueue Workload is found under its own name (a bare-pod group's Workload is named after the
    group) and under each owner (the PyTorchJob, JobSet … Kueue made it for); a job kind that keeps
    its own restart count under its own name. Nothing for an object with no such history.
    """
    if not isinstance(obj, dict):
        return []
    meta = _map(obj.get("metadata"))
    name, namespace = meta.get("name"), meta.get("namespace")
    kind, api_version = str(obj.get("kind") or ""), str(obj.get("apiVersion") or "")
    status = _map(obj.get("status"))
    if not isinstance(name, str):
        return []
    if kind == "Workload" and api_version.startswith(KUEUE_GROUP):
        record = _kueue_record(obj, status)
        if record is None:
            return []
        keys = [eviction_key(namespace, "Workload", name)]
        for ref in meta.get("ownerReferences") or ():
            if (
                isinstance(ref, dict)
                and isinstance(ref.get("kind"), str)
                and isinstance(ref.get("name"), str)
            ):
                keys.append(eviction_key(namespace, ref["kind"], ref["name"]))
    else:
        record = _job_record(api_version, kind, status)
        if record is None:
            return []
        keys = [eviction_key(namespace, kind, name)]
    record["object"] = {"apiVersion": api_version, "kind": kind, "name": name, "namespace": namespace}
    if isinstance(meta.get("uid"), str):  # events name it, so `kubectl describe` shows them
        record["object"]["uid"] = meta["uid"]
    return [(key, record) for key in keys]


def evictions(objects: Iterable[Any]) -> Evictions:
    """Every eviction record of `objects`, keyed as `eviction_key` says (later objects win)."""
    out: Evictions = {}
    for obj in objects:
        out.update(eviction_entries(obj))
    return out


def _map(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _conditions(status: dict[str, Any]) -> list[dict[str, Any]]:
    conditions = status.get("conditions")
    return [c for c in conditions if isinstance(c, dict)] if isinstance(conditions, list) else []


def _kueue_record(obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any] | None:
    evicted = [
        c for c in _conditions(status) if c.get("type") in EVICTION_CONDITIONS and c.get("status") == "True"
    ]
    count = _map(status.get("requeueState")).get("count")
    requeued = count if isinstance(count, int) else 0
    stats = _map(status.get("schedulingStats"))
    counted = sum(
        e["count"]
        for e in stats.get("evictions") or ()
        if isinstance(e, dict) and isinstance(e.get("count"), int)
    )
    if not evicted and requeued <= 0 and counted <= 0:
        return None
    latest = max(evicted, key=lambda c: str(c.get("lastTransitionTime") or ""), default=None)
    if latest is not None:
        evidence = f"condition {latest.get('type')}=True reason {latest.get('reason') or 'unknown'}"
    elif requeued > 0:
        evidence = f"status.requeueState.count = {requeued}"
    else:
        evidence = f"status.schedulingStats.evictions count {counted}"
    spec = _map(obj.get("spec"))
    return {
        "count": max(requeued, counted, 1),
        "lastEvictedAt": str(latest.get("lastTransitionTime"))
        if latest and latest.get("lastTransitionTime")
        else None,
        "reason": str(latest.get("reason") or latest.get("type")) if latest else "Requeued",
        "evidence": evidence,
        "queue": spec.get("queueName") if isinstance(spec.get("queueName"), str) else None,
    }


def _job_record(api_version: str, kind: str, status: dict[str, Any]) -> dict[str, Any] | None:
    rule = next(
        (r for (prefix, k), r in _JOB_RESTARTS.items() if k == kind and api_version.startswith(prefix)), None
    )
    if rule is None:
        return None
    counter, condition = rule
    if counter is not None:
        value = status.get(counter)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return {
                "count": value,
                "lastEvictedAt": None,
                "reason": "Restarted",
                "evidence": f"status.{counter} = {value}",
                "queue": None,
            }
        return None
    found = [c for c in _conditions(status) if c.get("type") == condition]
    if not found:
        return None
    latest = max(found, key=lambda c: str(c.get("lastTransitionTime") or ""))
    return {
        "count": len(found),
        "lastEvictedAt": str(latest["lastTransitionTime"]) if latest.get("lastTransitionTime") else None,
        "reason": str(latest.get("reason") or condition),
        "evidence": f"condition {condition} reason {latest.get('reason') or 'unknown'}",
        "queue": None,
    }

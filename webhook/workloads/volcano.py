"""Volcano Job (batch.volcano.sh/v1alpha1): tasks, minAvailable, networkTopology, maxRetry.

The Volcano scheduler gangs a job at `minAvailable` (default: all task replicas). Volcano's
admission webhook fills an empty `schedulerName` with `volcano`, so only another scheduler name
turns the gang off, for the job or for one task whose template pins it (`default-scheduler`):
such a task's pods are placed outside the gang, so the job declares no gang. `minAvailable` below
the total makes the surplus pods elastic (class C).
"""

from __future__ import annotations

from webhook.workloads.classify import gang_scheduler_gaps
from webhook.workloads.draft import (
    Draft,
    count,
    mapping,
    optional_count,
    sequence,
    text,
    volcano_network_topology,
)
from webhook.workloads.model import ElasticRange, Restarts
from webhook.workloads.podtemplate import read_template


def adapt(d: Draft) -> None:
    spec = d.spec
    total = 0
    for i, raw in enumerate(sequence(spec.get("tasks"), "spec.tasks")):
        where = f"spec.tasks[{i}]"
        task = mapping(raw, where)
        name = text(task.get("name")) or f"task-{i}"
        n = count(task.get("replicas"), f"{where}.replicas", 0)
        total += n
        read_template(d, task.get("template"), f"/spec/tasks/{i}/template", name, n)
        partition = mapping(task.get("partitionPolicy"), f"{where}.partitionPolicy")
        if partition.get("networkTopology"):
            volcano_network_topology(
                d, partition["networkTopology"], f"{where}.partitionPolicy.networkTopology", name
            )

    where = "spec.minAvailable"
    minimum = optional_count(spec.get("minAvailable"), where)
    scheduler = text(spec.get("schedulerName")) or "volcano"
    if scheduler == "volcano" and gang_scheduler_gaps(d, "volcano"):
        d.gang("volcano", minimum, where if minimum is not None else None)
    elif minimum is not None:
        d.min_available, d.min_field = minimum, where
    d.elastic_declared = True
    if minimum is not None and minimum < total:
        d.elastic = ElasticRange(minimum, total, where)

    if spec.get("networkTopology"):
        volcano_network_topology(d, spec["networkTopology"], "spec.networkTopology")
    retry = optional_count(spec.get("maxRetry"), "spec.maxRetry")
    # Volcano's webhook defaults maxRetry to 3 before trainguard's sees the Job.
    d.restarts = (
        Restarts(retry, "spec.maxRetry") if retry is not None else Restarts(3, "spec.maxRetry (default)")
    )
    d.priority_class = text(spec.get("priorityClassName"))

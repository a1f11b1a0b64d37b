"""batch/v1 Job: parallelism, Kueue elastic jobs and partial admission, backoffLimit.

Kueue's `elastic-job: "true"` makes the Job class C, ranging from `job-min-parallelism` (else 1)
to its parallelism. `job-min-parallelism` alone (partial admission) declares the gang minimum:
Kueue may admit the Job with as few pods, so a minimum below parallelism is an elastic range too.
"""

from __future__ import annotations

from webhook.errors import InputError
from webhook.workloads.draft import (
    ELASTIC_JOB,
    JOB_MIN_PARALLELISM,
    Draft,
    annotation_path,
    job_pods,
    optional_count,
)
from webhook.workloads.model import ElasticRange, Restarts
from webhook.workloads.podtemplate import read_template


def adapt(d: Draft) -> None:
    pods = job_pods(d.spec, "spec")
    read_template(d, d.spec.get("template"), "/spec/template", "main", pods)

    min_field = annotation_path(JOB_MIN_PARALLELISM)
    raw = d.annotations.get(JOB_MIN_PARALLELISM)
    minimum = None
    if raw is not None:
        if not raw.strip().isdigit():
            raise InputError(
                f"{JOB_MIN_PARALLELISM} must be a non-negative integer, got {raw!r}", field=min_field
            )
        minimum = int(raw)
        d.min_available, d.min_field = minimum, min_field
    if d.annotations.get(ELASTIC_JOB, "").strip().lower() == "true":
        lo = minimum if minimum is not None else 1
        d.elastic = ElasticRange(
            lo, max(pods, lo), min_field if minimum is not None else annotation_path(ELASTIC_JOB)
        )
        d.elastic_forced = d.elastic_declared = True
    elif minimum is not None:
        d.elastic_declared = True
        if minimum < pods:
            d.elastic = ElasticRange(minimum, pods, min_field)

    for key in ("backoffLimit", "backoffLimitPerIndex"):
        limit = optional_count(d.spec.get(key), f"spec.{key}")
        if limit is not None:
            d.restarts = Restarts(limit, f"spec.{key}")
            break
    else:
        # The API server defaults backoffLimit to 6 before any webhook sees the Job; deciding a
        # manifest the same way keeps the CLI's answer the webhook's.
        d.restarts = Restarts(6, "spec.backoffLimit (default)")

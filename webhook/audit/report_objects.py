"""ObjectAudits -> policy report objects: wgpolicyk8s.io/v1alpha2 and openreports.io/v1alpha1.

One report per namespace (PolicyReport / Report) and one for cluster-scoped objects
(ClusterPolicyReport / ClusterReport), each with a result per workload × policy and the summary
counts. Both APIs share the result shape (`policy`, `result`, `message`, `severity`, `source`,
`category`, `resources`, `timestamp`, `properties`), so one builder serves both.

A namespace with many workloads gets several reports: the API server refuses objects above 1.5 MiB
(etcd's request limit), so results are packed into shards of at most `max_bytes` of serialised
results, never splitting one workload's results across shards. Shard names are stable
(`trainguard-audit`, `trainguard-audit-2`, …) so a re-write replaces, and the writer deletes the
shards a namespace no longer needs.

Pure: no API calls; the same audits render the same objects (timestamps are the decisions').
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from webhook.audit.decide import RESULTS, ObjectAudit, Row

Format = Literal["wgpolicy", "openreports"]
FORMATS: tuple[Format, ...] = ("wgpolicy", "openreports")

SOURCE = "trainguard"
REPORT_NAME = "trainguard-audit"
MANAGED_BY = {"app.kubernetes.io/managed-by": "trainguard"}
# etcd refuses requests above 1.5 MiB; leave room for metadata and managedFields.
DEFAULT_MAX_BYTES = 1_000_000


@dataclass(frozen=True, slots=True)
class ReportApi:
    """Where one format's reports live."""

    group: str
    version: str
    kind: str
    plural: str
    cluster_kind: str
    cluster_plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


APIS: dict[Format, ReportApi] = {
    "wgpolicy": ReportApi(
        "wgpolicyk8s.io",
        "v1alpha2",
        "PolicyReport",
        "policyreports",
        "ClusterPolicyReport",
        "clusterpolicyreports",
    ),
    "openreports": ReportApi(
        "openreports.io", "v1alpha1", "Report", "reports", "ClusterReport", "clusterreports"
    ),
}


def formats(choice: str) -> tuple[Format, ...]:
    """`--report-format wgpolicy|openreports|both` as the formats to write."""
    return FORMATS if choice == "both" else (choice,)  # type: ignore[return-value]


def result_entry(audit: ObjectAudit, row: Row) -> dict[str, Any]:
    """One `results[]` item: the same in both formats."""
    ref = audit.ref
    resource: dict[str, Any] = {
        "apiVersion": ref.api_version,
        "kind": ref.kind,
        "name": ref.name,
        "uid": ref.uid,
    }
    if ref.namespace:
        resource["namespace"] = ref.namespace
    when = audit.decided_at
    entry: dict[str, Any] = {
        "policy": row.policy,
        "source": SOURCE,
        "category": row.category,
        "result": row.result,
        "severity": row.severity,
        "scored": True,
        "resources": [resource],
        "timestamp": {"seconds": int(when.timestamp()), "nanos": 0},
    }
    if row.message:
        entry["message"] = row.message
    properties = {"mode": row.mode}
    if row.fields:
        properties["fields"] = ", ".join(f for f in row.fields if f)
    if row.exemption:
        properties["exemption"] = row.exemption
    entry["properties"] = {k: v for k, v in properties.items() if v}
    return entry


def summary(results: Iterable[dict[str, Any]]) -> dict[str, int]:
    counts: dict[str, int] = dict.fromkeys(RESULTS, 0)
    for r in results:
        counts[r["result"]] += 1
    return counts


def shard_name(index: int) -> str:
    return REPORT_NAME if index == 0 else f"{REPORT_NAME}-{index + 1}"


def build_reports(
    namespace: str | None,
    audits: Iterable[ObjectAudit],
    *,
    fmt: Format = "wgpolicy",
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> list[dict[str, Any]]:
    """The reports of one namespace (None: cluster-scoped objects), split into shards by size.

    No audits: no reports (the writer deletes what it wrote before).
    """
    ordered = sorted(audits, key=lambda a: (a.ref.kind, a.ref.api_version, a.ref.name, a.ref.uid))
    shards: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    size = 0
    for audit in ordered:
        entries = [result_entry(audit, row) for row in audit.rows if row.category == "validation"]
        if not entries:
            continue
        cost = sum(len(orjson.dumps(e)) + 1 for e in entries)
        if current and size + cost > max_bytes:
            shards.append(current)
            current, size = [], 0
        current.extend(entries)
        size += cost
    if current:
        shards.append(current)
    api = APIS[fmt]
    return [_report(api, namespace, shard_name(i), results) for i, results in enumerate(shards)]


def _report(
    api: ReportApi, namespace: str | None, name: str, results: list[dict[str, Any]]
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "labels": dict(MANAGED_BY)}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": api.api_version,
        "kind": api.kind if namespace is not None else api.cluster_kind,
        "metadata": metadata,
        "summary": summary(results),
        "results": results,
    }


def report_bytes(report: dict[str, Any]) -> int:
    return len(orjson.dumps(report))

"""Report -> a JSON-ready record, for scripts: everything the other formats show, as data."""

from __future__ import annotations

from typing import Any

from webhook.reviewgate.questions import Answer
from webhook.reviewgate.report import FindingRecord, Report, WorkloadReview


def render(report: Report) -> dict[str, Any]:
    return {
        "reviews": [_review(r) for r in report.reviews],
        "notReviewed": [
            {"source": doc.source, "kind": doc.data.get("kind"), "reason": reason}
            for doc, reason in report.not_reviewed
        ],
        "summary": {
            "files": len(report.files),
            "workloads": len(report.reviews),
            "denied": report.denied,
            "warned": report.warned,
            "exempted": sum(1 for f in report.findings("exempt") if f.message),
        },
    }


def _review(r: WorkloadReview) -> dict[str, Any]:
    w = r.workload
    return {
        "source": r.doc.source,
        "path": r.doc.path,
        "line": r.doc.line,
        "apiVersion": w.api_version,
        "kind": w.kind,
        "namespace": r.namespace,
        "name": w.name,
        "role": w.role,
        "class": w.klass,
        "tier": w.tier,
        "tierSource": w.tier_source,
        "pods": w.total_pods,
        "gpus": w.total_gpus,
        "decision": r.outcome,
        "allowed": r.decision.allowed,
        "answers": [_answer(a) for a in r.answers],
        "findings": [_finding(f) for f in r.findings],
        "mutations": [
            {"policy": m.policy, "operations": m.operations, "paths": list(m.paths)} for m in r.mutations
        ],
        "patch": r.decision.patch,
    }


def _answer(a: Answer) -> dict[str, Any]:
    return {
        "question": a.key,
        "title": a.question,
        "verdict": a.verdict,
        "summary": a.summary,
        "evidence": [{"field": e.field, "value": e.value, "addedBy": e.added_by} for e in a.evidence],
    }


def _finding(f: FindingRecord) -> dict[str, Any]:
    out: dict[str, Any] = {
        "level": f.level,
        "policy": f.policy,
        "message": f.message,
        "field": f.field,
        "path": f.location.path,
        "line": f.location.line,
        "reason": f.reason,
    }
    if f.level == "exempt":
        out["justification"] = f.justification
        if f.exception is not None:
            out["exception"] = {
                "name": f.exception.id,
                "owner": f.exception.owner,
                "expiresAt": f.exception.expires_at.isoformat().replace("+00:00", "Z"),
                "file": f.exception.path,
            }
    return out

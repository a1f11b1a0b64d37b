"""Report -> SARIF 2.1.0, for code-scanning uploads (GitHub `codeql-action/upload-sarif` and others).

One rule per policy (level by mode: Enforce error, Warn warning, Audit note); one result per
finding, located at the line of the field it names. An exempted finding stays a result, with an
external suppression that carries the exception's justification, so the waiver is visible where
the finding would be.
"""

from __future__ import annotations

import hashlib
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from webhook import __version__
from webhook.engine import Policy
from webhook.reviewgate.report import FindingRecord, Report, WorkloadReview

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
MODE_LEVELS = {"Enforce": "error", "Warn": "warning", "Audit": "note"}
LEVELS = {"deny": "error", "warn": "warning", "audit": "note"}
FINGERPRINT = "trainguardFinding/v1"


def render(report: Report, *, base: Path | None = None) -> dict[str, Any]:
    """The SARIF log; artifact URIs are relative to `base` (default: the working directory)."""
    policies = [cp.policy for cp in report.policies.policies]
    index = {p.name: i for i, p in enumerate(policies)}
    results = [
        _result(review, f, index, policies, base)
        for review in report.reviews
        for f in review.findings
        if f.message  # an exemption with nothing to exempt is no finding
    ]
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "trainguard",
                        "version": __version__,
                        "semanticVersion": __version__,
                        "rules": [rule(p) for p in policies],
                    }
                },
                "results": results,
                "columnKind": "unicodeCodePoints",
            }
        ],
    }


def rule(p: Policy) -> dict[str, Any]:
    description = p.description or p.title
    level = MODE_LEVELS[p.mode] if not p.mutating else "none"
    return {
        "id": p.name,
        "name": "".join(part.capitalize() for part in p.name.replace("_", "-").split("-")),
        "shortDescription": {"text": p.title},
        "fullDescription": {"text": description},
        "help": {"text": description},
        "defaultConfiguration": {"level": level},
        "properties": {"tags": ["trainguard", "mutation" if p.mutating else "validation"], "mode": p.mode},
    }


def _result(
    review: WorkloadReview, f: FindingRecord, index: dict[str, int], policies: list[Policy], base: Path | None
) -> dict[str, Any]:
    i = index.get(f.policy)
    level = LEVELS.get(f.level) or (MODE_LEVELS[policies[i].mode] if i is not None else "warning")
    result: dict[str, Any] = {
        "ruleId": f.policy,
        "level": level,
        "message": {"text": f.message},
        "locations": [
            {
                "physicalLocation": {
                    "artifactLocation": {
                        "uri": artifact_uri(f.location.path, base),
                        "uriBaseId": "%SRCROOT%",
                    },
                    "region": {"startLine": f.location.line},
                },
                "logicalLocations": [
                    {
                        "name": f"{review.namespace}/{review.workload.name}",
                        "fullyQualifiedName": review.ident,
                        "kind": "resource",
                    }
                ],
            }
        ],
        "partialFingerprints": {FINGERPRINT: _fingerprint(review, f)},
        "properties": {"workload": review.ident, "field": f.field, "reason": f.reason},
    }
    if i is not None:
        result["ruleIndex"] = i
    if f.level == "exempt":
        suppression: dict[str, Any] = {
            "kind": "external",
            "status": "accepted",
            "justification": f.justification or "",
        }
        if f.exception is not None:
            suppression["properties"] = {
                "exception": f.exception.id,
                "owner": f.exception.owner,
                "expiresAt": f.exception.expires_at.isoformat().replace("+00:00", "Z"),
            }
        result["suppressions"] = [suppression]
    return result


def _fingerprint(review: WorkloadReview, f: FindingRecord) -> str:
    """Stable across line moves: the workload, the policy, the field and the message."""
    key = "\x00".join((review.ident, f.policy, f.field or "", f.message))
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def artifact_uri(path: str, base: Path | None = None) -> str:
    """A relative URI for `path`: relative to `base` (default: the working directory) when inside it."""
    if path in ("-", "<stdin>"):
        return "stdin"
    p = Path(path)
    if p.is_absolute():
        try:
            p = p.resolve().relative_to((base or Path.cwd()).resolve())
        except ValueError:
            return p.as_uri()
    posix = PurePosixPath(*p.parts).as_posix()
    return quote(posix, safe="/")

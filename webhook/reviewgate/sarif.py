"""Report -> SARIF 2.1.0, for code-scanning uploads (GitHub `codeql-action/upload-sarif` and others).

One rule per policy (webhook.sarif_log, shared with `trainguard audit`); one result per finding,
located at the line of the field it names. An exempted finding stays a result, with an
external suppression that carries the exception's justification, so the waiver is visible where
the finding would be.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

from webhook import sarif_log
from webhook.engine import Policy
from webhook.reviewgate.report import FindingRecord, Report, WorkloadReview

LEVELS = {"deny": "error", "warn": "warning", "audit": "note"}


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
    return sarif_log.log(policies, results, columnKind="unicodeCodePoints")


def _result(
    review: WorkloadReview, f: FindingRecord, index: dict[str, int], policies: list[Policy], base: Path | None
) -> dict[str, Any]:
    i = index.get(f.policy)
    level = LEVELS.get(f.level) or (sarif_log.MODE_LEVELS[policies[i].mode] if i is not None else "warning")
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
                    sarif_log.resource(f"{review.namespace}/{review.workload.name}", review.ident)
                ],
            }
        ],
        # Stable across line moves: the workload, the policy, the field and the message.
        "partialFingerprints": sarif_log.fingerprint(review.ident, f.policy, f.field or "", f.message),
        "properties": {"workload": review.ident, "field": f.field, "reason": f.reason},
    }
    if i is not None:
        result["ruleIndex"] = i
    if f.level == "exempt":
        suppression = sarif_log.suppression(f.justification or "")
        if f.exception is not None:
            suppression["properties"] = {
                "exception": f.exception.id,
                "owner": f.exception.owner,
                "expiresAt": f.exception.expires_at.isoformat().replace("+00:00", "Z"),
            }
        result["suppressions"] = [suppression]
    return result


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

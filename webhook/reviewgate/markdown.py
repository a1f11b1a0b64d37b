"""Report -> Markdown, what a reviewer reads in a pull request or a CI job summary.

A summary table (one row per workload), then one section per workload: the five review answers
with their evidence, the findings (deny, warn, audit, exempt with its justification) and what the
mutations changed. No timestamps or versions: the same input renders the same text.
"""

from __future__ import annotations

from typing import Any

import orjson

from webhook.markdown_text import code, text
from webhook.reviewgate.questions import Answer, Evidence, tier_source
from webhook.reviewgate.report import FindingRecord, Report, WorkloadReview
from webhook.workloads import Workload

DECISIONS = {"denied": "❌ denied", "warnings": "⚠️ admitted with warnings", "admitted": "✅ admitted"}
VERDICTS = {"ok": "✅ ok", "needs attention": "⚠️ needs attention", "not applicable": "➖ not applicable"}
LEVELS = {"deny": "❌ deny", "warn": "⚠️ warn", "audit": "📝 audit", "exempt": "🔕 exempt"}


def render(report: Report) -> str:
    out: list[str] = ["## trainguard review", "", _headline(report), ""]
    if report.reviews:
        out += _summary_table(report)
    if report.not_reviewed:
        out += ["", "Not reviewed:", ""]
        out += [
            f"- {code(doc.source)} {text(str(doc.data.get('kind')))}: {text(reason)}"
            for doc, reason in report.not_reviewed
        ]
    for review in report.reviews:
        out += ["", *_section(review)]
    return "\n".join(out).rstrip() + "\n"


def _headline(report: Report) -> str:
    n = len(report.reviews)
    files = len(report.files)
    parts = [
        f"**{report.denied} of {n} workload{'s' if n != 1 else ''} denied**",
        f"{report.warned} admitted with warnings",
        f"{n - report.denied - report.warned} admitted",
    ]
    exempt = [f for f in report.findings("exempt") if f.message]
    tail = f" {len(exempt)} finding{'s' if len(exempt) != 1 else ''} exempted." if exempt else ""
    return f"{', '.join(parts)} ({files} file{'s' if files != 1 else ''}).{tail}"


def _summary_table(report: Report) -> list[str]:
    rows = ["| Workload | Kind | Class | Tier | Pods | GPUs | Decision |", "|---|---|---|---|---:|---:|---|"]
    for r in report.reviews:
        w = r.workload
        name = code(f"{r.namespace}/{w.name}", cell=True)
        rows.append(
            f"| {name} | {kind_label(w)} | {class_cell(w)} | {w.tier} | {w.total_pods} | {w.total_gpus} "
            f"| {DECISIONS[r.outcome]} |"
        )
    return rows


def _section(r: WorkloadReview) -> list[str]:
    w = r.workload
    icon = DECISIONS[r.outcome].split(" ", 1)[0]
    out = [
        f"### {icon} {kind_label(w)} {code(f'{r.namespace}/{w.name}')}",
        "",
        f"{code(r.doc.path)} line {r.doc.line} · role {w.role}{_class_part(w)} · tier **{w.tier}** "
        f"({tier_source(w)}) · {_count(w.total_pods, 'pod')} · {_count(w.total_gpus, 'GPU')}",
        "",
        "#### Review questions",
        "",
    ]
    for i, a in enumerate(r.answers, 1):
        out += _answer(i, a)
    out += ["", "#### Findings", ""]
    out += _findings(r.findings) if r.findings else ["No findings."]
    out += ["", "#### Mutations", ""]
    if r.mutations:
        out += [
            f"- {code(m.policy)} ({m.operations} operation{'s' if m.operations != 1 else ''}): "
            + ", ".join(code(p) for p in m.paths)
            for m in r.mutations
        ]
    else:
        out.append("None: admitted as written.")
    return out


def class_cell(w: Workload) -> str:
    """The class for training; inference has none (A/B/C describe how a training job gangs)."""
    return w.klass if w.role == "training" else "–"


def _class_part(w: Workload) -> str:
    return f" · class **{w.klass}**" if w.role == "training" else ""


def kind_label(w: Workload) -> str:
    """The kind, with its group where the kind alone is ambiguous (Volcano's Job is not batch/v1's)."""
    group = w.api_version.rpartition("/")[0]
    return f"{w.kind} ({group})" if w.kind == "Job" and group not in ("", "batch") else w.kind


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _answer(i: int, a: Answer) -> list[str]:
    out = [f"{i}. **{a.question}** ({VERDICTS[a.verdict]}): {text(a.summary)}"]
    out += [f"   - {_evidence(e)}" for e in a.evidence]
    return out


def _evidence(e: Evidence) -> str:
    value = "not set" if e.value is None else code(_value(e.value))
    line = f"{code(e.field)} = {value}" if e.field else value
    if e.added_by:
        line += f" _(added by {text(e.added_by)})_"
    return line


def _findings(findings: tuple[FindingRecord, ...]) -> list[str]:
    rows = ["| Result | Policy | Field | Message |", "|---|---|---|---|"]
    for f in findings:
        where = (
            f"{code(f.field, cell=True)} (line {f.location.line})" if f.field else f"line {f.location.line}"
        )
        message = text(f.message) if f.message else "_(nothing to report: the policy passes)_"
        if f.level == "exempt":
            message += "<br>" + _exemption(f)
        rows.append(f"| {LEVELS[f.level]} | {code(f.policy, cell=True)} | {where} | {message} |")
    return rows


def _exemption(f: FindingRecord) -> str:
    exc = f.exception
    if exc is None:
        return f"**Exempted**: {text(f.justification or '')}"
    meta = f"owner {text(exc.owner)}, expires {exc.expires_at.isoformat().replace('+00:00', 'Z')}"
    return f"**Exempted** by {code(exc.id, cell=True)} ({meta}): {text(exc.justification)}"


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()

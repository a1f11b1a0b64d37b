"""An audit run -> table / json / markdown / sarif, for `trainguard audit`.

The SARIF log (webhook.sarif_log) and the Markdown escaping (webhook.markdown_text) are the ones
the review gate writes, so a policy reads the same in a pull request and in a cluster audit.
Cluster objects have no file and line: SARIF results carry a logical location (the object)
instead of a physical one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import orjson

from webhook import markdown_text, sarif_log
from webhook.audit.compare import Change, Comparison
from webhook.audit.decide import RESULTS, ObjectAudit
from webhook.engine import Policy

VERDICT_LABELS = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "error": "ERROR"}
SARIF_LEVELS = {"fail": "error", "error": "error", "warn": "warning", "skip": "note"}


@dataclass
class AuditRun:
    audits: list[ObjectAudit]
    policies: Sequence[Policy]
    scope: str  # "all namespaces" or "namespace NS"
    missing: list[str] = field(default_factory=list)  # kinds the API server does not serve
    comparison: Comparison | None = None
    proposed: str | None = None  # the proposed policy paths, for headings

    def summary(self) -> dict[str, Any]:
        verdicts = [a.verdict for a in self.audits]
        results = dict.fromkeys(RESULTS, 0)
        for a in self.audits:
            for r in a.rows:
                results[r.result] += 1
        return {
            "workloads": len(self.audits),
            "fail": verdicts.count("fail") + verdicts.count("error"),
            "warn": verdicts.count("warn"),
            "pass": verdicts.count("pass"),
            "wouldPatch": sum(1 for a in self.audits if a.patch),
            "results": results,
        }


def record(a: ObjectAudit) -> dict[str, Any]:
    ref = a.ref
    return {
        "apiVersion": ref.api_version,
        "kind": ref.kind,
        "namespace": ref.namespace,
        "name": ref.name,
        "uid": ref.uid,
        "class": a.klass,
        "tier": a.tier,
        "role": a.role,
        "verdict": a.verdict,
        "results": [
            {
                "policy": r.policy,
                "result": r.result,
                "mode": r.mode,
                "severity": r.severity,
                "category": r.category,
                "message": r.message,
                **({"exemption": r.exemption} if r.exemption else {}),
                **({"fields": [f for f in r.fields if f]} if any(r.fields) else {}),
            }
            for r in a.rows
        ],
        "wouldPatch": list(a.patch),
    }


def write(run: AuditRun, output: str, out: TextIO) -> None:
    if output == "json":
        doc: dict[str, Any] = {
            "scope": run.scope,
            "results": [record(a) for a in run.audits],
            "summary": run.summary(),
            "notServed": run.missing,
        }
        if run.comparison is not None:
            doc["comparison"] = run.comparison.records()
        out.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    elif output == "sarif":
        out.write(orjson.dumps(render_sarif(run), option=orjson.OPT_INDENT_2).decode() + "\n")
    elif output == "markdown":
        out.write(render_markdown(run))
    else:
        out.write(render_table(run))


# -- table ----------------------------------------------------------------------------------------


def render_table(run: AuditRun) -> str:
    rows = [
        (
            a.ref.kind,
            f"{a.ref.namespace}/{a.ref.name}" if a.ref.namespace else a.ref.name,
            a.klass or "-",
            a.tier or "-",
            VERDICT_LABELS[a.verdict],
        )
        for a in run.audits
    ]
    headers = ("KIND", "NAME", "CLASS", "TIER", "RESULT")
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [line(headers)]
    for a, row in zip(run.audits, rows, strict=True):
        out.append(line(row))
        for r in a.rows:
            if r.result in ("fail", "warn", "error") and r.category == "validation":
                out.append(f"    {r.result:<5} {r.policy}: {r.message}")
            elif r.exemption:
                out.append(f"    exempt {r.policy}: {r.exemption}")
            elif r.patch:
                out.append(f"    {r.message} ({r.policy})")
    s = run.summary()
    out.append("")
    out.append(
        f"{s['workloads']} workloads in {run.scope}: {s['fail']} failing, {s['warn']} with warnings, "
        f"{s['pass']} passing; {s['wouldPatch']} would be patched"
    )
    for kind in run.missing:
        out.append(f"not served by the API server (skipped): {kind}")
    if run.comparison is not None:
        out += _comparison_lines(run.comparison, run.proposed)
    return "\n".join(out) + "\n"


def _comparison_lines(c: Comparison, proposed: str | None) -> list[str]:
    out = ["", f"With the proposed policies{f' ({proposed})' if proposed else ''}:"]
    for title, changes in (("would newly fail", c.newly_failing), ("would newly pass", c.newly_passing)):
        out.append(f"  {len(changes)} {title}")
        for ch in changes:
            out.append(f"    {_ident(ch)}: {', '.join(ch.policies)}")
            out += [f"      {m}" for m in ch.messages if m]
    out.append(f"  {c.unchanged} unchanged")
    return out


def _ident(ch: Change) -> str:
    return ch.ref.ident


# -- markdown -------------------------------------------------------------------------------------

ICONS = {"fail": "❌ fail", "error": "❌ error", "warn": "⚠️ warn", "pass": "✅ pass"}


def render_markdown(run: AuditRun) -> str:
    s = run.summary()
    out = [
        "## trainguard audit",
        "",
        f"**{s['fail']} of {s['workloads']} workloads failing**, {s['warn']} with warnings, "
        f"{s['pass']} passing ({markdown_text.text(run.scope)}); {s['wouldPatch']} would be patched.",
        "",
    ]
    if run.audits:
        out += ["| Workload | Kind | Class | Tier | Result |", "|---|---|---|---|---|"]
        for a in run.audits:
            name = markdown_text.code(
                f"{a.ref.namespace}/{a.ref.name}" if a.ref.namespace else a.ref.name, cell=True
            )
            out.append(f"| {name} | {a.ref.kind} | {a.klass or '-'} | {a.tier or '-'} | {ICONS[a.verdict]} |")
    findings = [
        (a, r)
        for a in run.audits
        for r in a.rows
        if r.result != "pass" and (r.category == "validation" or r.patch)
    ]
    if findings:
        out += ["", "### Findings", ""]
        for a, r in findings:
            what = "would patch" if r.patch else r.result
            where, policy = markdown_text.code(a.ref.ident), markdown_text.code(r.policy)
            message = r.message.removeprefix("would patch ") if r.patch else r.message
            out.append(f"- {where} **{what}** {policy}: {markdown_text.text(message)}")
    if run.missing:
        out += [
            "",
            "Not served by the API server (skipped): "
            + ", ".join(markdown_text.code(k) for k in run.missing),
        ]
    if run.comparison is not None:
        c = run.comparison
        out += ["", "### Proposed policies", ""]
        for title, changes in (("Would newly fail", c.newly_failing), ("Would newly pass", c.newly_passing)):
            out.append(f"**{title}: {len(changes)}**")
            out.append("")
            for ch in changes:
                pols = ", ".join(markdown_text.code(p) for p in ch.policies)
                out.append(f"- {markdown_text.code(ch.ref.ident)}: {pols}")
            out.append("")
        out.append(f"{c.unchanged} unchanged.")
    return "\n".join(out).rstrip() + "\n"


# -- sarif ----------------------------------------------------------------------------------------


def render_sarif(run: AuditRun) -> dict[str, Any]:
    policies = list(run.policies)
    index = {p.name: i for i, p in enumerate(policies)}
    results = []
    for a in run.audits:
        for r in a.rows:
            level = SARIF_LEVELS.get(r.result)
            if level is None or r.category != "validation":
                continue
            result: dict[str, Any] = {
                "ruleId": r.policy,
                "level": level,
                "message": {"text": r.message or r.policy},
                "locations": [
                    {
                        "logicalLocations": [
                            sarif_log.resource(
                                f"{a.ref.namespace}/{a.ref.name}" if a.ref.namespace else a.ref.name,
                                f"{a.ref.api_version}/{a.ref.ident}",
                            )
                        ]
                    }
                ],
                "partialFingerprints": sarif_log.fingerprint(
                    a.ref.api_version, a.ref.ident, r.policy, r.message
                ),
                "properties": {"uid": a.ref.uid, "mode": r.mode, "severity": r.severity},
            }
            if r.policy in index:
                result["ruleIndex"] = index[r.policy]
            if r.exemption:
                result["suppressions"] = [sarif_log.suppression(r.exemption)]
            results.append(result)
    return sarif_log.log(policies, results, properties={"scope": run.scope})

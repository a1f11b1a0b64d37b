"""`trainguard check PATH…`: the dry-run admission of manifest files, on the webhook's engine."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson
import yaml

from webhook.cli import EXIT_ALLOWED, EXIT_DENIED
from webhook.cli._common import (
    add_engine_args,
    build_engine,
    decide_all,
    load_inputs,
    load_policy_exceptions,
)
from webhook.documents import Document
from webhook.engine import Decision


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check",
        help="decide manifest files as the admission webhook would (dry run)",
        description="Decide every object in the given files as the admission webhook would: mutate, "
        "then validate the mutated object. Exit 0 when all are admitted, 1 when any is denied, "
        "2 on bad input, policies or config.",
    )
    p.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="files, directories (searched for .yaml/.yml/.json), or - for stdin",
    )
    add_engine_args(p)
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    p.set_defaults(run=run)


def result_record(doc: Document, decision: Decision) -> dict[str, Any]:
    obj = doc.data
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    w = decision.workload
    return {
        "source": doc.source,
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "namespace": w.namespace if w is not None else meta.get("namespace"),
        "name": meta.get("name") or meta.get("generateName"),
        "role": w.role if w is not None else None,
        "class": w.klass if w is not None else None,
        "tier": w.tier if w is not None else None,
        "allowed": decision.allowed,
        "violations": [
            {"policy": f.policy, "message": f.message, "field": f.field, "reason": f.reason}
            for f in decision.violations
        ],
        "warnings": [{"policy": f.policy, "message": f.message, "field": f.field} for f in decision.warnings],
        "audits": [{"policy": f.policy, "message": f.message, "field": f.field} for f in decision.audits],
        "exemptions": [
            {"policy": r.policy, "justification": r.exemption, "messages": list(r.messages)}
            for r in decision.results
            if r.outcome == "exempt"
        ],
        "patch": decision.patch,
        "skipped": decision.skipped_reason,
    }


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    workloads = [r for r in records if r["class"] is not None]
    return {
        "documents": len(records),
        "workloads": len(workloads),
        "allowed": sum(1 for r in records if r["allowed"]),
        "denied": sum(1 for r in records if not r["allowed"]),
        "warnings": sum(len(r["warnings"]) for r in records),
        "mutated": sum(1 for r in records if r["patch"]),
        "classes": {c: sum(1 for r in workloads if r["class"] == c) for c in ("A", "B", "C")},
    }


def _table(records: list[dict[str, Any]], out: Any) -> None:
    rows = [
        (
            r["source"],
            str(r["kind"]),
            f"{r['namespace']}/{r['name']}" if r["namespace"] else str(r["name"]),
            r["class"] or "-",
            r["tier"] or "-",
            ("ADMITTED" if r["allowed"] else "DENIED") if r["class"] else "not decided",
        )
        for r in records
    ]
    headers = ("SOURCE", "KIND", "NAME", "CLASS", "TIER", "DECISION")
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out.write(line(headers) + "\n")
    for r, row in zip(records, rows, strict=True):
        out.write(line(row) + "\n")
        for v in r["violations"]:
            out.write(f"    deny  {v['policy']}: {v['message']}\n")
        for v in r["warnings"]:
            out.write(f"    warn  {v['policy']}: {v['message']}\n")
        for v in r["audits"]:
            out.write(f"    audit {v['policy']}: {v['message']}\n")
        for e in r["exemptions"]:
            out.write(f"    exempt {e['policy']}: {e['justification']}\n")
        if r["patch"]:
            paths = ", ".join(sorted({op["path"] for op in r["patch"]}))
            out.write(f"    patch {len(r['patch'])} operation(s): {paths}\n")
    s = summary(records)
    out.write(
        f"\n{s['documents']} documents, {s['workloads']} workloads: {s['allowed']} admitted, "
        f"{s['denied']} denied, {s['warnings']} warnings, {s['mutated']} mutated\n"
    )


def run(args: argparse.Namespace) -> int:
    config, policies, docs = load_inputs(args)
    engine = build_engine(policies, config, docs, load_policy_exceptions(args, policies))
    decisions = decide_all(engine, docs, args.namespace)
    records = [result_record(doc, d) for doc, d in zip(docs, decisions, strict=True)]
    if args.output == "json":
        sys.stdout.buffer.write(
            orjson.dumps({"results": records, "summary": summary(records)}, option=orjson.OPT_INDENT_2)
        )
        sys.stdout.write("\n")
    elif args.output == "yaml":
        yaml.safe_dump({"results": records, "summary": summary(records)}, sys.stdout, sort_keys=False)
    else:
        _table(records, sys.stdout)
    return EXIT_ALLOWED if all(r["allowed"] for r in records) else EXIT_DENIED

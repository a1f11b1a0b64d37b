"""`trainguard check PATH…`: the dry-run admission of manifest files, on the webhook's engine."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import orjson
import yaml

from webhook.cli import EXIT_ALLOWED, EXIT_DENIED, EXIT_ERROR
from webhook.cli._file_engine import (
    Context,
    add_engine_args,
    decide_document,
    engine_for,
    load_policy_exceptions,
)
from webhook.cli._parallel import Run, decide_in_workers, workers_for
from webhook.config import load_config
from webhook.documents import Document, collect_inputs, manifest_inputs
from webhook.engine import Decision, Engine, load_policy_set
from webhook.errors import InputError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check",
        help="decide manifest files as the admission webhook would (dry run)",
        description="Decide every object in the given files as the admission webhook would: mutate, "
        "then validate the mutated object. Every readable document is decided and every unreadable "
        "one reported (file, document, line). Exit 0 when all are admitted, 1 when any is denied, "
        "2 when any input could not be read or decided, or on bad policies or config.",
    )
    add_engine_args(p)
    p.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    p.add_argument(
        "-j",
        "--jobs",
        type=_jobs,
        default=None,
        metavar="N",
        help="worker processes that read and decide the files (default: one per CPU that other "
        "work leaves idle, for inputs of 1 MiB or more; 1: none). The output is the same either way",
    )
    p.set_defaults(run=run)


def _jobs(value: str) -> int:
    try:
        jobs = int(value)
    except ValueError:
        jobs = 0
    if jobs < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value!r}")
    return jobs


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
        # Keys sorted, as the webhook encodes them: a map built by CEL has no order of its own (its
        # runtime's varies from call to call), and a report must read the same on every run.
        "patch": orjson.loads(orjson.dumps(decision.patch, option=orjson.OPT_SORT_KEYS)),
        "skipped": decision.skipped_reason,
    }


def error_record(exc: InputError) -> dict[str, Any]:
    return {
        "source": exc.source,
        "document": exc.document,
        "line": exc.line,
        "field": exc.field,
        "message": exc.message,
    }


def summary(records: list[dict[str, Any]], errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    workloads = [r for r in records if r["class"] is not None]
    return {
        "documents": len(records),
        "workloads": len(workloads),
        "allowed": sum(1 for r in records if r["allowed"]),
        "denied": sum(1 for r in records if not r["allowed"]),
        "warnings": sum(len(r["warnings"]) for r in records),
        "mutated": sum(1 for r in records if r["patch"]),
        "errors": len(errors or ()),
        "classes": {c: sum(1 for r in workloads if r["class"] == c) for c in ("A", "B", "C")},
    }


def _table(records: list[dict[str, Any]], errors: list[dict[str, Any]], out: Any) -> None:
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
    ] + [
        (
            _where(e),
            "-",
            "-",
            "-",
            "-",
            "ERROR",
        )
        for e in errors
    ]
    headers = ("SOURCE", "KIND", "NAME", "CLASS", "TIER", "DECISION")
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out.write(line(headers) + "\n")
    for r, row in zip(records, rows, strict=False):
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
    for e, row in zip(errors, rows[len(records) :], strict=True):
        out.write(line(row) + "\n")
        where = f"line {e['line']}" if e["line"] is not None else ""
        if e["field"]:
            where = f"{where}, field {e['field']}" if where else f"field {e['field']}"
        out.write(f"    error {where + ': ' if where else ''}{e['message']}\n")
    s = summary(records, errors)
    out.write(
        f"\n{s['documents']} documents, {s['workloads']} workloads: {s['allowed']} admitted, "
        f"{s['denied']} denied, {s['warnings']} warnings, {s['mutated']} mutated"
        + (f", {s['errors']} errors" if errors else "")
        + "\n"
    )


def _where(e: dict[str, Any]) -> str:
    source = e["source"] or "<input>"
    return f"{source}#{e['document']}" if e["document"] is not None else source


def run(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    policies = load_policy_set(args.policies or (), args.cel)
    exceptions = load_policy_exceptions(args, policies)
    inputs = manifest_inputs(args.paths)

    def make_engine(context: Context) -> Engine:
        return engine_for(policies, config, context, exceptions)

    def decide(engine: Engine, docs: list[Document]) -> tuple[list[dict[str, Any]], list[InputError]]:
        records, errors = [], []
        for doc in docs:
            try:
                records.append(result_record(doc, _decide(engine, doc, args.namespace)))
            except InputError as exc:
                errors.append(exc)
        return records, errors

    workers = workers_for(inputs, args.jobs)
    if workers > 1:
        records, errors = decide_in_workers(inputs, workers, Run(make_engine, decide))
    else:
        found = collect_inputs(inputs, stdin=sys.stdin)
        records, decide_errors = decide(make_engine(Context.of(found.documents)), found.documents)
        errors = found.errors + decide_errors
    error_records = [error_record(e) for e in errors]
    for e in errors:
        print(f"trainguard: error: {e.describe()}", file=sys.stderr)
    if args.output == "json":
        out = {"results": records, "errors": error_records, "summary": summary(records, error_records)}
        sys.stdout.buffer.write(orjson.dumps(out, option=orjson.OPT_INDENT_2))
        sys.stdout.write("\n")
    elif args.output == "yaml":
        out = {"results": records, "errors": error_records, "summary": summary(records, error_records)}
        yaml.dump(out, sys.stdout, Dumper=_ReportDumper, sort_keys=False)
    else:
        _table(records, error_records, sys.stdout)
    if errors:
        return EXIT_ERROR
    return EXIT_ALLOWED if all(r["allowed"] for r in records) else EXIT_DENIED


class _ReportDumper(yaml.SafeDumper):
    """SafeDumper that writes a value seen twice out again instead of as an alias: whether two
    records share an object depends on which process decided them, the report must not."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _decide(engine: Engine, doc: Document, namespace: str) -> Decision:
    """One document's decision; input too deep or too large to decide is that document's error."""
    try:
        return decide_document(engine, doc, namespace)
    except (RecursionError, MemoryError) as exc:
        what = "nested too deeply" if isinstance(exc, RecursionError) else "too large"
        raise InputError(f"{what} to decide", source=doc.path, document=doc.index, line=doc.line) from None

"""`trainguard review PATH…`: the platform review gate, on the webhook's engine.

Decides every manifest as `check` does and answers the review questions for each workload, as
Markdown (pull requests, job summaries), SARIF (code scanning), JUnit XML or JSON.
"""

from __future__ import annotations

import argparse
import sys

import orjson

from webhook.cli import EXIT_ALLOWED, EXIT_DENIED
from webhook.cli._file_engine import add_engine_args, build_engine, load_inputs, load_policy_exceptions
from webhook.reviewgate import junit, markdown, record, sarif
from webhook.reviewgate.report import Report, build_report


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "review",
        help="review manifest files for a pull request (markdown, sarif, junit, json)",
        description="Decide every object in the given files as the admission webhook would, and "
        "answer the platform review questions for each workload (gang, topology, preemption, "
        "recovery, pool). Exit 0 when nothing fails the gate, 1 when something does (see --fail-on), "
        "2 on bad input, policies, config or exceptions.",
    )
    add_engine_args(p)
    p.add_argument("-o", "--output", choices=("markdown", "sarif", "junit", "json"), default="markdown")
    p.add_argument(
        "--fail-on",
        choices=("deny", "warn"),
        default="deny",
        help="exit 1 when any finding denies (deny, the default), or also on warnings (warn)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    config, policies, docs = load_inputs(args, track_lines=True)
    exceptions = load_policy_exceptions(args, policies)
    engine = build_engine(policies, config, docs, exceptions)
    report = build_report(engine, docs, namespace=args.namespace, exceptions=exceptions)
    if args.output == "markdown":
        sys.stdout.write(markdown.render(report))
    elif args.output == "junit":
        sys.stdout.write(junit.render(report))
    else:
        data = sarif.render(report) if args.output == "sarif" else record.render(report)
        sys.stdout.buffer.write(orjson.dumps(data, option=orjson.OPT_INDENT_2))
        sys.stdout.write("\n")
    return exit_code(report, args.fail_on)


def exit_code(report: Report, fail_on: str) -> int:
    if report.denied or (fail_on == "warn" and report.findings("warn")):
        return EXIT_DENIED
    return EXIT_ALLOWED

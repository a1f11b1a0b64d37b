"""`trainguard test DIR…`: run declarative PolicyTest files on the webhook's engine.

Prints a line per case in pytest's style (`PASSED file::case`, `FAILED file::case - reason`), then
`N passed, M failed` (and `, K skipped`). Exit 0 when every case passed, 1 when one failed (or,
with --require-tests, when a tested policy has no case), 2 on a malformed test file.
"""

from __future__ import annotations

import argparse
import sys

from webhook.cli import EXIT_ALLOWED, EXIT_DENIED
from webhook.errors import InputError
from webhook.policytest import Runner, discover, load_test_file, run_file, untested_policies


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "test",
        help="run declarative policy tests (PolicyTest files)",
        description="Run every PolicyTest file (kind: PolicyTest) under the given directories. "
        "Exit 0 when all cases pass, 1 when any fails, 2 on a malformed test file.",
    )
    p.add_argument(
        "paths", nargs="+", metavar="DIR", help="directories searched for *.yaml PolicyTest files, or files"
    )
    p.add_argument(
        "--require-tests",
        action="store_true",
        help="also fail when a policy of a tested policy set is named by no case",
    )
    p.add_argument(
        "--cel",
        choices=("auto", "cel-expr-python", "cel-python"),
        default=None,
        help="CEL runtime (default: cel-expr-python when installed)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    # Load everything first: a malformed file is an error (exit 2) before any case runs.
    tests = [load_test_file(path) for path in discover(args.paths)]
    if not tests:
        raise InputError(f"no PolicyTest files (kind: PolicyTest) found in {', '.join(args.paths)}")
    runner = Runner(None if args.cel == "auto" else args.cel)
    for test in tests:
        runner.engine(test)  # compiles the policies and checks the cases' policy names
    out = sys.stdout
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for test in tests:
        for result in run_file(test, runner):
            counts[result.status] += 1
            line = f"{result.status.upper()} {result.id}"
            if result.reason:
                line += " - " + " ".join(result.reason.split())
            out.write(line + "\n")
    failed = counts["failed"] > 0
    if args.require_tests:
        missing = untested_policies(tests, runner)
        for policy, path in missing:
            out.write(f"UNTESTED {policy} ({path}) - no case names this policy\n")
        failed = failed or bool(missing)
    summary = f"{counts['passed']} passed, {counts['failed']} failed"
    if counts["skipped"]:
        summary += f", {counts['skipped']} skipped"
    out.write(summary + "\n")
    return EXIT_DENIED if failed else EXIT_ALLOWED

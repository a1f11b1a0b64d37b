"""Run trainguard's benchmarks; print each part's tables, then one JSON summary line, last.

    python tests/bench/run.py            # the full run (about 10 to 15 minutes)
    python tests/bench/run.py --quick    # fewer rounds and shorter loads (about 2 minutes)
    python tests/bench/run.py --only engine,cli

Parts: engine (in process), cli (`trainguard check` as a subprocess), http (trainguard's webhook
against the no-op floor on the same stack, A/B, and the worker's memory), apiserver (creating Pods
and Jobs through a real kube-apiserver, with and without the webhooks). Which code is measured:
the `webhook` package Python imports (this checkout unless PYTHONPATH says otherwise).
Needs: wrk (else the Go load generator measures throughput too), Go (the load generator, built
on first use), and for the apiserver part the e2e binaries (built on first use by tests/e2e).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import inputs
from measure import log

PARTS = ("engine", "cli", "http", "apiserver", "parsers")
REQUIRED = (
    "throughput_ratio",
    "noop_rps",
    "policy_rps",
    "p99_added_ms",
    "engine_ms_per_admission",
    "cli_manifests_per_s",
    "rss_mb",
)


def _git(*args: str) -> str:
    try:
        return subprocess.run(
            ["git", *args], cwd=inputs.REPO, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter loads")
    parser.add_argument(
        "--only", default=",".join(PARTS), help=f"comma-separated parts of {', '.join(PARTS)}"
    )
    parser.add_argument("--json-out", metavar="FILE", help="also write the summary to FILE")
    args = parser.parse_args(argv)
    parts = [p.strip() for p in args.only.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")

    import webhook

    started = time.monotonic()
    summary: dict[str, Any] = dict.fromkeys(REQUIRED)
    summary.update(
        {
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "quick": args.quick,
            "commit": _git("rev-parse", "--short", "HEAD"),
            "dirty": bool(_git("status", "--porcelain", "--", "webhook")),
            "code": str(Path(webhook.__file__).resolve().parent),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        }
    )
    failed = []
    for part in parts:
        log(f"== {part} ==")
        t0 = time.monotonic()
        try:
            module = __import__(f"bench_{part}")
            summary.update(module.run(quick=args.quick))
        except Exception as exc:  # one broken part must not hide the others' figures
            traceback.print_exc()
            failed.append(part)
            summary[f"{part}_error"] = f"{type(exc).__name__}: {exc}"[:300]
        summary[f"{part}_seconds"] = round(time.monotonic() - t0, 1)
        sys.stdout.flush()
    summary["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    summary["total_seconds"] = round(time.monotonic() - started, 1)
    line = json.dumps(summary, separators=(",", ":"))
    if args.json_out:
        Path(args.json_out).write_text(line + "\n", encoding="utf-8")
    print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

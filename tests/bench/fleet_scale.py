"""The fleet at several sizes: how admission's cost and the audit's first reports grow with nodes.

For each size of `--scale` (default 100,300,1000 nodes) a fresh fleet (tests/fleet) runs the burst
of tests/bench/fleet.py (its three arms: trainguard on, off, off with the same objects; one untimed
burst per arm, then `--rounds` rounds), then:

* ``peak_rss_mib``: VmHWM from /proc of every process of ``trainguard serve`` (the supervisor and
  its worker): the peak resident set since the server started, over every arm of the run;
* ``audit_first_reports_seconds``: a second server, ``serve --audit`` (its webhooks not registered,
  the wgpolicyk8s.io report CRDs installed), started while the last burst's Jobs are still in the
  cluster: seconds from its start to the first moment the PolicyReports of the burst namespace name
  every one of those Jobs.

One JSON line per size (the burst's figures of fleet.py plus the above), then one summary line:
each figure per size and its growth from the smallest size to the largest. Burst jobs per size are
`--jobs` capped at what the size's training pool holds (80 on 100 nodes).

    python tests/bench/fleet_scale.py [--scale 100,300,1000] [--jobs 300] [--rounds 1]

On two shared cores a 1,000-node fleet's burst of 300 jobs takes minutes per arm: one round at that
size already means four bursts (the untimed one per arm, then the round).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench.fleet import run_burst  # noqa: E402 - after the path the script runs from
from tests.e2e.controlplane import free_port  # noqa: E402
from tests.fleet import scenarios  # noqa: E402
from tests.fleet.fleet import (  # noqa: E402
    Fleet,
    FleetWebhookServer,
    _process_tree,
    layout,
    remove_workdir,
    start_fleet,
    wait_until,
)
from tests.fleet.scenarios import burst_capacity  # noqa: E402

POLICY_REPORT_CRDS = REPO.parent / "shared" / "crds" / "policyreport"
AUDIT_NAMESPACE = "fleet-burst"
AUDIT_TIMEOUT = 900.0


def peak_rss_mib(fleet: Fleet) -> list[float]:
    """VmHWM of each process of the webhook server, in MiB (the supervisor first)."""
    process = fleet.server.process
    if process is None or process.poll() is not None:
        return []
    peaks = []
    for pid in _process_tree(process.pid):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:  # exited between the listing and the read
            continue
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                peaks.append(round(int(line.split()[1]) / 1024, 1))
    return peaks


class AuditServer(FleetWebhookServer):
    """``serve --audit`` beside the admission server: its own port, the Lease in trainguard-system."""

    def argv(self) -> list[str]:
        return [*super().argv(), "--audit", "--webhook-namespace", "trainguard-system"]


def _reported_jobs(fleet: Fleet) -> set[str]:
    names = set()
    for report in fleet.items("policyreports.wgpolicyk8s.io", AUDIT_NAMESPACE):
        for result in report.get("results") or []:
            for resource in result.get("resources") or []:
                if resource.get("kind") == "Job":
                    names.add(resource.get("name", ""))
    return names


def audit_first_reports(fleet: Fleet, jobs: int) -> float:
    """Seconds from starting ``serve --audit`` to reports naming all `jobs` burst Jobs."""
    for crd in sorted(POLICY_REPORT_CRDS.glob("*.yaml")):
        fleet.kubectl("apply", "-f", str(crd))
    fleet.trainguard(on=True)
    expected = {m["metadata"]["name"] for m in scenarios.burst_manifests(AUDIT_NAMESPACE, jobs)}
    fleet.apply(scenarios.burst_manifests(AUDIT_NAMESPACE, jobs))
    server = AuditServer(
        certs=fleet.webhook_certs,
        config=fleet.config,
        kubeconfig=fleet.plane.kubeconfig,
        log=fleet.workdir / "serve-audit.log",
    )
    server.port = free_port()
    started = time.monotonic()
    server.start()
    try:
        wait_until(
            lambda: expected <= _reported_jobs(fleet),
            AUDIT_TIMEOUT,
            f"PolicyReports naming all {jobs} Jobs of {AUDIT_NAMESPACE}",
            interval=1.0,
        )
        return time.monotonic() - started
    finally:
        server.stop()
        fleet.clear(AUDIT_NAMESPACE)


def one_size(nodes: int, args: argparse.Namespace) -> dict[str, Any]:
    capacity = burst_capacity(sum(n.pool == "training" for n in layout(nodes)))
    burst_args = argparse.Namespace(jobs=min(args.jobs, capacity), rounds=args.rounds)
    before = os.getloadavg()
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="trainguard-fleet-scale-"))
    try:
        fleet = start_fleet(nodes, workdir=workdir)
        try:
            out: dict[str, Any] = {"nodes": nodes, "training_nodes": len(fleet.training_nodes)}
            out["start_seconds"] = round(time.monotonic() - started, 1)
            out.update(run_burst(fleet, burst_args))
            out["peak_rss_mib"] = peak_rss_mib(fleet)
            if not args.no_audit:
                out["audit_first_reports_seconds"] = round(audit_first_reports(fleet, burst_args.jobs), 1)
        finally:
            fleet.stop()
    finally:
        remove_workdir(workdir)
    out["wall_seconds"] = round(time.monotonic() - started, 1)
    out["loadavg_before"] = [round(x, 2) for x in before]
    out["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    return out


def _trainguard_admission(row: dict[str, Any]) -> dict[str, Any]:
    admission: dict[str, Any] = row.get("admission_ms", {})
    return {name: figures for name, figures in admission.items() if "trainguard" in name}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure per size, and the largest size's over the smallest's."""
    figures: dict[str, dict[int, Any]] = {}
    for row in rows:
        size = row["nodes"]
        per = {
            "burst_jobs": row["burst_jobs"],
            "burst_seconds_on": row["burst_seconds_on"],
            "burst_seconds_off": row["burst_seconds_off"],
            "burst_seconds_off_same_objects": row["burst_seconds_off_same_objects"],
            "burst_ratio": row["burst_ratio"],
            "trainguard_cpu_ms_per_call": row["trainguard_cpu_ms_per_call"],
            "peak_rss_mib_max": max(row["peak_rss_mib"], default=None),
            "audit_first_reports_seconds": row.get("audit_first_reports_seconds"),
        }
        for name, figures_of in _trainguard_admission(row).items():
            per[f"admission_p50_ms {name}"] = figures_of["p50"]
            per[f"admission_p99_ms {name}"] = figures_of["p99"]
        for key, value in per.items():
            figures.setdefault(key, {})[size] = value
    out: dict[str, Any] = {"summary": figures}
    if len(rows) > 1:
        smallest, largest = rows[0]["nodes"], rows[-1]["nodes"]
        growth = {}
        for key, by_size in figures.items():
            low, high = by_size.get(smallest), by_size.get(largest)
            if isinstance(low, int | float) and isinstance(high, int | float) and low:
                growth[key] = round(high / low, 2)
        out[f"growth_{largest}_over_{smallest}"] = growth
    return out


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise ValueError("expected node counts separated by commas, such as 100,300,1000") from None
    for size in sizes:
        layout(size)  # ValueError for a size the layout cannot make
    if not sizes:
        raise ValueError("no size given")
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", default="100,300,1000", help="fleet sizes in nodes, comma-separated")
    parser.add_argument("--jobs", type=int, default=300, help="burst jobs (capped at each size's capacity)")
    parser.add_argument("--rounds", type=int, default=1, help="timed burst rounds per arm and size")
    parser.add_argument("--no-audit", action="store_true", help="skip the serve --audit measurement")
    args = parser.parse_args()
    try:
        sizes = _sizes(args.scale)
    except ValueError as error:
        parser.error(f"--scale {args.scale}: {error}")
    if args.jobs < 1 or args.rounds < 1:
        parser.error("--jobs and --rounds must be at least 1")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", file=sys.stderr)
    rows = []
    for nodes in sizes:
        row = one_size(nodes, args)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(json.dumps(summary(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

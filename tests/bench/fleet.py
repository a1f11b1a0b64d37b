"""The fleet, side by side: what trainguard's decisions do, with trainguard on and off.

Starts the fleet of tests/fleet (kube-apiserver + etcd, kube-scheduler, kube-controller-manager,
KWOK nodes with 8 GPUs each, Kueue, the training operator, trainguard) and runs its scenarios in
both arms, then prints one JSON line:

* ``partial_gpu_seconds_on/off``: GPU-seconds held by bound pods of jobs that also had a pod the
  scheduler could not place (a 4-pod PyTorchJob and a 4-pod indexed Job arriving when 2 nodes are
  free, until the blocker finishes); ``gang_bound_before_fit_on/off``: their pods bound meanwhile;
* ``same_rack_share_on/off``: the share of a stream of 4-node class B PyTorchJobs whose pods share
  one rack;
* ``pool_violations_on/off``: training pods bound on inference nodes and the reverse;
* ``member_pods_agree`` and ``operator_env_agree`` ("k/n"): pods of the Job controller and the
  training operator decided as members of their workload, and the ``PET_*`` the operator injects
  equal to what trainguard derived;
* ``agents_ready`` ("k/n"): a DaemonSet's pods Ready on every node while trainguard is stopped;
* ``burst_seconds_on/off/off_same_objects``: a burst of `--jobs` queued indexed Jobs (4 pods of 2
  GPUs each, their own queue label so that Kueue acts in every arm), seconds from `kubectl apply` to
  every pod bound; the median of `--rounds` rounds after one untimed burst per arm, the arms
  rotating. "off" applies the Jobs as written; "off_same_objects" applies them as trainguard would
  have mutated them (``trainguard check``), so that the scheduler and Kueue do the same work as
  "on". ``burst_ratio`` is on / off_same_objects (what admission adds: DESIGN §5's bar);
  ``burst_ratio_as_written`` is on / off (admission plus the placement trainguard's patches ask for);
* ``trainguard_cpu_seconds_per_burst`` (per arm, median) and ``trainguard_cpu_ms_per_call``: the
  server's processes' user + system CPU from /proc over the burst, per admission the API server sent;
* ``admission_ms``: per webhook (trainguard's and Kueue's), calls, p50 and p99 of the API server's own
  ``apiserver_admission_webhook_admission_duration_seconds`` over the "on" bursts;
* ``loadavg_before/after``: `os.getloadavg()` (the machine is shared; quote it with the figures).

    python tests/bench/fleet.py [--quick] [--burst-only] [--nodes N] [--jobs N] [--topology-jobs N] [--rounds N]

`--quick` (20 nodes, 12 burst jobs, 6 topology jobs, 3 rounds) takes a few minutes once the
binaries are built (the first run builds them: see tests/fleet/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.fleet import scenarios  # noqa: E402 - after the path the script runs from
from tests.fleet.fleet import Arm, Fleet, layout, remove_workdir, side_by_side, start_fleet  # noqa: E402
from tests.fleet.scenarios import burst_capacity  # noqa: E402


def _ratio(pair: tuple[int, int]) -> str:
    return f"{pair[0]}/{pair[1]}"


def run(fleet: Fleet, args: argparse.Namespace) -> dict[str, object]:
    out: dict[str, object] = {"nodes": len(fleet.nodes), "training_nodes": len(fleet.training_nodes)}
    if args.burst_only:
        out.update(run_burst(fleet, args))
        return out

    gang = side_by_side(fleet, "fleet-gang", lambda arm: scenarios.gang(fleet, arm))
    for result, label in zip(gang, ("on", "off"), strict=True):
        out[f"partial_gpu_seconds_{label}"] = round(result.partial_gpu_seconds, 1)
        out[f"gang_bound_before_fit_{label}"] = result.bound_before_fit

    topology = side_by_side(
        fleet, "fleet-topology", lambda arm: scenarios.topology(fleet, arm, args.topology_jobs)
    )
    out["same_rack_share_on"] = round(topology[0].same_rack_share, 3)
    out["same_rack_share_off"] = round(topology[1].same_rack_share, 3)

    pools = side_by_side(fleet, "fleet-pools", lambda arm: scenarios.pools(fleet, arm))
    out["pool_violations_on"] = pools[0].violations
    out["pool_violations_off"] = pools[1].violations

    fleet.trainguard(on=True)
    try:
        members = scenarios.members(fleet, "fleet-members")
    finally:
        fleet.clear("fleet-members")
    out["member_pods_agree"] = _ratio(members.member_pods_agree)
    out["operator_env_agree"] = _ratio(members.operator_env_agree)

    try:
        agents = scenarios.node_agents(fleet, "fleet-agents")
    finally:
        fleet.clear("fleet-agents")
    out["agents_ready"] = f"{agents.ready}/{agents.nodes}"

    out.update(run_burst(fleet, args))
    return out


# The burst's arms: trainguard's webhooks registered; none, the Jobs as users write them; none, the
# Jobs as trainguard would have mutated them (same labels, pool affinity, priority class and rack
# preference: the scheduler and Kueue do the same work as "on", only the admission calls differ).
BURST_ARMS = {"on": (True, False), "off": (False, False), "off_same_objects": (False, True)}


def _burst(fleet: Fleet, arm: str, jobs: int) -> scenarios.BurstResult:
    on, premutated = BURST_ARMS[arm]
    fleet.trainguard(on=on)
    try:
        return scenarios.burst(fleet, Arm(on, "fleet-burst"), jobs=jobs, premutated=premutated)
    finally:
        fleet.clear("fleet-burst")


def run_burst(fleet: Fleet, args: argparse.Namespace) -> dict[str, object]:
    # One untimed burst per arm first: the first burst after start meets cold connections and caches
    # (the webhook's TLS sessions, Kueue's and the scheduler's queues) that later ones do not.
    for arm in BURST_ARMS:
        _burst(fleet, arm, args.jobs)
    results: dict[str, list[scenarios.BurstResult]] = {arm: [] for arm in BURST_ARMS}
    arms = list(BURST_ARMS)
    for number in range(args.rounds):
        # Rotate which arm goes first, so that none always meets a warmer or a busier cluster.
        for arm in arms[number % len(arms) :] + arms[: number % len(arms)]:
            results[arm].append(_burst(fleet, arm, args.jobs))
    fleet.trainguard(on=True)

    out: dict[str, object] = {"burst_jobs": args.jobs, "burst_pods": args.jobs * 4}
    medians = {arm: statistics.median(r.seconds for r in rs) for arm, rs in results.items()}
    for arm, median in medians.items():
        out[f"burst_seconds_{arm}"] = round(median, 2)
    out["burst_seconds_all"] = {arm: [round(r.seconds, 2) for r in rs] for arm, rs in results.items()}
    # The bar (DESIGN §5): what admission adds, against the same objects without the webhook.
    off_same, off = medians["off_same_objects"], medians["off"]
    out["burst_ratio"] = round(medians["on"] / off_same, 3) if off_same else None
    # What the decisions' placement adds on top (the rack preference, the pool affinity).
    out["burst_ratio_as_written"] = round(medians["on"] / off, 3) if off else None
    on_results = results["on"]
    calls = sum(r.trainguard_calls for r in on_results)
    cpu = sum(r.trainguard_cpu_seconds for r in on_results)
    out["trainguard_calls_per_burst"] = round(calls / len(on_results), 1)
    out["trainguard_cpu_seconds_per_burst"] = {
        arm: round(statistics.median(r.trainguard_cpu_seconds for r in rs), 3) for arm, rs in results.items()
    }
    out["trainguard_cpu_ms_per_call"] = round(1000 * cpu / calls, 2) if calls else None
    histograms: dict[str, dict[float, float]] = {}
    for burst in on_results:
        for name, buckets in burst.histograms.items():
            merged = histograms.setdefault(name, {})
            for le, count in buckets.items():
                merged[le] = merged.get(le, 0.0) + count
    admission: dict[str, dict[str, float | None]] = {}
    # Kueue's webhooks too: they answer the same calls on the same machine, a scale for trainguard's.
    for name, buckets in sorted(histograms.items()):
        p50, p99 = scenarios.quantile(buckets, 0.5), scenarios.quantile(buckets, 0.99)
        admission[name] = {
            "calls": max(buckets.values(), default=0.0),
            "p50": round(p50 * 1000, 2) if p50 is not None else None,
            "p99": round(p99 * 1000, 2) if p99 is not None else None,
        }
    out["admission_ms"] = admission
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="20 nodes, 12 burst jobs, 6 topology jobs, 3 rounds"
    )
    parser.add_argument("--burst-only", action="store_true", help="the burst's arms alone, no other scenario")
    parser.add_argument("--nodes", type=int, help="KWOK nodes (default 100; 20 with --quick)")
    parser.add_argument("--jobs", type=int, help="jobs in each burst (default 40; 12 with --quick)")
    parser.add_argument(
        "--topology-jobs", type=int, help="jobs in the topology stream (default 12; 6 with --quick)"
    )
    parser.add_argument("--rounds", type=int, help="burst rounds per arm (default 5; 3 with --quick)")
    args = parser.parse_args()
    quick = args.quick
    # `is None`, not `or`: an explicit 0 is an error to report, not a request for the default.
    for name, default in (
        ("nodes", (20, 100)),
        ("jobs", (12, 40)),
        ("topology_jobs", (6, 12)),
        ("rounds", (3, 5)),
    ):
        if getattr(args, name) is None:
            setattr(args, name, default[0] if quick else default[1])
    try:
        nodes = layout(args.nodes)
    except ValueError as error:
        parser.error(f"--nodes {args.nodes}: {error}")
    capacity = burst_capacity(sum(n.pool == "training" for n in nodes))
    if not 1 <= args.jobs <= capacity:
        parser.error(f"--jobs {args.jobs}: a burst on {args.nodes} nodes holds 1 to {capacity} jobs")
    if args.topology_jobs < 1 or args.rounds < 1:
        parser.error("--topology-jobs and --rounds must be at least 1")

    before = os.getloadavg()
    print(f"load average before: {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}", file=sys.stderr)
    workdir = Path(tempfile.mkdtemp(prefix="trainguard-fleet-bench-"))
    try:
        fleet = start_fleet(args.nodes, workdir=workdir)
        try:
            out = run(fleet, args)
        finally:
            fleet.stop()
    finally:
        remove_workdir(workdir)
    after = os.getloadavg()
    out["loadavg_before"] = [round(x, 2) for x in before]
    out["loadavg_after"] = [round(x, 2) for x in after]
    print(json.dumps(out, sort_keys=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

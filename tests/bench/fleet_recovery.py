"""The resume gate side by side on the fleet: real Kueue preemption, the gate on and off, several seeds.

Starts the fleet of tests/fleet with a PlatformConfig that governs the preemptible tier, sets up the
recovery ClusterQueue (``withinClusterQueue: LowerPriority``, tests/fleet/recovery.py), and for each
seed runs the same arrival stream (tests/fleet/recovery_stream.py) twice: with the gate on, and with
the tier's recovery block removed from the live config (the gate off; everything else the same).
Time is compressed: one production minute is one second. Then it runs tests/bench/sim_recovery.py
on the same streams with the same parameters, both as the simulation now models the gate (a gated
job holds the quota Kueue admitted it with) and as it first did (gated outside the queue), and
prints one JSON line: per arm the sums over seeds of preemptions, re-preemptions within the window,
GPU-seconds rolled back, the median seconds from a preemption to the job Running again, whether any
workload was gated past maxGated; the simulation's figures beside them; and the load average.

    python tests/bench/fleet_recovery.py [--quick] [--seeds N] [--horizon S] [--nodes N]

`--quick`: 2 seeds of 90 s on 20 nodes, a few minutes once the fleet's binaries are built.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.bench import sim_recovery  # noqa: E402 - after the path the script runs from
from tests.fleet import recovery  # noqa: E402
from tests.fleet.fleet import GPUS_PER_NODE, Fleet, platform_config, start_fleet, wait_until  # noqa: E402
from tests.fleet.recovery_stream import (  # noqa: E402
    LEVELS,
    ArmResult,
    Arrival,
    StreamParams,
    make_stream,
    run_arm,
)

# The simulation's restart: the fleet's pods are Running a second or two after they are bound and
# load nothing; the save pause is one step (the fleet's jobs pause for nothing, the model needs > 0).
SIM_RESTART = 2.0
SIM_SAVE = 1.0


def set_gate(fleet: Fleet, on: bool) -> None:
    """Rewrite the served config with or without the preemptible tier's recovery block and wait
    until serve has reloaded it."""
    key = ("trainguard_reloads_total", (("result", "success"), ("source", "config")))
    before = fleet.server.metrics().get(key, 0.0)
    text = yaml.safe_dump(platform_config(recovery.recovery_block(gate=on)), sort_keys=False)
    if fleet.config.read_text(encoding="utf-8") == text:  # unchanged: nothing to reload
        return
    fleet.config.write_text(text, encoding="utf-8")
    wait_until(lambda: fleet.server.metrics().get(key, 0.0) > before, 60, "the config reloaded")


def sim_trace(stream: list[Arrival]) -> sim_recovery.Trace:
    guaranteed = [
        sim_recovery.GJob(a.pods * GPUS_PER_NODE, a.at, a.duration) for a in stream if a.tier == "guaranteed"
    ]
    preemptible = [
        sim_recovery.PJob(
            i, a.pods * GPUS_PER_NODE, 1e9, SIM_SAVE, a.checkpoint, a.at, LEVELS.index(a.priority)
        )
        for i, a in enumerate(a for a in stream if a.tier == "preemptible")
    ]
    return sim_recovery.Trace(guaranteed, preemptible)


def simulate(streams: dict[int, list[Arrival]], p: StreamParams, pool: int, holds: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for gate in (True, False):
        totals = []
        for stream in streams.values():
            trace = sim_trace(stream)
            params = sim_recovery.Params(
                pool=pool,
                days=p.horizon / 86400,
                step=1.0,
                backlog=len(trace.preemptible),
                restart=SIM_RESTART,
                load=0.0,
                cooldown=recovery.COOLDOWN,
                max_resuming=recovery.MAX_RESUMING,
                max_gated=recovery.MAX_GATED,
                settle=recovery.SETTLE,
                thrash_window=p.window,
                gate_holds_quota=holds,
            )
            totals.append(sim_recovery.simulate(params, trace, gate=gate, suggested_rate=None))
        out["gate_on" if gate else "gate_off"] = {
            "preemptions": sum(t.preemptions for t in totals),
            "re_preemptions": sum(t.thrash for t in totals),
            "rollback_gpu_s": round(sum(t.rollback for t in totals), 1),
        }
    return out


def combine(results: list[ArmResult]) -> dict[str, Any]:
    resume = [s for r in results for s in r.resume_seconds]
    return {
        "preemptions": sum(r.preemptions for r in results),
        "re_preemptions": sum(r.re_preemptions for r in results),
        "evicted_while_gated": sum(r.evicted_while_gated for r in results),
        "rollback_gpu_s": round(sum(r.rollback_gpu_seconds for r in results), 1),
        "resume_s_median": round(statistics.median(resume), 1) if resume else None,
        "unresumed": sum(r.unresumed for r in results),
        "longest_gated_s": max(r.longest_gated for r in results),
        "gated_past_max": any(r.gated_past_max for r in results),
        "per_seed": [r.figures() for r in results],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 seeds of 90 s on 20 nodes")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--horizon", type=float, default=180.0, help="seconds of stream per arm")
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--priority-nodes", type=int, default=6, help="the ClusterQueue's GPU quota in nodes")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.horizon, args.nodes = 2, 90.0, 20
    params = StreamParams(horizon=args.horizon)
    streams = {seed: make_stream(params, seed) for seed in range(1, args.seeds + 1)}
    load_before = os.getloadavg()
    began = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="trainguard-fleet-recovery-"))
    fleet = start_fleet(args.nodes, workdir=workdir, recovery=recovery.recovery_block())
    arms: dict[bool, list[ArmResult]] = {True: [], False: []}
    try:
        recovery.set_up(fleet, recovery.Queues(priority_nodes=args.priority_nodes))
        for seed, stream in streams.items():
            # Alternating which arm goes first, so that neither always meets a warmer fleet.
            for gate in (True, False) if seed % 2 else (False, True):
                set_gate(fleet, gate)
                prefix = f"s{seed}-{'on' if gate else 'off'}-"
                arms[gate].append(run_arm(fleet, stream, params, gate=gate, prefix=prefix))
    finally:
        fleet.stop()
    pool = args.priority_nodes * GPUS_PER_NODE
    line = {
        "nodes": args.nodes,
        "seeds": args.seeds,
        "horizon_s": args.horizon,
        "compression": "1 s = 1 production minute",
        "quota_gpus": pool,
        "settings": {
            "cooldown_s": recovery.COOLDOWN,
            "settle_s": recovery.SETTLE,
            "max_gated_s": recovery.MAX_GATED,
            "max_resuming_per_queue": recovery.MAX_RESUMING,
            "re_preemption_window_s": params.window,
        },
        "gate_on": combine(arms[True]),
        "gate_off": combine(arms[False]),
        "sim": simulate(streams, params, pool, holds=True),
        "sim_gate_outside_queue": simulate(streams, params, pool, holds=False),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "seconds": round(time.monotonic() - began),
    }
    print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())

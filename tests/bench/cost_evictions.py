"""Engine CPU per admission against the number of eviction records the cluster holds.

    python tests/bench/cost_evictions.py [--rounds 300]

The resume gate's policies read `cluster.evictions`; the engine hands them only the records under
the admitted workload's own names, so a request's cost should not grow with the cluster's count of
evicted workloads. Measured in process on the shipped policy set with recovery governing the
preemptible tier: a bare preemptible Pod whose pod group was evicted (gated: the mutation runs)
and one whose group never was, at 0 to 10,000 Kueue Workloads with an eviction record (each also
recorded under its owner: two keys per Workload). Median of `time.process_time()` per decide().
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

from webhook.config import config_from_mapping
from webhook.context import evictions
from webhook.engine import AdmissionInput, Engine, default_policies_dir, load_policy_set


def workload(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"group-{i}",
            "namespace": f"team-{i % 20}",
            "uid": f"uid-{i}",
            "ownerReferences": [{"kind": "PyTorchJob", "name": f"job-{i}"}],
        },
        "spec": {"queueName": "lq"},
        "status": {
            "conditions": [
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "Preempted",
                    "lastTransitionTime": "2026-06-01T10:00:00Z",
                }
            ]
        },
    }


def pod(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{group}-0",
            "namespace": "team-1",
            "labels": {"trainguard.dev/tier": "preemptible"},
            "annotations": {
                "kueue.x-k8s.io/pod-group-name": group,
                "kueue.x-k8s.io/pod-group-total-count": "1",
                "trainguard.dev/checkpoint-interval": "30m",
                "trainguard.dev/checkpoint-uri": "s3://bucket/run",
                "trainguard.dev/checkpoint-owner": "team",
            },
        },
        "spec": {"terminationGracePeriodSeconds": 120, "containers": [{"name": "t", "image": "x"}]},
    }


def median_ms(engine: Engine, obj: dict[str, Any], rounds: int) -> float:
    inp = AdmissionInput(object=obj)
    for _ in range(20):
        engine.decide(inp)
    samples = []
    for _ in range(rounds):
        start = time.process_time()
        engine.decide(inp)
        samples.append(time.process_time() - start)
    return statistics.median(samples) * 1000


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args(argv)
    config = config_from_mapping(
        {"kind": "PlatformConfig", "recovery": {"tiers": {"preemptible": {"cooldown": "5m"}}}}, "<bench>"
    )
    policies = load_policy_set([default_policies_dir()])
    print(
        f"load average {os.getloadavg()[0]:.2f}; backend {policies.backend.name}; median CPU ms per decide()"
    )
    print("| Workloads with an eviction record | keys | evicted pod (gated) | first-start pod |")
    print("|---|---|---|---|")
    for n in (0, 100, 1000, 10000):
        records = evictions(workload(i) for i in range(n))
        engine = Engine(policies, config, cluster={"evictions": records})
        gated = median_ms(engine, pod("group-1"), args.rounds) if n > 1 else float("nan")
        fresh = median_ms(engine, pod("never-evicted"), args.rounds)
        print(f"| {n:,} | {len(records):,} | {gated:.3f} | {fresh:.3f} |")
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Engine cost of two trees side by side: CPU ms per admission, alternating runs, medians.

    python tests/bench/compare_engine.py BEFORE_TREE [AFTER_TREE] [--rounds N] [--quick]

Each round runs one child process per tree (PYTHONPATH=<tree>), alternating, so that load on a
shared machine falls on both alike; each child measures, on the C++ CEL runtime, the 11.6 KB
training Pod per webhook call (validate-only, mutate-only: each of the webhook's two endpoints),
the same with the object decoded afresh from its JSON for every call (as the server sees it: a
loop over one dict reuses its strings and keys and flatters every figure), then both in one call
(what `trainguard check` does); the medians over the corpus workloads (validate-only,
mutate-only, full), the webhook's pair of calls for one object (mutate, then validate the
mutated object) on an engine that remembers adapted objects, and the Pod on the pure-Python
cel-python runtime. Figures are the medians over rounds of each child's best-of-five batch CPU
time (time.thread_time), with `uptime` before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import common

CHILD = r"""
import json, statistics, sys, time
sys.path.insert(0, BENCH_DIR)
import common, orjson
from webhook.config import load_config
from webhook.engine import AdmissionInput, Engine, default_policies_dir, load_policy_set
QUICK = QUICK_FLAG

def cpu(fn, n):
    for _ in range(5):
        fn()
    best = []
    for _ in range(5):
        c = time.thread_time()
        for _ in range(n):
            fn()
        best.append((time.thread_time() - c) / n * 1000)
    return min(best)

engine = common.engine_for("cel-expr-python")
pod = common.big_training_pod()
body = orjson.dumps(pod)
inp = AdmissionInput(object=pod, namespace="ml-research")
validate_only, mutate_only = {"mutate": False}, {"validate": False}

def fresh(**kw):
    # As the server sees it: every request's object freshly decoded (new dicts, new strings).
    return lambda: engine.review(AdmissionInput(object=orjson.loads(body), namespace="ml-research"), **kw)

out = {
    "pod_validate": cpu(lambda: engine.review(inp, **validate_only), 200),
    "pod_mutate": cpu(lambda: engine.review(inp, **mutate_only), 200),
    "pod_validate_fresh": cpu(fresh(**validate_only), 200),
    "pod_mutate_fresh": cpu(fresh(**mutate_only), 200),
    "pod_full": cpu(lambda: engine.review(inp), 100),
}
if not QUICK:
    per = {"validate": [], "mutate": [], "full": []}
    for _, obj in common.corpus_workloads():
        i = AdmissionInput(object=obj, namespace="default")
        per["validate"].append(cpu(lambda: engine.review(i, **validate_only), 10))
        per["mutate"].append(cpu(lambda: engine.review(i, **mutate_only), 10))
        per["full"].append(cpu(lambda: engine.review(i), 10))
    for kind, values in per.items():
        out[f"corpus_median_{kind}"] = statistics.median(values)
    try:
        remembering = Engine(
            load_policy_set([default_policies_dir()], "cel-expr-python"), load_config(), remember=64
        )
    except TypeError:  # a tree without `remember`
        remembering = engine
    counter = [0]

    def pair():
        counter[0] += 1
        obj = dict(pod, metadata={**pod["metadata"], "uid": str(counter[0])})  # a new object each time
        first = remembering.review(AdmissionInput(object=obj, namespace="ml-research"), validate=False)
        remembering.review(AdmissionInput(object=first.mutated, namespace="ml-research"), mutate=False)

    out["pod_webhook_pair"] = cpu(pair, 40)
    slow = common.engine_for("cel-python")
    out["pod_full_cel_python"] = cpu(lambda: slow.review(inp), 3)
print(json.dumps(out))
"""


def run_child(tree: str, quick: bool) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    code = CHILD.replace("BENCH_DIR", repr(str(common.BENCH_DIR))).replace("QUICK_FLAG", repr(quick))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr.strip()[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after", nargs="?", default=str(common.REPO))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--quick", action="store_true", help="the 11.6 KB Pod only (no corpus, pair, cel-python)"
    )
    args = parser.parse_args()
    common.shared_dir()  # fail early without the corpus
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for i in range(max(1, min(args.rounds, 20))):
        for name, tree in (("before", args.before), ("after", args.after)):
            runs[name].append(run_child(tree, args.quick))
            common.log(f"compare: round {i + 1} {name} done")
    load_after = os.getloadavg()
    keys = list(runs["after"][0])
    rows: list[tuple[str, float, float, float]] = []
    for key in keys:
        b = statistics.median(r[key] for r in runs["before"])
        a = statistics.median(r[key] for r in runs["after"])
        rows.append((key, b, a, a / b))
    print(
        common.table(
            f"Engine CPU ms per admission (cel-expr-python unless named), medians of {len(runs['after'])} "
            "alternating rounds",
            ["measure", "before", "after", "after/before"],
            rows,
        )
    )
    print(f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f} (1 min)")
    print(json.dumps({r[0]: {"before": round(r[1], 4), "after": round(r[2], 4)} for r in rows}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

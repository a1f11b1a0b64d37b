"""Engine cost of two trees side by side: CPU ms per admission, alternating runs, medians.

    python tests/bench/compare_engine.py BEFORE_TREE [AFTER_TREE] [--rounds N] [--quick]

Each round runs one child process per tree (PYTHONPATH=<tree>), alternating, so that load on a
shared machine falls on both alike; each child measures, on the C++ CEL runtime, the 11.6 KB
training Pod per webhook call (validate-only, mutate-only: each of the webhook's two endpoints),
the same with the object decoded afresh from its JSON for every call (as the server sees it: a
loop over one dict reuses its strings and keys and flatters every figure), then both in one call
(what `trainguard check` does); the medians over the corpus workloads (validate-only,
mutate-only, full), the webhook's pair of calls for one object (mutate, then validate the
mutated object) on an engine with the server's store of adaptations (the count-bounded
`remember=` of older trees), and the Pod on the pure-Python
cel-python runtime. Figures are the medians over rounds of each child's best-of-five batch CPU
time (time.thread_time), with `uptime` before and after.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import statistics
import subprocess
import sys

import inputs
import measure

CHILD = r"""
import json, os, statistics, sys, time
sys.path.insert(0, BENCH_DIR)
import inputs, orjson, webhook
assert webhook.__file__.startswith(os.path.realpath(os.environ["PYTHONPATH"])), webhook.__file__
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

engine = inputs.engine_for("cel-expr-python")
decide = inputs.decider(engine)
pod = inputs.big_training_pod()
body = orjson.dumps(pod)
inp = AdmissionInput(object=pod, namespace="ml-research")
validate_only, mutate_only = {"mutate": False}, {"validate": False}

def fresh(**kw):
    # As the server sees it: every request's object freshly decoded (new dicts, new strings).
    return lambda: decide(AdmissionInput(object=orjson.loads(body), namespace="ml-research"), **kw)

out = {
    "pod_validate": cpu(lambda: decide(inp, **validate_only), 200),
    "pod_mutate": cpu(lambda: decide(inp, **mutate_only), 200),
    "pod_validate_fresh": cpu(fresh(**validate_only), 200),
    "pod_mutate_fresh": cpu(fresh(**mutate_only), 200),
    "pod_full": cpu(lambda: decide(inp), 100),
}
if not QUICK:
    per = {"validate": [], "mutate": [], "full": []}
    for _, obj in inputs.corpus_workloads():
        i = AdmissionInput(object=obj, namespace="default")
        per["validate"].append(cpu(lambda: decide(i, **validate_only), 10))
        per["mutate"].append(cpu(lambda: decide(i, **mutate_only), 10))
        per["full"].append(cpu(lambda: decide(i), 10))
    for kind, values in per.items():
        out[f"corpus_median_{kind}"] = statistics.median(values)
    policies = load_policy_set([default_policies_dir()], "cel-expr-python")
    try:  # the store the server gives its engines
        from webhook.engine import Adaptations
        remembering = Engine(policies, load_config(), adaptations=Adaptations())
    except (ImportError, TypeError):
        try:  # a tree from before it: the count-bounded memory
            remembering = Engine(policies, load_config(), remember=64)
        except TypeError:  # a tree without either
            remembering = engine
    settle = getattr(remembering, "settle", lambda: None)  # what the server does after /mutate
    remember = inputs.decider(remembering)
    counter = [0]

    def pair():
        counter[0] += 1
        obj = dict(pod, metadata={**pod["metadata"], "uid": str(counter[0])})  # a new object each time
        first = remember(AdmissionInput(object=obj, namespace="ml-research"), validate=False)
        settle()
        remember(AdmissionInput(object=first.mutated, namespace="ml-research"), mutate=False)

    out["pod_webhook_pair"] = cpu(pair, 40)
    slow = inputs.engine_for("cel-python")
    out["pod_full_cel_python"] = cpu(lambda: inputs.decider(slow)(inp), 3)
print(json.dumps(out))
"""


# --instructions: the same calls counted in CPU instructions under valgrind's callgrind, which no
# other load on the machine changes (on a shared machine the CPU time of one call varies by 2x from
# one second to the next). Collection is on only inside functools.reduce (callgrind's
# --toggle-collect names a C function), which drives the measured calls and nothing else.
INSTRUCTIONS_CHILD = r"""
import functools, sys
sys.path.insert(0, BENCH_DIR)
import inputs, orjson, os, webhook
from webhook.engine import AdmissionInput
assert webhook.__file__.startswith(os.path.realpath(os.environ["PYTHONPATH"])), webhook.__file__
engine = inputs.engine_for("cel-expr-python")
decide = inputs.decider(engine)
measure, n = sys.argv[1], int(sys.argv[2])
kw = {} if measure.endswith("_full") else {"mutate": False} if "validate" in measure else {"validate": False}
body = orjson.dumps(inputs.big_training_pod())
pod = orjson.loads(body)
if measure == "pod_webhook_pair":  # the webhook's two calls per object, on the server's kind of engine
    from webhook.config import load_config
    from webhook.engine import Adaptations, Engine, default_policies_dir, load_policy_set
    engine = Engine(load_policy_set([default_policies_dir()], "cel-expr-python"), load_config(), adaptations=Adaptations())
    decide, settle = inputs.decider(engine), engine.settle
    items = list(range(n))

    def step(acc, item):
        obj = orjson.loads(body)  # a new object each time, decoded as the server decodes a body
        obj["metadata"]["uid"] = str(item)
        first = decide(AdmissionInput(object=obj, namespace="ml-research"), validate=False)
        settle()  # what the server does once the mutating call's answer is on its way
        decide(AdmissionInput(object=first.mutated, namespace="ml-research"), mutate=False)
        return acc + 1

    for item in range(-5, 0):
        step(0, item)
    print(functools.reduce(step, items, 0))
    sys.exit(0)
if measure.startswith("corpus"):  # every corpus workload once
    items = [(obj, "default") for _, obj in inputs.corpus_workloads()]
    get = lambda item: item
elif "fresh" in measure:  # each call's object decoded from its JSON, as the server decodes a body
    items = [None] * n
    get = lambda item: (orjson.loads(body), "ml-research")
else:
    items = [(pod, "ml-research")] * n
    get = lambda item: item

def step(acc, item):
    obj, namespace = get(item)
    decide(AdmissionInput(object=obj, namespace=namespace), **kw)
    return acc + 1

for item in items[:5]:
    step(0, item)
print(functools.reduce(step, items, 0))
"""
INSTRUCTION_MEASURES = (
    "pod_validate",
    "pod_mutate",
    "pod_validate_fresh",
    "pod_mutate_fresh",
    "corpus_mean_validate",
    "corpus_mean_mutate",
    "corpus_mean_full",  # mutate, then validate the mutated object: what `trainguard check` does
    "pod_webhook_pair",  # /mutate, the work after its answer, then /validate of the patched Pod
)


def count_instructions(tree: str, measure: str, n: int = 20) -> float:
    """Thousands of instructions per call of `measure` in `tree` (callgrind, hash seed fixed)."""
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONHASHSEED": "0"}
    code = INSTRUCTIONS_CHILD.replace("BENCH_DIR", repr(str(inputs.BENCH_DIR)))
    command = [
        "valgrind",
        "--tool=callgrind",
        "--collect-atstart=no",
        "--toggle-collect=functools_reduce",
        "--callgrind-out-file=/dev/null",
        sys.executable,
        "-c",
        code,
        measure,
        str(n),
    ]
    # cwd: `python -c` puts the working directory first on sys.path, before PYTHONPATH
    done = subprocess.run(command, env=env, cwd=tree, capture_output=True, text=True, timeout=1200)
    collected = re.search(r"Collected : ([0-9,]+)", done.stderr)
    if done.returncode != 0 or collected is None:
        raise SystemExit(f"{tree} {measure}: {done.stderr.strip()[-2000:]}")
    calls = int(done.stdout.strip().splitlines()[-1])
    return int(collected.group(1).replace(",", "")) / calls / 1000


def instructions(before: str, after: str) -> int:
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind on PATH")
    jobs = [(tree, m) for m in INSTRUCTION_MEASURES for tree in (before, after)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        counts = dict(zip(jobs, pool.map(lambda job: count_instructions(*job), jobs), strict=True))
    rows = [
        (m, counts[before, m], counts[after, m], counts[after, m] / counts[before, m])
        for m in INSTRUCTION_MEASURES
    ]
    print(
        measure.table(
            "Engine cost in thousands of CPU instructions per admission (cel-expr-python, callgrind)",
            ["measure", "before", "after", "after/before"],
            rows,
        )
    )
    print(json.dumps({r[0]: {"before": round(r[1]), "after": round(r[2])} for r in rows}))
    return 0


def run_child(tree: str, quick: bool) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": tree}
    code = CHILD.replace("BENCH_DIR", repr(str(inputs.BENCH_DIR))).replace("QUICK_FLAG", repr(quick))
    # cwd: `python -c` puts the working directory first on sys.path, before PYTHONPATH
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True, timeout=600
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr.strip()[-2000:]}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after", nargs="?", default=str(inputs.REPO))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--quick", action="store_true", help="the 11.6 KB Pod only (no corpus, pair, cel-python)"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count CPU instructions per call under valgrind instead of timing (minutes; load-proof)",
    )
    args = parser.parse_args()
    inputs.shared_dir()  # fail early without the corpus
    if args.instructions:
        return instructions(args.before, args.after)
    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, float]]] = {"before": [], "after": []}
    for i in range(max(1, min(args.rounds, 20))):
        for name, tree in (("before", args.before), ("after", args.after)):
            runs[name].append(run_child(tree, args.quick))
            measure.log(f"compare: round {i + 1} {name} done")
    load_after = os.getloadavg()
    keys = list(runs["after"][0])
    rows: list[tuple[str, float, float, float]] = []
    for key in keys:
        b = statistics.median(r[key] for r in runs["before"])
        a = statistics.median(r[key] for r in runs["after"])
        rows.append((key, b, a, a / b))
    print(
        measure.table(
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

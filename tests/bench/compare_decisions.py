"""Whether two trees decide alike: every corpus document and the 11.6 KB Pod, compared exactly.

    python tests/bench/compare_decisions.py BEFORE_TREE AFTER_TREE

A change meant to make the engine cheaper must not change what it decides. Each tree runs in its
own process (PYTHONPATH=<tree>; the child checks which `webhook` package it imported) and decides
every document of the corpus and the 11.6 KB training Pod in two namespaces, four ways (mutate then
validate as `trainguard check` does, validate only and mutate only as the webhook's two endpoints
do, and an UPDATE with an oldObject whose queue label differs), on both CEL runtimes, with a fixed
clock. It writes, per case, the decision's verdict, findings, each policy's result, the patch, the
mutated object and the whole workload view (or the error raised) as JSON; the parent compares the
two trees' JSON case by case and exits 1 on any difference, printing the first ones.

The order of keys within a map is compared apart and only counted: the C++ runtime returns the
entries of a map that an expression builds in an order that changes from one process to the
next (the same tree against itself differs so), and JSON Patch values do not depend on it.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

NAMESPACES = ("default", "ml-research")
BACKENDS = ("cel-expr-python", "cel-python")
NOW = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def _case_inputs(obj: dict[str, Any], namespace: str) -> list[tuple[str, dict[str, Any]]]:
    """The four ways one object is decided: (name, AdmissionInput and decide() keywords)."""
    old = copy.deepcopy(obj)
    meta = old.setdefault("metadata", {}) if isinstance(old.get("metadata", {}), dict) else {}
    labels = meta.setdefault("labels", {}) if isinstance(meta.get("labels", {}), dict) else {}
    labels[QUEUE_LABEL] = "previous-queue"
    return [
        ("full", {"input": {"namespace": namespace}, "review": {}}),
        ("validate", {"input": {"namespace": namespace}, "review": {"mutate": False}}),
        ("mutate", {"input": {"namespace": namespace}, "review": {"validate": False}}),
        (
            "update",
            {"input": {"namespace": namespace, "operation": "UPDATE", "old_object": old}, "review": {}},
        ),
    ]


def _decision_json(decision: Any) -> dict[str, Any]:
    return {
        "allowed": decision.allowed,
        "skipped": decision.skipped_reason,
        "violations": [dataclasses.asdict(f) for f in decision.violations],
        "warnings": [dataclasses.asdict(f) for f in decision.warnings],
        "audits": [dataclasses.asdict(f) for f in decision.audits],
        "results": [dataclasses.asdict(r) for r in decision.results],
        "patch": decision.patch,
        "mutated": decision.mutated,
        "workload": decision.workload.view() if decision.workload is not None else None,
    }


def child(out_path: str) -> int:
    """Decide every case with the `webhook` package on PYTHONPATH; write {case: JSON} to out_path."""
    tree = os.path.realpath(os.environ["PYTHONPATH"].split(os.pathsep)[0])
    import inputs

    import webhook
    from webhook.engine import AdmissionInput

    if not os.path.realpath(webhook.__file__).startswith(tree + os.sep):
        raise SystemExit(f"imported {webhook.__file__}, not the package of {tree}")
    documents = inputs.corpus_documents() + [("big_training_pod", inputs.big_training_pod())]
    cases: dict[str, str] = {}
    for backend in BACKENDS:
        engine = inputs.engine_for(backend)
        for source, obj in documents:
            for namespace in NAMESPACES:
                for way, spec in _case_inputs(obj, namespace):
                    key = f"{backend} {source} {namespace} {way}"
                    inp = AdmissionInput(object=copy.deepcopy(obj), **spec["input"])
                    try:
                        value: Any = _decision_json(inputs.decider(engine)(inp, now=NOW, **spec["review"]))
                    except Exception as exc:  # an error is an outcome to compare too
                        value = {"error": f"{type(exc).__name__}: {exc}"}
                    cases[key] = json.dumps(value, default=repr)
    Path(out_path).write_text(json.dumps(cases))
    return 0


def run_tree(tree: str, out_dir: str, name: str) -> dict[str, str]:
    out = os.path.join(out_dir, f"{name}.json")
    env = {**os.environ, "PYTHONPATH": os.path.realpath(tree)}
    done = subprocess.run(
        [sys.executable, __file__, "--child", out],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise SystemExit(f"{tree}: {done.stderr.strip()[-3000:]}")
    cases: dict[str, str] = json.loads(Path(out).read_text())
    return cases


def _canonical(text: str) -> str:
    return json.dumps(json.loads(text), sort_keys=True)


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    """Where two JSON values first differ (keys in any order), as a path and the two values there."""
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{path or '/'}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            if a[k] != b[k]:
                return _first_difference(a[k], b[k], f"{path}/{k}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{path}/{i}")
    return f"{path or '/'}: {json.dumps(a)[:300]} != {json.dumps(b)[:300]}"


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        return child(sys.argv[2])
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--show", type=int, default=10, help="differences to print (default 10)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="compare-decisions-") as out_dir:
        before = run_tree(args.before, out_dir, "before")
        after = run_tree(args.after, out_dir, "after")
    differences = [
        key for key in before if key not in after or _canonical(before[key]) != _canonical(after[key])
    ]
    differences += [key for key in after if key not in before]
    reordered = sum(1 for key in before if key in after and before[key] != after[key]) - len(
        [key for key in differences if key in before and key in after]
    )
    denied = sum(1 for v in before.values() if json.loads(v).get("allowed") is False)
    print(
        f"{len(before)} cases ({denied} denied), {len(differences)} differ"
        f" ({reordered} more differ only in the order of a map's keys)"
    )
    for key in differences[: args.show]:
        if key not in before or key not in after:
            print(f"  {key}: only in {'after' if key in after else 'before'}")
            continue
        print(f"  {key}: {_first_difference(json.loads(before[key]), json.loads(after[key]))}")
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())

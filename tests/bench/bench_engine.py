"""Engine cost, in process (no HTTP): per corpus workload, against the number of policies, against
object size, on both CEL runtimes.

Times are medians of batches, in milliseconds per admission; each is measured twice, as wall-clock
time and as the CPU time of the measuring thread (which other processes on a shared machine
disturb much less). "full" is Engine.decide(mutate=True, validate=True), what `trainguard check`
does; "validate" is review(mutate=False), what the webhook's /validate endpoint does; "mutate"
is review(validate=False), its /mutate endpoint.

    python tests/bench/bench_engine.py [--quick]
"""

from __future__ import annotations

import copy
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inputs import big_training_pod, corpus_workloads, engine_for
from measure import linear_fit, log, median, run_part, table

CPP, PY = "cel-expr-python", "cel-python"


def measure(
    fn: Callable[[], Any], *, min_seconds: float, repeats: int, max_seconds: float
) -> tuple[float, float]:
    """(wall ms, CPU ms) per call: medians over `repeats` batches of a calibrated size."""
    deadline = time.perf_counter() + max_seconds
    fn()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < min_seconds and time.perf_counter() < deadline:
        fn()
        n += 1
    batch = max(1, n)
    walls, cpus = [], []
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(batch):
            fn()
        walls.append((time.perf_counter() - w0) / batch * 1000)
        cpus.append((time.thread_time() - c0) / batch * 1000)
        if time.perf_counter() > deadline:
            break
    return statistics.median(walls), statistics.median(cpus)


def _review(engine: Any, obj: dict[str, Any], namespace: str, **kw: Any) -> Callable[[], Any]:
    from webhook.engine import AdmissionInput

    inp = AdmissionInput(object=obj, namespace=namespace)
    return lambda: engine.decide(inp, **kw)


# -- synthetic inputs -----------------------------------------------------------------------------


def synthetic_policies(directory: Path, count: int) -> Path:
    """`count` validating policies over the workload view, a mix of the shapes real ones have:
    plain checks, checks with variables, comprehensions over groups and containers, messages."""
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        shape = i % 4
        if shape == 0:
            spec = f"""  validations:
    - expression: workload.totalGpus <= {100000 + i}
      message: too many GPUs ({i})"""
        elif shape == 1:
            spec = f"""  variables:
    - name: limit
      expression: "{1000 + i}"
    - name: big
      expression: workload.groups.filter(g, g.replicas > variables.limit)
  validations:
    - expression: variables.big.size() == 0
      messageExpression: >-
        'groups over ' + string(variables.limit) + ' replicas: ' +
        variables.big.map(g, g.name).join(', ')"""
        elif shape == 2:
            spec = f"""  validations:
    - expression: workload.groups.all(g, g.containers.all(c, c.gpus <= {64 + i}))
      message: a container asks for too many GPUs
    - expression: size(workload.labels) < {1000 + i}
      message: too many labels"""
        else:
            spec = f"""  matchConditions:
    - name: has-name
      expression: workload.name != ""
  validations:
    - expression: >-
        !("synthetic-{i}" in workload.annotations) || workload.annotations["synthetic-{i}"] != "deny"
      messageExpression: "'annotation synthetic-{i} says deny on ' + workload.kind + ' ' + workload.name\""""
        (directory / f"synthetic-{i:03d}.yaml").write_text(
            f"""apiVersion: trainguard.dev/v1alpha1
kind: TrainingPolicy
metadata:
  name: synthetic-{i:03d}
spec:
  mode: Audit
  match:
    roles: [training]
{spec}
""",
            encoding="utf-8",
        )
    return directory


def sized_pod(target_bytes: int) -> dict[str, Any]:
    """The big training Pod grown to about `target_bytes` of JSON: more containers, each with the
    full environment, then more environment variables."""
    pod = big_training_pod()
    base = pod["spec"]["containers"][0]
    if target_bytes < 4000:  # a small Pod: drop what makes the big one big
        pod["metadata"].pop("managedFields", None)
        base["env"] = base["env"][:4]
        pod["spec"]["containers"] = pod["spec"]["containers"][:1]
        pod["spec"].pop("initContainers", None)
        return pod
    size = len(json.dumps(pod, separators=(",", ":")))
    i = 1
    while size < target_bytes * 0.9 and i < 400:
        extra = copy.deepcopy(base)
        extra["name"] = f"shard-{i:03d}"
        extra["ports"] = [{"name": f"p{i}", "containerPort": 30000 + i}]
        pod["spec"]["containers"].append(extra)
        size = len(json.dumps(pod, separators=(",", ":")))
        i += 1
    j = 0
    while size < target_bytes and j < 20000:
        pod["spec"]["containers"][j % len(pod["spec"]["containers"])].setdefault("env", []).append(
            {"name": f"EXTRA_{j:05d}", "value": f"v{j:05d}"}
        )
        size += len(f'{{"name":"EXTRA_{j:05d}","value":"v{j:05d}"}},')
        j += 1
    return pod


# -- the parts ------------------------------------------------------------------------------------


def per_workload(quick: bool) -> tuple[list[list[Any]], dict[str, Any]]:
    engines = {CPP: engine_for(CPP), PY: engine_for(PY)}
    workloads = corpus_workloads()
    big = ("training-pod-11.6KB (bare Pod, torchrun, 8 GPUs)", big_training_pod())
    rows = []
    results: dict[str, Any] = {}
    items = [big, *workloads] if not quick else [big, *workloads[::4]]
    py_items = items if not quick else items[:1] + items[1::4]
    for label, obj in items:
        size = len(json.dumps(obj, separators=(",", ":")))
        row: list[Any] = [label, size]
        for kind, kw in (("full", {}), ("validate", {"mutate": False}), ("mutate", {"validate": False})):
            wall, cpu = measure(
                _review(engines[CPP], obj, "default" if label != big[0] else "ml-research", **kw),
                min_seconds=0.02 if quick else 0.06,
                repeats=3 if quick else 5,
                max_seconds=2,
            )
            row += [wall] if kind != "full" else [wall, cpu]
            results.setdefault(label, {})[f"{CPP}_{kind}_ms"] = wall
            results[label][f"{CPP}_{kind}_cpu_ms"] = cpu
        if any(label == x[0] for x in py_items):
            wall, _ = measure(
                _review(engines[PY], obj, "default" if label != big[0] else "ml-research"),
                min_seconds=0.05,
                repeats=3 if quick else 5,
                max_seconds=10,
            )
            row.append(wall)
            results[label][f"{PY}_full_ms"] = wall
        else:
            row.append(float("nan"))
        rows.append(row)
    return rows, results


def cel_share(obj: dict[str, Any]) -> dict[str, float]:
    """How the 11.6 KB Pod's validate-only admission splits: adapters, view, CEL (CPU ms)."""
    import webhook.engine.pipeline as pl
    from webhook.engine import cel as celmod
    from webhook.workloads import Workload

    engine = engine_for(CPP)
    spent: dict[str, float] = {"adapters": 0.0, "view": 0.0, "cel": 0.0}
    originals = []

    def wrap(owner: Any, name: str, key: str) -> None:
        original = getattr(owner, name)
        originals.append((owner, name, original))

        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.thread_time()
            try:
                return original(*a, **k)
            finally:
                spent[key] += time.thread_time() - t0

        setattr(owner, name, timed)

    wrap(pl, "build_workload", "adapters")
    wrap(Workload, "view", "view")
    wrap(celmod._CppProgram, "evaluate", "cel")
    try:
        fn = _review(engine, obj, "ml-research", mutate=False)
        for _ in range(20):
            fn()
        for key in spent:
            spent[key] = 0.0
        n = 300
        t0 = time.thread_time()
        for _ in range(n):
            fn()
        total = (time.thread_time() - t0) / n * 1000
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    out = {k: v / n * 1000 for k, v in spent.items()}
    out["rest (pipeline, match, decide, patch)"] = total - sum(out.values())
    out["total"] = total
    return out


def policy_curve(quick: bool, tmp: Path) -> tuple[list[list[Any]], dict[str, Any]]:
    from webhook.engine import default_policies_dir

    counts = [1, 10, 50, 200]
    pod = big_training_pod()
    rows, fits = [], {}
    for backend in (CPP, PY):
        xs, ys = [], []
        for n in counts:
            if backend == PY and quick and n > 50:
                continue
            d = synthetic_policies(tmp / f"synthetic-{n}", n)
            engine = engine_for(backend, [d])
            wall, cpu = measure(
                _review(engine, pod, "ml-research", mutate=False),
                min_seconds=0.03 if quick else 0.1,
                repeats=3 if quick else 5,
                max_seconds=5 if backend == CPP else 20,
            )
            xs.append(n)
            ys.append(wall)
            rows.append([backend, n, wall, cpu])
            log(f"engine: {backend} {n} synthetic policies: {wall:.3f} ms")
        slope, intercept, r2 = linear_fit(xs, ys)
        fits[backend] = {"slope_ms_per_policy": slope, "intercept_ms": intercept, "r2": r2}
    # the default set plus 200 synthetic ones, for scale
    d = tmp / "synthetic-200"
    engine = engine_for(CPP, [default_policies_dir(), d])
    wall, cpu = measure(
        _review(engine, pod, "ml-research", mutate=False), min_seconds=0.1, repeats=3, max_seconds=5
    )
    rows.append([CPP + " (default set + 200)", 214, wall, cpu])
    return rows, fits


def size_curve(quick: bool) -> tuple[list[list[Any]], dict[str, Any]]:
    sizes_kb = [1, 4, 16, 64, 256, 1024]
    engines = {CPP: engine_for(CPP), PY: engine_for(PY)}
    rows, fits = [], {}
    pods = {kb: sized_pod(kb * 1024) for kb in sizes_kb}
    for backend in (CPP, PY):
        xs, ys = [], []
        for kb in sizes_kb:
            if backend == PY and kb > (16 if quick else 256):
                continue
            obj = pods[kb]
            actual = len(json.dumps(obj, separators=(",", ":")))
            wall, cpu = measure(
                _review(engines[backend], obj, "ml-research"),
                min_seconds=0.03 if quick else 0.1,
                repeats=3 if quick else 5,
                max_seconds=8 if backend == CPP else 30,
            )
            containers = len(obj["spec"]["containers"])
            envs = sum(len(c.get("env", [])) for c in obj["spec"]["containers"])
            xs.append(actual / 1024)
            ys.append(wall)
            rows.append([backend, actual, containers, envs, wall, cpu])
            log(f"engine: {backend} object {actual / 1024:.0f} KB: {wall:.3f} ms")
        slope, intercept, r2 = linear_fit(xs, ys)
        fits[backend] = {"slope_ms_per_kb": slope, "intercept_ms": intercept, "r2": r2}
    return rows, fits


def run(quick: bool = False) -> dict[str, Any]:
    log("engine: per corpus workload …")
    rows, per = per_workload(quick)
    big_label = rows[0][0]
    print(
        table(
            "Engine: ms per admission (median; default policy set; full = mutate + validate)",
            ["workload", "bytes", f"{CPP} full", "full CPU", "validate", "mutate", f"{PY} full"],
            rows,
        )
    )
    cpp_full = [r[2] for r in rows]
    print(
        f"corpus + big Pod ({len(rows)} workloads), {CPP}: median full {median(cpp_full):.3f} ms, "
        f"median validate {median(r[4] for r in rows):.3f} ms, max full {max(cpp_full):.3f} ms\n"
    )
    share = cel_share(big_training_pod())
    print(
        table(
            "Where the 11.6 KB Pod's validate-only admission goes (CPU ms)",
            ["part", "ms"],
            [[k, v] for k, v in share.items()],
        )
    )
    with tempfile.TemporaryDirectory(prefix="trainguard-bench-engine-") as tmp:
        log("engine: growth with the number of policies …")
        prow, pfit = policy_curve(quick, Path(tmp))
    print(
        table(
            "Engine: validate-only ms per admission of the 11.6 KB Pod "
            "against the number of synthetic policies",
            ["backend", "policies", "ms", "CPU ms"],
            prow,
        )
    )
    for b, f in pfit.items():
        print(
            f"  {b}: {f['slope_ms_per_policy'] * 1000:.2f} µs per policy "
            f"+ {f['intercept_ms']:.3f} ms, r² {f['r2']:.4f}"
        )
    print()
    log("engine: growth with object size …")
    srow, sfit = size_curve(quick)
    print(
        table(
            "Engine: full ms per admission against object size (default policy set)",
            ["backend", "bytes", "containers", "env vars", "ms", "CPU ms"],
            srow,
        )
    )
    for b, f in sfit.items():
        print(f"  {b}: {f['slope_ms_per_kb']:.4f} ms per KB + {f['intercept_ms']:.3f} ms, r² {f['r2']:.4f}")
    print()
    big = per[big_label]
    py_big = big.get(f"{PY}_full_ms", float("nan"))
    return {
        "engine_ms_per_admission": round(big[f"{CPP}_full_ms"], 4),
        "engine_cpu_ms_per_admission": round(big[f"{CPP}_full_cpu_ms"], 4),
        "engine_validate_ms": round(big[f"{CPP}_validate_ms"], 4),
        "engine_mutate_ms": round(big[f"{CPP}_mutate_ms"], 4),
        "engine_cel_ms_validate": round(share["cel"], 4),
        "engine_adapters_ms_validate": round(share["adapters"], 4),
        "engine_view_ms_validate": round(share["view"], 4),
        "engine_corpus_median_ms": round(median(cpp_full), 4),
        "engine_cel_python_ms": round(py_big, 3),
        "engine_backend_ratio": round(py_big / big[f"{CPP}_full_ms"], 1),
        "policy_slope_us": round(pfit[CPP]["slope_ms_per_policy"] * 1000, 3),
        "policy_r2": round(pfit[CPP]["r2"], 4),
        "policy_slope_us_cel_python": round(pfit[PY]["slope_ms_per_policy"] * 1000, 3),
        "size_slope_ms_per_kb": round(sfit[CPP]["slope_ms_per_kb"], 5),
        "size_r2": round(sfit[CPP]["r2"], 4),
        "size_slope_ms_per_kb_cel_python": round(sfit[PY]["slope_ms_per_kb"], 4),
    }


def main() -> int:
    return run_part(run, __doc__)


if __name__ == "__main__":
    raise SystemExit(main())

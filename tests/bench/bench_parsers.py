"""The launch-line parser's cost against input size, on worst-case command shapes.

Two measurements:

- growth: each shape (wrapper repeats, `env A=1` repeats, runs of `$(`, quoting, long scripts,
  many commands, wrappers inside a script) generated at growing sizes and parsed with the caps of
  webhook/workloads/torchrun/limits.py lifted, so that the parsers themselves are measured up to
  a megabyte; a least-squares fit of CPU time (and of the parser's own work counter) against
  input size gives the slope and r² (r² near 1: linear; a quadratic step would bend the line);
- the probe: ≈1.4 MB Pods whose container command repeats `timeout 5`, `env A=1`, or holds a
  run of `$(`, through Engine.decide() with the caps in force, as the webhook decides them.

    python tests/bench/bench_parsers.py [--quick]
"""

from __future__ import annotations

import json
import os
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import measure
from inputs import engine_for
from measure import linear_fit, log, median, table

Shape = Callable[[int], tuple[list[str], list[str], dict[str, str]]]


def _fill(unit: str, size: int) -> str:
    return unit * max(1, size // len(unit))


# Each shape: size in characters -> (command, args, env), a launch hidden behind the pattern.
SHAPES: dict[str, Shape] = {
    "exec: timeout 5 repeated": lambda n: (["timeout", "5"] * max(1, n // 10) + ["torchrun", "t.py"], [], {}),
    "exec: env A=1 repeated": lambda n: (["env", "A=1"] * max(1, n // 7) + ["torchrun", "t.py"], [], {}),
    "exec: run of $(": lambda n: (["torchrun", "--nnodes=2", _fill("$(", n), "t.py"], [], {}),
    "exec: $(VAR) repeated": lambda n: (["torchrun", _fill("$(N)", n), "t.py"], [], {"N": "2"}),
    "sh: timeout 5 repeated": lambda n: (["sh", "-c", _fill("timeout 5 ", n) + "torchrun t.py"], [], {}),
    "sh: many commands": lambda n: (["sh", "-c", _fill("A=1; echo $A; ", n) + "torchrun t.py"], [], {}),
    "sh: run of $(": lambda n: (["sh", "-c", "torchrun t.py " + _fill("$(", n)], [], {}),
    "sh: quoting": lambda n: (
        ["sh", "-c", "torchrun --nnodes=2 t.py " + _fill("\"a\\\"b\"'c'\\d$'\\x41' ", n)],
        [],
        {},
    ),
    "sh: $-literal runs": lambda n: (["sh", "-c", "torchrun t.py " + _fill("$%", n)], [], {}),
    "sh: keyword prefixes": lambda n: (["sh", "-c", _fill("if ", n) + "torchrun t.py"], [], {}),
}


@contextmanager
def caps_lifted(factor: int = 1000) -> Iterator[None]:
    """Raise every cap of the parser (the names each module imported) for the duration."""
    import webhook.workloads.torchrun as pkg
    from webhook.workloads.torchrun import limits, shell

    saved = {
        (pkg, "MAX_WORDS"): pkg.MAX_WORDS,
        (pkg, "MAX_ARGV_BYTES"): pkg.MAX_ARGV_BYTES,
        (shell, "MAX_SCRIPT_BYTES"): shell.MAX_SCRIPT_BYTES,
    }
    meter = pkg.Meter

    class BigMeter(limits.Meter):
        def __init__(self) -> None:
            super().__init__(budget=limits.MAX_WORK * factor)

    try:
        for (module, name), value in saved.items():
            setattr(module, name, value * factor)
        pkg.Meter = BigMeter  # type: ignore[misc]
        yield
    finally:
        for (module, name), value in saved.items():
            setattr(module, name, value)
        pkg.Meter = meter  # type: ignore[misc]


def _cpu_seconds(fn: Callable[[], Any], repeats: int) -> float:
    """Median CPU time of one call (the measuring thread's), over `repeats` calls after a warm-up."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return median(times)


def growth(quick: bool) -> tuple[list[list[Any]], dict[str, dict[str, float]]]:
    from webhook.workloads.torchrun import parse_launch

    sizes = [32_768, 65_536, 131_072, 262_144] if quick else [65_536, 131_072, 262_144, 524_288, 1_048_576]
    rows: list[list[Any]] = []
    fits: dict[str, dict[str, float]] = {}
    with caps_lifted():
        for name, shape in SHAPES.items():
            xs, ys, ws = [], [], []
            for n in sizes:
                command, args, env = shape(n)
                chars = sum(map(len, command)) + sum(map(len, args))
                parsed = parse_launch(command, args, env)
                assert parsed.limit is None, (name, parsed.limit)
                cpu = _cpu_seconds(lambda c=command, a=args, e=env: parse_launch(c, a, e), 3 if quick else 5)
                xs.append(chars / 1024)
                ys.append(cpu * 1000)
                ws.append(parsed.work)
                rows.append([name, chars, len(command) + len(args), parsed.work, cpu * 1000])
            slope, intercept, r2 = linear_fit(xs, ys)
            wslope, _, wr2 = linear_fit(xs, ws)
            fits[name] = {
                "ms_per_kb": slope,
                "intercept_ms": intercept,
                "r2": r2,
                "work_per_kb": wslope,
                "work_r2": wr2,
            }
            log(f"parsers: {name}: {slope:.4f} ms/KB, r² {r2:.4f}")
    return rows, fits


def _pod(command: list[str], containers: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe", "namespace": "ml"},
        "spec": {
            "containers": [
                {
                    "name": f"trainer-{i}",
                    "image": "x",
                    "command": command,
                    "resources": {"limits": {"nvidia.com/gpu": 8}},
                }
                for i in range(containers)
            ]
        },
    }


PROBES: dict[str, Callable[[int], list[str]]] = {
    "timeout 5 repeated": lambda n: ["timeout", "5"] * (n // 13) + ["torchrun", "--nnodes=2", "t.py"],
    "env A=1 repeated": lambda n: ["env", "A=1"] * (n // 12) + ["torchrun", "--nnodes=2", "t.py"],
    "run of $(": lambda n: ["torchrun", "--nnodes=2", "$(" * (n // 2), "t.py"],
    # A script with no quote, escape, `$`, redirection or comment: the lexer's one-regex split.
    "sh: plain script": lambda n: ["sh", "-c", "timeout 5; " * (n // 11) + "torchrun --nnodes=2 t.py"],
}


def probes(quick: bool) -> list[list[Any]]:
    from webhook.engine import AdmissionInput

    engine = engine_for()
    rows = []
    # Each container within its own caps, together past the workload's (limits.MAX_WORKLOAD_WORK).
    script = ["sh", "-c", _fill("A=1; echo $A; ", 64_000) + "torchrun t.py"]
    # ≈1.4 MB, and ≈3 MB: the API server's request body limit, the largest Pod a webhook is sent.
    pods = {
        f"{name} ({n / 1e6:.1f} MB)": _pod(make(n))
        for n in (1_400_000, 3_000_000)
        for name, make in PROBES.items()
    }
    pods["22 containers x 64 KB script"] = _pod(script, 22)
    for name, obj in pods.items():
        size = len(json.dumps(obj, separators=(",", ":")))
        inp = AdmissionInput(object=obj, namespace="ml")
        tracemalloc.start()  # a call of its own: tracing would inflate the CPU figure
        decision = engine.decide(inp)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        cpu = _cpu_seconds(lambda i=inp: engine.decide(i), 3 if quick else 5)
        warned = [f.policy for f in decision.warnings]
        verdict = "allowed" if decision.allowed else "denied"
        rows.append([name, size, cpu * 1000, peak / 2**20, verdict, ",".join(warned)])
        log(
            f"parsers: probe {name}: {size / 1e6:.2f} MB in {cpu * 1000:.1f} ms CPU, {peak / 2**20:.1f} MiB peak"
        )
    return rows


def run(quick: bool = False) -> dict[str, Any]:
    load = os.getloadavg()
    log("parsers: growth on worst-case shapes (caps lifted) …")
    rows, fits = growth(quick)
    print(
        table(
            "Launch-line parser: CPU ms per container against input size (caps lifted; median)",
            ["shape", "chars", "words", "work units", "CPU ms"],
            rows,
        )
    )
    print(
        table(
            "Linear fit of CPU time and work against size (r² near 1 = linear)",
            ["shape", "ms per KB", "r²", "work per KB", "work r²"],
            [[k, f["ms_per_kb"], f["r2"], f["work_per_kb"], f["work_r2"]] for k, f in fits.items()],
        )
    )
    log("parsers: ≈1.4 and ≈3 MB Pods through Engine.decide() with the caps in force …")
    prow = probes(quick)
    print(
        table(
            "Probe: ≈1.4 and ≈3 MB Pods, Engine.decide() (default policies, caps in force; median CPU ms,"
            " peak Python allocation of one call)",
            ["command", "bytes", "CPU ms", "peak MiB", "decision", "warnings from"],
            prow,
        )
    )
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    worst_r2 = min(f["r2"] for f in fits.values())
    return {
        "parsers_worst_r2": round(worst_r2, 4),
        "parsers_worst_work_r2": round(min(f["work_r2"] for f in fits.values()), 4),
        "parsers_max_ms_per_kb": round(max(f["ms_per_kb"] for f in fits.values()), 4),
        "parsers_probe_max_cpu_ms": round(max(r[2] for r in prow), 1),
    }


def main() -> int:
    return measure.run_part(run, __doc__)


if __name__ == "__main__":
    raise SystemExit(main())

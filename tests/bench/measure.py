"""How the benchmarks measure and report: CPU spent in the CEL runtime, medians, percentiles, a
least-squares fit, time per call, plain-text tables, and the command line of one benchmark part.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any


@contextlib.contextmanager
def cel_runtime_seconds() -> Iterator[list[float]]:
    """While open, the thread CPU seconds spent in the C++ CEL runtime's evaluations (with the
    conversion of what they read) add up in the one-item list it yields. It wraps the backend's
    one evaluation entry point: a benchmark may reach into the engine's private CEL module, the
    engine must not know it is measured."""
    from webhook.engine import cel as cel_module

    program = cel_module._CppProgram
    evaluate = program.evaluate
    spent = [0.0]

    def timed(self: Any, activation: Any) -> Any:
        start = time.thread_time()
        try:
            return evaluate(self, activation)
        finally:
            spent[0] += time.thread_time() - start

    program.evaluate = timed  # type: ignore[method-assign]
    try:
        yield spent
    finally:
        program.evaluate = evaluate  # type: ignore[method-assign]


# -- statistics --------------------------------------------------------------------------------------


def median(values: Iterable[float]) -> float:
    return statistics.median(list(values))


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (q in 0..100)."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float, float]:
    """Least-squares y = slope*x + intercept; returns (slope, intercept, r²)."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    syy = sum((y - my) ** 2 for y in ys)
    slope = sxy / sxx if sxx else 0.0
    intercept = my - slope * mx
    r2 = (sxy * sxy) / (sxx * syy) if sxx and syy else 1.0
    return slope, intercept, r2


def time_per_call(
    fn: Any,
    *,
    min_iterations: int = 20,
    min_seconds: float = 0.2,
    repeats: int = 5,
    max_seconds: float = 10.0,
) -> float:
    """Median seconds per call over `repeats` batches, each at least `min_iterations` calls and
    `min_seconds` long (the batch size is fixed after a calibration run). Bounded by `max_seconds`."""
    deadline = time.perf_counter() + max_seconds
    fn()  # warm-up
    start = time.perf_counter()
    n = 0
    while (
        n < min_iterations or time.perf_counter() - start < min_seconds
    ) and time.perf_counter() < deadline:
        fn()
        n += 1
    batch = max(1, n)
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter() - t0) / batch)
        if time.perf_counter() > deadline:
            break
    return statistics.median(samples)


def table(title: str, headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    rows = [[_cell(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append(
            "  ".join(
                c.rjust(w) if _numeric(c) else c.ljust(w) for c, w in zip(r, widths, strict=True)
            ).rstrip()
        )
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:.2f}"
        return f"{value:.4f}"
    return str(value)


def _numeric(text: str) -> bool:
    return bool(text) and text.replace(",", "").replace(".", "").replace("-", "").replace("x", "").isdigit()


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run_part(run: Callable[[bool], dict[str, Any]], doc: str | None) -> int:
    """The command line of one benchmark part: `--quick`, then its summary as one JSON line."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0] if doc else None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    print(json.dumps(run(args.quick)))
    return 0

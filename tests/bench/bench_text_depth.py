"""The review's nesting bound on the text (`_check_text_depth`), alone: real reviews and 3 MiB of escapes.

    PYTHONPATH=TREE python tests/bench/bench_text_depth.py [--quick]

Every review the API server sends carries `metadata.managedFields`, whose keys hold quoted keys in
braces (`"k:{\\"name\\":\\"x\\"}"`): the check always reads escapes and strings that hold
brackets. This times it on the 11.6 KB training Pod's review as the API server sends it to
/mutate and to /validate (bench_pair.py's bodies), and on 3 MiB texts made of what it reads
slowest: runs of escapes, managedFields-like keys, strings of brackets, and the one past the
limit. For the reviews, also the bound the server uses on bodies of their size (`_check_depth`:
the decoded value encoded below orjson's own nesting limit), where the tree has it. CPU time of this process, medians (µs for the reviews, ms for the 3 MiB texts); `PYTHONPATH` picks
the tree. Not part of run.py.
"""

from __future__ import annotations

import os
from functools import partial
from typing import Any

import bench_pair
import measure
import orjson
from bench_structure import cpu_ms
from measure import median, table

from webhook.serve import admission_review as codec

SIZE = 3 * 1024 * 1024  # the API server's request body limit


def _lists(depth: int) -> bytes:
    return b"[" * depth + b"1" + b"]" * depth


def texts() -> dict[str, bytes]:
    managed = rb'"k:{\"name\":\"x\"}",'
    return {
        "runs of escaped backslashes": b'["' + b"\\\\" * (SIZE // 2 - 8) + b'"]',
        "escaped quote, bracket": b'["' + b'\\"[' * (SIZE // 3 - 8) + b'"]',
        "letter escapes": b'["' + b"\\n" * (SIZE // 2 - 8) + b'"]',
        "managedFields-like keys": b"[" + managed * (SIZE // len(managed)) + b"1]",
        "strings of one bracket": b"[" + b'"[",' * (SIZE // 4) + b"1]",
        "keys, then one past the limit": b"["
        + managed * (SIZE // len(managed) - 20)
        + _lists(codec.MAX_DEPTH)
        + b"]",
    }


def _decodes(body: bytes) -> None:
    try:
        orjson.loads(body)
    except orjson.JSONDecodeError:
        raise codec.ReviewError("refused by the decoder") from None


def _hundred_checks(body: bytes) -> None:
    for _ in range(100):
        codec._check_text_depth(body)


def _hundred_bounds(body: bytes) -> None:
    value = orjson.loads(body)
    for _ in range(100):
        codec._check_depth(value, body)


def run(quick: bool = False) -> dict[str, Any]:
    load = os.getloadavg()
    review, _ = bench_pair.reviews()
    mutate = orjson.dumps(review)
    validate = orjson.dumps(bench_pair.sent_back(review, None, 1))
    rows: list[list[Any]] = []
    summary: dict[str, Any] = {}
    batches = 10 if quick else 50
    checks = [("", _hundred_checks)]
    if hasattr(codec, "_check_depth"):
        checks.append((", as the server bounds it", _hundred_bounds))
    for name, body in (
        ("training Pod review, /mutate", mutate),
        ("training Pod review, /validate", validate),
    ):
        for how, hundred in checks:
            per_batch = [cpu_ms(partial(hundred, body), 1)[0] for _ in range(batches)]
            us = median(per_batch) / 100 * 1e3
            rows.append([name + how, len(body), f"{us:.1f} µs", "ok"])
            summary[name + how] = round(us, 1)
    for name, body in texts().items():
        orjson.loads(body)  # what the check reads has passed the decoder
        ms, outcome = cpu_ms(partial(codec._check_text_depth, body), 3 if quick else 7)
        rows.append([name, len(body), f"{ms:.2f} ms", outcome])
        summary[name] = round(ms, 2)
    # What the decoder, which runs before the check, does itself with deep text: orjson accepts
    # 1,024 levels (past the interpreter's recursion limit, so the check cannot be left to it).
    for depth in (1000, 1025):
        branch = b"[" * (depth - 1) + b"]" * (depth - 1)
        body = b"[" + b",".join([branch] * (SIZE // (len(branch) + 1))) + b"]"
        ms, outcome = cpu_ms(partial(_decodes, body), 3 if quick else 7)
        rows.append([f"orjson.loads, branches {depth:,} deep", len(body), f"{ms:.2f} ms", outcome])
    print(
        table(
            "The nesting bound on the text: median thread CPU per call",
            ["text", "bytes", "CPU", "outcome"],
            rows,
        )
    )
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    summary["loadavg"] = load
    return summary


def main() -> int:
    return measure.run_part(run, __doc__)


if __name__ == "__main__":
    raise SystemExit(main())

"""The structural checks' cost at the largest object the API server accepts (3 MiB of JSON).

Every front door refuses the same unreadable objects (webhook/documents.py: metadata types,
nesting, values per object; and a count of a YAML text before it is parsed). This measures what
those checks cost on the worst shapes that fit in 3 MiB, on both paths:

- webhook: `admission_review.parse_request(body)` on an AdmissionReview carrying the object (JSON decoding,
  the nesting bound on the text, the value count and the metadata types), and the part of it that
  is the structural walk (`check_structure` with no bound known, as a YAML document gets it);
- check: `load_yaml_documents(text)` and `check_object`, the path `trainguard check` and
  `trainguard review` read a file by, on the same object written as JSON text (YAML's flow form);
- the file bound: a 31 MB YAML file of 2.7 million keys, refused on a count of its text;
- the adaptation key: what a validating call adds to find the mutating call's adaptation (the
  object's canonical JSON and its digest, webhook/engine/adaptations.py), on each decoded shape.

CPU time of this process, medians of several calls; the outcome says whether the shape was
decided (ok) or refused, and by which check.

    python tests/bench/bench_structure.py [--quick]
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import measure
import orjson
from inputs import admission_review, big_training_pod
from measure import log, median, table

from webhook.documents import Document, check_object, check_structure, load_yaml_documents
from webhook.engine import Adaptations
from webhook.errors import InputError
from webhook.serve import admission_review as codec

LIMIT = 3 * 1024 * 1024  # the API server's request body limit


def _pod(extra: Any = None, **metadata: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "shape", "namespace": "default", **metadata},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
    }
    if extra is not None:
        pod["spec"]["extra"] = extra
    return pod


def _fill(make: Callable[[int], dict[str, Any]], target: int = LIMIT - 2048) -> dict[str, Any]:
    """make(n) with the largest n whose AdmissionReview stays under `target` bytes (bisection)."""
    lo, hi = 1, target
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(orjson.dumps(admission_review(make(mid)))) <= target:
            lo = mid
        else:
            hi = mid - 1
    return make(lo)


def _nested_wide(n: int) -> list[Any]:
    """n branches, each 95 lists deep: the most containers at the deepest level allowed."""
    branch: Any = 0
    for _ in range(95):
        branch = [branch]
    return [branch] * n


def _padded_pod(n: int) -> dict[str, Any]:
    """The benchmarks' training Pod (managedFields and all) with n more env entries."""
    pod = big_training_pod()
    pod["spec"]["containers"][0]["env"] += [{"name": f"EXTRA_{i}", "value": "x" * 24} for i in range(n)]
    return pod


SHAPES: dict[str, Callable[[], dict[str, Any]]] = {
    "training Pod, env padded": lambda: _fill(_padded_pod),
    "flat list of zeros": lambda: _fill(lambda n: _pod([0] * n)),
    "list of empty lists": lambda: _fill(lambda n: _pod([[]] * n)),
    "list of empty maps": lambda: _fill(lambda n: _pod([{}] * n)),
    "95-deep branches, wide": lambda: _fill(lambda n: _pod(_nested_wide(n))),
    "labels, 1-char values": lambda: _fill(lambda n: _pod(labels={f"k{i:x}": "v" for i in range(n)})),
    # Strings the text-depth check must read through: escapes, and brackets inside strings.
    "managedFields-like keys": lambda: _fill(lambda n: _pod({f'k:{{"name":"{i:x}"}}': {} for i in range(n)})),
    "escaped quotes and brackets": lambda: _fill(lambda n: _pod(['"[\\' * 16] * n)),
    "just past the cap, 2 bytes a value": lambda: _pod([0] * 499_990),
}


def cpu_ms(fn: Callable[[], Any], repeats: int) -> tuple[float, str]:
    """Median CPU ms of `repeats` calls of `fn`, and its outcome: ok, or refused and by what."""
    times: list[float] = []
    outcome = "ok"
    for _ in range(repeats):
        started = time.process_time()
        try:
            fn()
            outcome = "ok"
        except InputError as exc:
            outcome = "refused: " + exc.message.split(" (")[0].split(":")[0][:64]
        times.append((time.process_time() - started) * 1000)
    return median(times), outcome


def _check_path(text: str) -> None:
    for doc in load_yaml_documents(text, "shape.json"):
        check_object(Document(doc.data, doc.source, doc.path, doc.index, doc.line))


def shapes(quick: bool) -> list[list[Any]]:
    repeats = 3 if quick else 7
    rows: list[list[Any]] = []
    for name, make in SHAPES.items():
        obj = make()
        body = orjson.dumps(admission_review(obj))
        text = orjson.dumps(obj).decode()
        webhook_ms, webhook_outcome = cpu_ms(partial(codec.parse_request, body), repeats)
        walk_ms, _ = cpu_ms(partial(check_structure, orjson.loads(text), source="bench"), repeats)
        check_ms, check_outcome = cpu_ms(partial(_check_path, text), max(1, repeats // 2))
        # The store's own key function: the step is private, and only its cost is wanted here.
        key_ms, _ = cpu_ms(partial(Adaptations._key, orjson.loads(text), "bench", b""), repeats)
        rows.append([name, len(body), webhook_ms, webhook_outcome, walk_ms, check_ms, check_outcome, key_ms])
        log(f"structure: {name}: webhook {webhook_ms:.1f} ms, check {check_ms:.1f} ms")
    return rows


def big_file(quick: bool) -> list[Any]:
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: huge}\ndata:\n" + "".join(
        f" {i:x}: v\n" for i in range(2_700_000)
    )
    ms, outcome = cpu_ms(lambda: load_yaml_documents(text, "huge.yaml"), 3 if quick else 5)
    return ["31 MB YAML, 2.7 M keys", len(text.encode()), ms, outcome]


def run(quick: bool = False) -> dict[str, Any]:
    load = os.getloadavg()
    log("structure: worst shapes at the API server's 3 MiB limit …")
    rows = shapes(quick)
    print(
        table(
            "Structural checks at 3 MiB: median CPU ms per call (webhook: parse_request on the "
            "AdmissionReview; walk: check_structure alone; check: YAML loader + check_object; adaptation key: canonical JSON + digest)",
            [
                "shape",
                "review bytes",
                "webhook ms",
                "webhook outcome",
                "walk ms",
                "check ms",
                "check outcome",
                "adaptation key ms",
            ],
            rows,
        )
    )
    big = big_file(quick)
    print(
        table(
            "The file bound: refused before parsing (median CPU ms)",
            ["input", "bytes", "ms", "outcome"],
            [big],
        )
    )
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
    return {
        "structure_webhook_max_ms": round(max(r[2] for r in rows), 1),
        "structure_check_max_ms": round(max(r[5] for r in rows), 1),
        "structure_big_file_ms": round(big[2], 1),
        "structure_adaptation_key_max_ms": round(max(r[7] for r in rows), 1),
    }


def main() -> int:
    return measure.run_part(run, __doc__)


if __name__ == "__main__":
    raise SystemExit(main())

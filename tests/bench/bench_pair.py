"""Where the webhook's two calls for one object spend their CPU, under the API server's pattern.

    PYTHONPATH=TREE python tests/bench/bench_pair.py [--pairs N] [--rounds N]
    PYTHONPATH=TREE python tests/bench/bench_pair.py --instructions [--pairs N]

The ASGI app as `serve` builds it (one store of adaptations where the tree has one, the runtime
tuning), called in process, no sockets: for each pair, /mutate with the 11.6 KB training Pod as
the API server sends it (generateName, managedFields, no uid), then /validate with the object the
API server sends back (the patch applied; name, uid, creationTimestamp, generation and status
added), each body a new one. Two patterns: "warm" (the calls back to back, as a load generator
sends them) and "cold" (before each call, 4 ms asleep and 32 MiB of other memory written: what the
API server, etcd and the client do between the calls on a shared machine, which evicts the
webhook's code and data from the CPU caches). Per call, the thread's CPU time split into the
steps of the handler: decoding the body, checking the review, the engine (and of it the C++ CEL
runtime, with the conversion of what it reads), encoding the answer, and the rest (ASGI, slots,
metrics, the log record, the adaptation filed after /mutate's answer). Medians in µs over
`--rounds` rounds of `--pairs` pairs; `uptime` before and after. Not part of run.py.

With `--instructions`, nothing is timed: the script runs itself under callgrind (Debian package
valgrind) with counting off, prepares `--pairs` warm pairs of bodies, and counts the instructions of
the process while the app answers them, so that the machine's load does not move the figure. All
of the process is counted (the collector's work included, wherever it falls), as one total per pair.

What it times is the webhook process alone: the API server's own work between the calls (applying
the patch, defaulting, encoding the review) is bench_apiserver.py's "patch" arm.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import copy
import importlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import inputs
import measure
import orjson

_SUFFIX = "x7k2q"
_EVICT_BYTES = 32 * 1024 * 1024
_PAUSE_SECONDS = 0.004


class Steps:
    """Thread CPU seconds per step of the current call, by wrapping the handler's own functions."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    def wrap(self, owner: Any, name: str, step: str) -> None:
        original: Callable[..., Any] = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                self.spent[step] = self.spent.get(step, 0.0) + time.thread_time() - start

        setattr(owner, name, timed)


def _server_module(name: str, older: str | None = None) -> Any:
    try:
        return importlib.import_module(f"webhook.serve.{name}")
    except ImportError:
        return importlib.import_module(f"webhook.{older or name}")


def build_app() -> tuple[Any, Any]:
    """The app over a state as `serve` builds it; (app, state)."""
    # The server is a package (webhook.serve) from this tree on; older trees kept it at the top.
    app_module = _server_module("app")
    runtime_tuning = _server_module("runtime_tuning")
    from webhook.config import load_config
    from webhook.engine import build_engine, default_policies_dir, load_policy_set
    from webhook.metrics import Metrics

    metrics = Metrics()
    try:
        from webhook.engine import Adaptations

        state = app_module.ServerState(
            metrics=metrics, adaptations=Adaptations(on_lookup=metrics.observe_adaptation)
        )
        engine = build_engine(
            load_policy_set([default_policies_dir()]), load_config(), adaptations=state.adaptations
        )
    except ImportError:  # a tree without the store
        state = app_module.ServerState(metrics=metrics)
        engine = build_engine(load_policy_set([default_policies_dir()]), load_config())
    state.install(engine)
    runtime_tuning.tune_for_latency()
    return app_module.create_app(state), state


def reviews() -> tuple[dict[str, Any], str]:
    """The mutating call's review as the API server sends it, and the namespace."""
    pod = inputs.big_training_pod()
    meta = pod["metadata"]
    for key in ("name", "uid", "creationTimestamp"):
        meta.pop(key, None)
    meta["generateName"] = "llama-70b-pretrain-worker-"
    review = inputs.admission_review(pod, namespace="bench-on")
    obj = review["request"]["object"]["metadata"]
    for key in ("name", "uid", "creationTimestamp"):
        obj.pop(key, None)
    review["request"]["name"] = ""
    return review, "bench-on"


def sent_back(review: dict[str, Any], patch_b64: str | None, serial: int) -> dict[str, Any]:
    """The validating call's review: the mutating call's object patched, with what the API server
    adds before calling the validating webhook."""
    import jsonpatch

    out = copy.deepcopy(review)
    obj = out["request"]["object"]
    if patch_b64:
        obj = jsonpatch.apply_patch(obj, orjson.loads(base64.b64decode(patch_b64)))
    meta = obj["metadata"]
    meta["name"] = meta["generateName"] + _SUFFIX
    meta["uid"] = f"6a1f0000-0000-4000-8000-{serial:012d}"
    meta["creationTimestamp"] = "2026-12-04T21:21:14Z"
    meta["generation"] = 1
    obj["status"] = {"phase": "Pending", "qosClass": "Burstable"}
    out["request"]["object"] = obj
    out["request"]["name"] = meta["name"]
    return out


def call(loop: asyncio.AbstractEventLoop, app: Any, path: str, body: bytes) -> bytes:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "https",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8443),
    }
    sent = [False]
    out: list[bytes] = []

    async def receive() -> dict[str, Any]:
        if sent[0]:
            await asyncio.sleep(3600)
        sent[0] = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            out.append(message.get("body", b""))

    loop.run_until_complete(app(scope, receive, send))
    return b"".join(out)


def run(pairs: int, rounds: int) -> dict[str, Any]:
    import uvloop

    review_module = _server_module("admission_review", "review")
    from webhook.engine import Engine

    loop = uvloop.new_event_loop()
    app, _state = build_app()
    steps = Steps()
    steps.wrap(review_module, "loads", "decode")
    steps.wrap(review_module, "parse_review", "checks")
    steps.wrap(Engine, "decide" if hasattr(Engine, "decide") else "review", "engine")
    steps.wrap(review_module, "build_response", "encode")
    base, _ = reviews()
    evict = bytearray(_EVICT_BYTES)
    results: dict[str, dict[str, list[float]]] = {}
    load_before = os.getloadavg()
    call_result = b""
    with measure.cel_runtime_seconds() as cel:
        for pattern in ("warm", "cold", "warm", "cold") * rounds:
            per: dict[str, dict[str, list[float]]] = {"mutate": {}, "validate": {}}
            for i in range(pairs + 5):
                review = copy.deepcopy(base)
                review["request"]["uid"] = f"0b1f0000-0000-4000-8000-{i:012d}"
                for endpoint in ("mutate", "validate"):
                    if endpoint == "mutate":
                        body = orjson.dumps(review)
                    else:
                        answer = orjson.loads(call_result)["response"]
                        body = orjson.dumps(sent_back(review, answer.get("patch"), i))
                    if pattern == "cold":
                        time.sleep(_PAUSE_SECONDS)
                        for at in range(0, _EVICT_BYTES, 64):
                            evict[at] = i & 0xFF
                    steps.spent.clear()
                    cel[0] = 0.0
                    start = time.thread_time()
                    call_result = call(loop, app, f"/{endpoint}", body)
                    total = time.thread_time() - start
                    if i < 5:  # the first calls of a batch fill what later calls reuse
                        continue
                    spent = {**steps.spent, "cel": cel[0], "total": total}
                    spent["rest"] = total - sum(
                        spent.get(k, 0.0) for k in ("decode", "checks", "engine", "encode")
                    )
                    for step, seconds in spent.items():
                        per[endpoint].setdefault(step, []).append(seconds * 1e6)
            for endpoint, by_step in per.items():
                for step, values in by_step.items():
                    results.setdefault(f"{pattern} {endpoint}", {}).setdefault(step, []).append(
                        statistics.median(values)
                    )
    load_after = os.getloadavg()
    loop.close()
    columns = ("decode", "checks", "engine", "cel", "encode", "rest", "total")
    rows = []
    summary: dict[str, Any] = {}
    for name, by_step in results.items():
        medians = {step: statistics.median(values) for step, values in by_step.items()}
        rows.append([name, *(medians.get(c, 0.0) for c in columns)])
        summary[name] = {c: round(medians.get(c, 0.0), 1) for c in columns}
    for pattern in ("warm", "cold"):
        summary[f"{pattern} pair total"] = round(
            summary[f"{pattern} mutate"]["total"] + summary[f"{pattern} validate"]["total"], 1
        )
    print(
        measure.table(
            f"The webhook pair in process, thread CPU µs per call (median over {rounds * 2} batches of "
            f"{pairs} pairs; engine includes cel); load average "
            f"{' '.join(f'{x:.2f}' for x in load_before)} before, {' '.join(f'{x:.2f}' for x in load_after)} after",
            ["pattern call", *columns],
            rows,
        )
    )
    summary["loadavg"] = {"before": load_before, "after": load_after}
    return summary


_UNDER_CALLGRIND = "TRAINGUARD_BENCH_PAIR_CALLGRIND"


def instructions(pairs: int) -> dict[str, Any]:
    """Instructions per warm pair, counted by callgrind around the pairs only."""
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not on PATH (Debian package valgrind)")
    with tempfile.TemporaryDirectory(prefix="bench-pair-") as tmp:
        out = Path(tmp) / "callgrind.out"
        command = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-instr=no"]
        command += [f"--callgrind-out-file={out}", sys.executable, __file__, "--pairs", str(pairs)]
        # PYTHONHASHSEED: the same dict and set layouts run to run.
        env = {**os.environ, _UNDER_CALLGRIND: "1", "PYTHONHASHSEED": "0"}
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        totals = re.findall(r"^(?:totals|summary): (\d+)", out.read_text(errors="replace"), re.M)
    per_pair = int(totals[-1]) / pairs
    print(
        measure.table(
            f"The webhook pair in process, instructions per warm pair ({pairs} pairs; callgrind)",
            ["", "thousands"],
            [["/mutate then /validate", per_pair / 1000]],
        )
    )
    return {"pairs": pairs, "instructions_per_pair": round(per_pair)}


def counted_pairs(pairs: int) -> None:
    """The pairs `instructions` counts, run inside callgrind: the bodies made first, then counting
    turned on for the calls alone."""
    import uvloop

    loop = uvloop.new_event_loop()
    app, state = build_app()
    # Under callgrind a call runs some 50 times slower: past the inline slice, a decision would
    # move to a thread and start again there, which at full speed it does not.
    state.inline_slice = 3.0
    if state.adaptations is not None:
        state.adaptations.ahead_seconds = 3.0
    base, _ = reviews()
    bodies = []
    for i in range(2 * pairs + 20):
        review = copy.deepcopy(base)
        review["request"]["uid"] = f"0b1f0000-0000-4000-8000-{i:012d}"
        mutate = orjson.dumps(review)
        answer = orjson.loads(call(loop, app, "/mutate", mutate))["response"]
        validate = orjson.dumps(sent_back(review, answer.get("patch"), i))
        if i < pairs + 20:  # the first calls fill what later calls reuse
            call(loop, app, "/validate", validate)
        else:
            bodies.append((mutate, validate))
    # Each counted /mutate files its adaptation again (the same object: kept under the same key),
    # for the /validate right after it, as in any pair.
    control = ["callgrind_control", "-i"]
    subprocess.run([*control, "on", str(os.getpid())], check=True, capture_output=True, timeout=120)
    for mutate, validate in bodies:
        call(loop, app, "/mutate", mutate)
        call(loop, app, "/validate", validate)
    subprocess.run([*control, "off", str(os.getpid())], check=True, capture_output=True, timeout=120)
    loop.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--instructions", action="store_true", help="count instructions (callgrind)")
    args = parser.parse_args()
    if os.environ.get(_UNDER_CALLGRIND):
        counted_pairs(args.pairs)
    elif args.instructions:
        print(json.dumps(instructions(args.pairs)))
    else:
        print(json.dumps(run(args.pairs, args.rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Memory under sustained mixed traffic: whether a running `trainguard serve` stays flat and bounded.

One server (`--workers` as given, the shipped policies) over TLS on 127.0.0.1 gets a warm-up, then
`--requests` reviews in a closed loop from client processes: valid ones (the corpus workloads and
the 11.6 KB training Pod, each with fresh names, namespaces, labels and values, so that nothing
keyed by request data is ever seen twice), fuzzed ones (the same with a few nodes replaced by
values of the wrong type, deep nesting, long or odd strings, keys removed or added) and, one in
`--large-every`, a 2.8 MiB review. The server's process tree is sampled every 0.5 s: Pss summed
(what the memory cgroup counts: pages the workers share with the supervisor count once) and RSS
summed (what `ps` shows); printed after the warm-up, the peak, at every tenth of the run and after
it, against the Deployment's memory limit.

  targets: Pss after the run within 25 % of Pss after the warm-up; peak Pss at most 75 % of the
  shipped limit (25 % headroom)

    python tests/bench/bench_memory.py [--requests 300000] [--warmup 20000] [--workers 2]
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing
import os
import random
import re
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import inputs
import servers
from clients import KeepAlive
from measure import log, table
from process_memory import Sampler, memory_kib

MiB = 1024 * 1024
DEPLOYMENT = Path(__file__).resolve().parents[2] / "deploy" / "deployment.yaml"


def shipped_limit_mib() -> float:
    """The container's memory limit in deploy/deployment.yaml (the `limits:` block's memory)."""
    text = DEPLOYMENT.read_text()
    found = re.search(r"limits:\s*\n(?:\s+cpu:.*\n)?\s+memory:\s*(\d+)Mi", text)
    if found is None:
        raise RuntimeError(f"no memory limit found in {DEPLOYMENT}")
    return float(found.group(1))


# -- the requests ---------------------------------------------------------------------------------


_ODD_STRINGS = ["", " ", "\u0000", "é" * 300, "🙂" * 50, "a" * 5000, "1e309", "-0", "${A}", "$(x)", "'\"\\"]


def _odd_value(rng: random.Random, depth: int = 0) -> Any:
    choice = rng.randrange(10)
    if choice == 0:
        return rng.randrange(-(2**63), 2**63)
    if choice == 1:
        return rng.random() * 10 ** rng.randrange(-5, 30)
    if choice == 2:
        return rng.choice([True, False, None])
    if choice == 3:
        return rng.choice(_ODD_STRINGS)
    if choice == 4:
        return f"v-{rng.getrandbits(64):x}"
    if choice == 5:  # nesting deeper than anything real, within the API server's limits
        value: Any = "deep"
        for _ in range(rng.randrange(10, 90)):
            value = [value] if rng.random() < 0.5 else {"k": value}
        return value
    if choice == 6 and depth < 3:
        return [_odd_value(rng, depth + 1) for _ in range(rng.randrange(0, 6))]
    if choice == 7 and depth < 3:
        return {f"k{rng.getrandbits(32):x}": _odd_value(rng, depth + 1) for _ in range(rng.randrange(0, 6))}
    if choice == 8:
        return {}
    return []


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _nodes(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _nodes(v, (*path, i))
    return out


def fuzz(obj: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """`obj` with one to four nodes replaced, removed or given a sibling."""
    obj = copy.deepcopy(obj)
    for _ in range(rng.randrange(1, 5)):
        paths = [p for p in _nodes(obj) if p]
        if not paths:
            break
        path = rng.choice(paths)
        parent: Any = obj
        for step in path[:-1]:
            parent = parent[step]
        action = rng.randrange(3)
        if action == 0:
            parent[path[-1]] = _odd_value(rng)
        elif action == 1:
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[f"x-{rng.getrandbits(40):x}"] = _odd_value(rng)
        else:
            parent.append(_odd_value(rng))
    return obj


def freshened(obj: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """`obj` with names, namespace, labels and one container's values never seen before."""
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {}) if isinstance(obj.get("metadata"), dict) else {}
    tag = f"{rng.getrandbits(48):012x}"
    meta["name"] = f"job-{tag}"
    meta["namespace"] = f"team-{rng.randrange(5000)}"
    labels = meta.setdefault("labels", {}) if isinstance(meta.get("labels"), dict) else {}
    labels[f"run-{tag[:6]}"] = tag
    annotations = meta.setdefault("annotations", {}) if isinstance(meta.get("annotations"), dict) else {}
    annotations["bench/request"] = tag
    return obj


def review_as_sent(obj: dict[str, Any], rng: random.Random) -> bytes:
    """An AdmissionReview of `obj` as the API server sends it (a fuzzed object as it is)."""
    try:
        meta = obj["metadata"]
        review = inputs.admission_review(obj, namespace=meta.get("namespace") or "default")
    except Exception:  # metadata fuzzed out of shape: the request carries the object as it is
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"operation": "CREATE", "namespace": "default", "object": obj},
        }
    review["request"]["uid"] = f"{rng.getrandbits(128):032x}"
    return json.dumps(review, separators=(",", ":")).encode()


def _client(
    port: int, cafile: str, seed: int, count: int, threads: int, large_every: int, large: bytes, out: Any
) -> None:
    """One client process: `count` requests on `threads` keep-alive connections; puts its counts."""
    ctx = ssl.create_default_context(cafile=cafile)
    workloads = [obj for _, obj in inputs.corpus_workloads()] + [inputs.big_training_pod()]
    statuses: dict[str, int] = {}
    lock = threading.Lock()
    next_index = [0]

    def lane(k: int) -> None:
        rng = random.Random(seed * 1000 + k)
        with KeepAlive(port, ctx, timeout=60) as conn:
            while True:
                with lock:
                    i = next_index[0]
                    next_index[0] += 1
                if i >= count:
                    break
                if large_every and i % large_every == large_every - 1:
                    body = large
                else:
                    obj = freshened(rng.choice(workloads), rng)
                    body = review_as_sent(fuzz(obj, rng) if rng.random() < 0.5 else obj, rng)
                status = str(conn.post("/validate" if rng.random() < 0.6 else "/mutate", body))
                with lock:
                    statuses[status] = statuses.get(status, 0) + 1

    workers = [threading.Thread(target=lane, args=(k,), daemon=True) for k in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    out.put(statuses)


def load(
    port: int, cafile: Path, count: int, seed: int, clients: int, large_every: int, large: bytes
) -> dict[str, int]:
    """`count` requests from `clients` processes of 4 connections each; the statuses summed."""
    mp = multiprocessing.get_context("fork")
    out = mp.Queue()
    procs = [
        mp.Process(
            target=_client,
            args=(
                port,
                str(cafile),
                seed + i,
                count // clients + (i < count % clients),
                4,
                large_every,
                large,
                out,
            ),
            daemon=True,
        )
        for i in range(clients)
    ]
    for p in procs:
        p.start()
    total: dict[str, int] = {}
    for _ in procs:
        for status, n in out.get(timeout=6 * 3600).items():
            total[status] = total.get(status, 0) + n
    for p in procs:
        p.join(60)
    return total


def run(
    requests: int, warmup: int, workers: int, clients: int, large_every: int, extra: list[str]
) -> dict[str, Any]:
    limit = shipped_limit_mib()
    large = inputs.padded_review(int(2.8 * MiB))
    results: dict[str, Any] = {
        "requests": requests,
        "warmup": warmup,
        "workers": workers,
        "large_every": large_every,
        "large_MiB": round(len(large) / MiB, 2),
        "limit_MiB": limit,
        "loadavg_before": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="trainguard-memory-") as d:
        tmp = Path(d)
        servers.make_certs(tmp / "certs")
        port = servers.free_port()
        s = servers.trainguard_server(
            port, tmp / "certs", tmp / "memory.log", workers=workers, extra=extra, recycle=True
        )
        with s:
            time.sleep(1.0)
            results["at_rest_pss_MiB"], results["at_rest_rss_MiB"] = (
                round(v / 1024, 1) for v in memory_kib(s.pid)
            )
            log(f"memory: warm-up, {warmup} requests")
            results["warmup_statuses"] = load(
                port, tmp / "certs" / "ca.crt", warmup, 1, clients, large_every, large
            )
            time.sleep(2.0)
            warm_pss, warm_rss = memory_kib(s.pid)
            log(f"memory: after warm-up Pss {warm_pss / 1024:.1f} MiB; {requests} requests")
            started = time.monotonic()
            with Sampler(s.pid, every=0.5) as sampler:
                statuses = load(port, tmp / "certs" / "ca.crt", requests, 100, clients, large_every, large)
            seconds = time.monotonic() - started
            time.sleep(2.0)
            end_pss, end_rss = memory_kib(s.pid)
            server_log = s.log_path.read_text(errors="replace")
    samples = sampler.samples
    peak_pss = max(p for _, p, _ in samples)
    peak_rss = max(r for _, _, r in samples)
    tenths = [samples[min(len(samples) - 1, len(samples) * k // 10)] for k in range(1, 11)]
    failed = sum(n for status, n in statuses.items() if status not in ("200", "400", "413", "422"))
    growth = (end_pss - warm_pss) / warm_pss
    headroom = 1 - peak_pss / 1024 / limit
    results.update(
        {
            "statuses": statuses,
            "failed_requests": failed,
            "seconds": round(seconds, 1),
            "rps": round(requests / seconds, 1),
            "after_warmup_pss_MiB": round(warm_pss / 1024, 1),
            "after_warmup_rss_MiB": round(warm_rss / 1024, 1),
            "peak_pss_MiB": round(peak_pss / 1024, 1),
            "peak_rss_MiB": round(peak_rss / 1024, 1),
            "after_run_pss_MiB": round(end_pss / 1024, 1),
            "after_run_rss_MiB": round(end_rss / 1024, 1),
            "pss_by_tenth_MiB": [round(p / 1024, 1) for _, p, _ in tenths],
            "growth_after_run_vs_warmup": f"{growth:+.1%}",
            "peak_headroom_under_limit": f"{headroom:.1%}",
            "recycled_workers": server_log.count('"worker recycled"'),
            "verdict": "ok"
            if abs(growth) <= 0.25 and headroom >= 0.25
            else "MISSED (targets: within 25 % of the warm-up; peak >= 25 % under the limit)",
            "loadavg_after": os.getloadavg(),
        }
    )
    rows = [(k, json.dumps(v)) for k, v in results.items()]
    print(table(f"memory under {requests} mixed reviews ({workers} workers)", ["figure", "value"], rows))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--requests", type=int, default=300_000)
    parser.add_argument("--warmup", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--clients", type=int, default=2, help="client processes (4 connections each)")
    parser.add_argument("--large-every", type=int, default=1000, help="one 2.8 MiB review in N; 0: none")
    parser.add_argument("--serve-arg", action="append", default=[], help="passed on to `trainguard serve`")
    args = parser.parse_args()
    results = run(args.requests, args.warmup, args.workers, args.clients, args.large_every, args.serve_arg)
    results["command"] = "python tests/bench/bench_memory.py " + " ".join(sys.argv[1:])
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Abuse: what misbehaving clients cost a running `trainguard serve`, black-box, over TLS on 127.0.0.1.

Each probe starts from a server at rest (default limits, `--workers` as given, the shipped
policies) and prints what a user of the cluster would notice: seconds to an answer, /healthz
latency meanwhile, connections closed, and the server's memory (Pss summed over the supervisor
and its workers, sampled every 20 ms; growth is over the figure at rest).

  big-pod        one Pod whose container command repeats `timeout 5` (about 1.4 MB)
  nested-3MB     ≈3 MB of lists nested 95 deep side by side: the nesting check's slowest text
  headers-16MiB  one connection sending 16 MiB of a single header line as fast as it can
  slowloris      200 connections sending their headers at 1 byte/s
  no-body        20 connections sending a Content-Length and no body
  withheld       40 connections sending all but the last byte of a 3 MiB body
  deep           request.kind.kind nested 990 levels, then a valid review on the same connection
  small-slow     max-in-flight connections posting, back to back for 10 s, the slowest reviews that
                 still begin inline (just under 64 KiB: long shell scripts in 16 containers, quoting,
                 runs of `$(`), /healthz polled meanwhile; and where they were decided
  sequential     the common path for comparison: 2,000 keep-alive /validate calls, one at a time
  peak           workers x max-in-flight connections posting 2.8 MiB reviews for 10 s: the peak
                 RSS at the concurrency limit with the largest bodies (what the Deployment's
                 memory limit is set from)
  stall          a well-behaved client sending the 11.6 KB Pod's review at 50/s (open loop), alone
                 and then beside 200 body-less connections, 200 slowloris connections and 40
                 withheld 3 MiB bodies (headers and 256 KiB, then nothing), each reopened when the
                 server closes it; --stall-rounds pairs of --stall-seconds runs: the client's 429s
                 (target 0) and its p99 beside the attack against its p99 alone (target within 2x),
                 medians over the rounds

    python tests/bench/bench_abuse.py [--quick] [--workers N] [--only big-pod,peak]
    python tests/bench/bench_abuse.py --only stall [--stall-seconds 30 --stall-rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import socket
import ssl
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import inputs
import measure
import servers
from clients import KeepAlive
from measure import log, table
from process_memory import Sampler, pss_kib

MiB = 1024 * 1024
# How often the peak of the server's memory is read while a probe runs.
PEAK_EVERY = 0.02


# -- clients ----------------------------------------------------------------------------------------


def tls_connect(port: int, ctx: ssl.SSLContext, timeout: float = 10.0) -> ssl.SSLSocket:
    raw = socket.create_connection((servers.HOST, port), timeout=timeout)
    return ctx.wrap_socket(raw, server_hostname=servers.HOST)


def post_head(length: int) -> bytes:
    return (
        b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % length
    )


def closed_within(socks: list[ssl.SSLSocket], seconds: float, trickle: bytes | None = None) -> list[float]:
    """Seconds until the server closed each socket (inf if it did not within `seconds`).

    With `trickle`, every open socket is sent its next byte once a second (slowloris).
    """
    start = time.monotonic()
    closed = [float("inf")] * len(socks)
    position = 0
    next_send = start
    while time.monotonic() - start < seconds and any(c == float("inf") for c in closed):
        open_ = [s for i, s in enumerate(socks) if closed[i] == float("inf")]
        readable, _, _ = select.select(open_, [], [], 0.05)
        for sock in readable:
            i = socks.index(sock)
            try:
                data = sock.recv(65536)
            except (OSError, ssl.SSLError):
                data = b""
            if not data or b"408" in data or b"431" in data:
                closed[i] = time.monotonic() - start
        if trickle is not None and time.monotonic() >= next_send:
            byte = trickle[position % len(trickle) : position % len(trickle) + 1]
            position += 1
            next_send += 1.0
            for i, sock in enumerate(socks):
                if closed[i] == float("inf"):
                    try:
                        sock.sendall(byte)
                    except (OSError, ssl.SSLError):
                        closed[i] = time.monotonic() - start
    return closed


# -- probes -------------------------------------------------------------------------------------------


def poll_healthz(port: int, ctx: ssl.SSLContext, seconds: list[float], done: threading.Event) -> None:
    """GET /healthz every 50 ms until `done` (at most 2,000 times), appending each call's seconds
    (a timeout is a figure too: the 30 s waited)."""
    with KeepAlive(port, ctx, timeout=30) as conn:
        while not done.is_set() and len(seconds) < 2000:
            t = time.perf_counter()
            conn.call("GET", "/healthz")
            seconds.append(time.perf_counter() - t)
            time.sleep(0.05)


def big_pod_review(target: int = 1_400_000) -> bytes:
    words = ["timeout", "5"] * (target // 14)  # `"timeout","5",` is 14 bytes of JSON
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "wrapped", "namespace": "ml", "labels": {"trainguard.dev/role": "training"}},
        "spec": {"containers": [{"name": "t", "image": "x", "command": [*words, "torchrun", "train.py"]}]},
    }
    return inputs.review_body(pod, namespace="ml")


def nested_blocks_review(target: int = 3_000_000) -> bytes:
    """≈3 MB (the API server's request limit) of lists nested 95 deep, side by side: the slowest
    text for the nesting check, which takes a round of the whole text per level."""
    block = b"[" * 95 + b"]" * 95
    inner = b"[" + b",".join([block] * (target // (len(block) + 1))) + b"]"
    head = (
        b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",'
        b'"operation":"CREATE","object":{"apiVersion":"v1","kind":"Pod","metadata":{"name":"n"},"x":'
    )
    return head + inner + b"}}}"


def probe_big_pod(port: int, ctx: ssl.SSLContext, pid: int, body: bytes | None = None) -> dict[str, Any]:
    body = big_pod_review() if body is None else body
    healthz: list[float] = []
    done = threading.Event()
    poller = threading.Thread(target=poll_healthz, args=(port, ctx, healthz, done), daemon=True)
    with Sampler(pid, PEAK_EVERY) as mem, KeepAlive(port, ctx, timeout=120) as conn:
        poller.start()
        start = time.perf_counter()
        status, answer = conn.call("POST", "/validate", body)
        seconds = time.perf_counter() - start
        done.set()
        poller.join(30)
    response = json.loads(answer).get("response", {}) if status == 200 else {}
    return {
        "body_MB": round(len(body) / 1e6, 2),
        "status": status,
        "allowed": response.get("allowed"),
        "answer_s": round(seconds, 3),
        "healthz_max_s": round(max(healthz, default=float("nan")), 3),
        "healthz_median_s": round(measure.median(healthz), 3) if healthz else None,
        "healthz_n": len(healthz),
        "peak_rss_MiB": round(mem.peak_pss / 1024, 1),
    }


def _slow_small_reviews(limit: int = 63 * 1024) -> list[bytes]:
    """Reviews just under the inline size whose launch lines are the slowest to read per byte."""

    def pod(containers: list[list[str]]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "slow", "namespace": "ml", "labels": {"trainguard.dev/role": "training"}},
            "spec": {
                "containers": [
                    {
                        "name": f"t{i}",
                        "image": "x",
                        "command": c,
                        "resources": {"limits": {"nvidia.com/gpu": 8}},
                    }
                    for i, c in enumerate(containers)
                ]
            },
        }

    def fill(unit: str, size: int) -> str:
        return unit * max(1, size // len(unit))

    shapes = [
        lambda n: pod([["sh", "-c", fill("A=1; echo $A; ", n // 16) + "torchrun t.py"]] * 16),
        lambda n: pod([["sh", "-c", "torchrun --nnodes=2 t.py " + fill("\"a\\\"b\"'c'\\d$'\\x41' ", n)]]),
        lambda n: pod([["torchrun", "--nnodes=2", fill("$(", n), "t.py"]]),
    ]
    out = []
    for shape in shapes:
        n = limit // 2
        while True:  # grow to just under the limit
            body = inputs.review_body(shape(n), namespace="ml")
            if len(body) > limit * 0.95:
                break
            n = int(n * 1.05)
        while len(body) > limit:
            n = int(n * 0.98)
            body = inputs.review_body(shape(n), namespace="ml")
        out.append(body)
    return out


def probe_small_slow(port: int, ctx: ssl.SSLContext, clients: int, seconds: float) -> dict[str, Any]:
    bodies = _slow_small_reviews()
    healthz: list[float] = []
    answers: list[float] = []
    statuses: dict[int | str, int] = {}
    done = threading.Event()
    lock = threading.Lock()

    def post(i: int) -> None:
        with KeepAlive(port, ctx, timeout=30) as conn:
            k = i
            while not done.is_set():
                t = time.perf_counter()
                status = conn.post("/validate", bodies[k % len(bodies)])
                with lock:
                    answers.append(time.perf_counter() - t)
                    statuses[status] = statuses.get(status, 0) + 1
                k += 1

    poller = threading.Thread(target=poll_healthz, args=(port, ctx, healthz, done), daemon=True)
    posters = [threading.Thread(target=post, args=(i,), daemon=True) for i in range(clients)]
    poller.start()
    for thread in posters:
        thread.start()
    time.sleep(seconds)
    done.set()
    for thread in (*posters, poller):
        thread.join(35)
    with urllib.request.urlopen(f"https://{servers.HOST}:{port}/metrics", context=ctx, timeout=10) as resp:
        metrics = resp.read().decode()
    placements = {
        line.split('"')[1]: int(float(line.rsplit(" ", 1)[1]))
        for line in metrics.splitlines()
        if line.startswith("trainguard_admission_placements_total{")
    }
    return {
        "body_bytes": [len(b) for b in bodies],
        "answers": len(answers),
        "statuses": statuses,
        "answer_median_s": round(measure.median(answers), 3) if answers else None,
        "answer_max_s": round(max(answers, default=float("nan")), 3),
        "healthz_max_s": round(max(healthz, default=float("nan")), 3),
        "healthz_median_s": round(measure.median(healthz), 3) if healthz else None,
        "healthz_n": len(healthz),
        "placements": placements,
    }


def probe_headers(port: int, ctx: ssl.SSLContext, pid: int) -> dict[str, Any]:
    before = pss_kib(pid)
    sent = 0
    with Sampler(pid, PEAK_EVERY) as mem, tls_connect(port, ctx) as sock:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Endless: ")
        with contextlib.suppress(OSError, ssl.SSLError):
            while sent < 16 * MiB:
                sock.sendall(b"a" * 65536)
                sent += 65536
        closed = closed_within([sock], 15)
    return {
        "sent_MiB": round(sent / MiB, 2),
        "closed_after_s": round(closed[0], 2),
        "rss_growth_MiB": round((mem.peak_pss - before) / 1024, 1),
    }


def probe_slow_connections(
    port: int, ctx: ssl.SSLContext, pid: int, count: int, first: Callable[[], bytes], trickle: bytes | None
) -> dict[str, Any]:
    before = pss_kib(pid)
    socks = []
    with Sampler(pid, PEAK_EVERY) as mem:
        for _ in range(count):
            sock = tls_connect(port, ctx)
            sock.sendall(first())
            socks.append(sock)
        closed = closed_within(socks, 30, trickle)
        for sock in socks:
            sock.close()
        time.sleep(2.0)  # what the server keeps once both sides have let go
        after = pss_kib(pid)
    finite = sorted(c for c in closed if c != float("inf"))
    return {
        "connections": count,
        "closed": len(finite),
        "closed_by_s_median": round(measure.median(finite), 2) if finite else None,
        "closed_by_s_max": round(finite[-1], 2) if finite else None,
        "rss_growth_peak_MiB": round((mem.peak_pss - before) / 1024, 1),
        "rss_growth_after_MiB": round((after - before) / 1024, 1),
    }


def probe_deep(port: int, ctx: ssl.SSLContext) -> dict[str, Any]:
    deep = (
        b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",'
        b'"operation":"CREATE","object":{},"kind":' + b'{"kind":' * 990 + b'"Pod"' + b"}" * 991 + b"}"
    )
    valid = inputs.review_body(inputs.big_training_pod())
    with KeepAlive(port, ctx, timeout=30) as conn:
        outcomes = [conn.post("/validate", body) for body in (deep, valid)]
    return {"deep_status": outcomes[0], "then_same_connection": outcomes[1]}


def probe_peak(port: int, ctx: ssl.SSLContext, pid: int, clients: int, seconds: float) -> dict[str, Any]:
    body = inputs.padded_review(int(2.8 * MiB))
    statuses: dict[int | str, int] = {}
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client() -> None:
        with KeepAlive(port, ctx, timeout=60) as conn:
            for _ in range(10_000):
                if time.monotonic() > stop:
                    return
                status = conn.post("/validate", body)
                with lock:
                    statuses[status] = statuses.get(status, 0) + 1

    before = pss_kib(pid)
    with Sampler(pid, PEAK_EVERY) as mem:
        threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(seconds + 60)
    return {
        "clients": clients,
        "body_MiB": round(len(body) / MiB, 2),
        "statuses": statuses,
        "rss_at_rest_MiB": round(before / 1024, 1),
        "peak_rss_MiB": round(mem.peak_pss / 1024, 1),
    }


def probe_sequential(port: int, ctx: ssl.SSLContext, count: int) -> dict[str, Any]:
    """The common path, for comparison: keep-alive /validate of the 11.6 KB Pod, one at a time."""
    body = inputs.review_body(inputs.big_training_pod())
    times = []
    with KeepAlive(port, ctx, timeout=30) as conn:
        for _ in range(count):
            start = time.perf_counter()
            conn.post("/validate", body)
            times.append(time.perf_counter() - start)
    times.sort()
    return {
        "requests": count,
        "p50_ms": round(measure.percentile(times, 50) * 1000, 2),
        "p90_ms": round(measure.percentile(times, 90) * 1000, 2),
        "p99_ms": round(measure.percentile(times, 99) * 1000, 2),
    }


# -- stall: a well-behaved client beside connections that hold on to the server --------------------


def _attack(
    port: int, cafile: str, counts: dict[str, int], seconds: float, ready: Any, stop: Any, out: Any
) -> None:
    """Hold `counts` connections of each kind open for at most `seconds`, reopening each one the
    server closes (as an attacker would); runs in its own process, so that its TLS work does not
    share a GIL with the measured client. Puts {kind: {opened, closed, statuses}} on `out`."""
    ctx = ssl.create_default_context(cafile=cafile)
    deadline = time.monotonic() + seconds
    slowloris = b"OST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 4096
    withheld_part = b"{" + b"a" * (256 * 1024 - 1)

    def first_bytes(kind: str) -> bytes:
        if kind == "slowloris":
            return b"P"
        if kind == "no-body":
            return post_head(100_000)
        return post_head(3 * MiB) + withheld_part  # withheld: headers and 256 KiB of a 3 MiB body

    figures: dict[str, dict[str, Any]] = {kind: {"opened": 0, "closed": 0, "statuses": {}} for kind in counts}
    socks: dict[ssl.SSLSocket, list[Any]] = {}  # socket -> [kind, bytes of the slowloris line sent]

    def open_one(kind: str) -> None:
        try:
            sock = tls_connect(port, ctx, timeout=5)
            sock.settimeout(1.0)
            with contextlib.suppress(TimeoutError, ssl.SSLError, OSError):
                sock.sendall(first_bytes(kind))  # a withheld body's part may not all fit: so be it
            sock.setblocking(False)
        except (OSError, ssl.SSLError):
            return
        socks[sock] = [kind, 0]
        figures[kind]["opened"] += 1

    # Opened over the first seconds, as clients arrive; the measured client waits for `ready`.
    for i in range(max(counts.values(), default=0)):
        for kind, count in counts.items():
            if i < count:
                open_one(kind)
    ready.set()
    next_trickle = time.monotonic() + 1.0
    while time.monotonic() < deadline and not stop.is_set():
        readable, _, _ = select.select(list(socks), [], [], 0.05)
        for sock in readable:
            kind = socks[sock][0]
            try:
                data = sock.recv(65536)
            except ssl.SSLWantReadError:
                continue
            except (OSError, ssl.SSLError):
                data = b""
            if data.startswith(b"HTTP/1.1 "):
                status = data[9:12].decode("ascii", "replace")
                figures[kind]["statuses"][status] = figures[kind]["statuses"].get(status, 0) + 1
            figures[kind]["closed"] += 1
            del socks[sock]
            with contextlib.suppress(OSError):
                sock.close()
            open_one(kind)
        if time.monotonic() >= next_trickle:  # slowloris: one more byte of the headers per second
            next_trickle += 1.0
            for sock, state in list(socks.items()):
                if state[0] == "slowloris":
                    with contextlib.suppress(ssl.SSLWantWriteError, OSError, ssl.SSLError):
                        sock.send(slowloris[state[1] % len(slowloris) : state[1] % len(slowloris) + 1])
                        state[1] += 1
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.close()
    out.put(figures)


def well_behaved(port: int, ctx: ssl.SSLContext, body: bytes, rate: float, seconds: float) -> dict[str, Any]:
    """Reviews at a fixed rate (open loop: each is due at start + i/rate, and its latency counts
    from then, so a stall is charged to every review queued behind it) on 4 keep-alive connections."""
    count = int(rate * seconds)
    start = time.monotonic() + 0.2
    latencies: list[float] = []
    statuses: dict[int | str, int] = {}
    lock = threading.Lock()
    lanes = 4

    def lane(k: int) -> None:
        with KeepAlive(port, ctx, timeout=30) as conn:
            for i in range(k, count, lanes):
                due = start + i / rate
                with contextlib.suppress(ValueError):
                    time.sleep(max(0.0, due - time.monotonic()))
                status = conn.post("/validate", body)
                with lock:
                    latencies.append(time.monotonic() - due)
                    statuses[status] = statuses.get(status, 0) + 1

    threads = [threading.Thread(target=lane, args=(k,), daemon=True) for k in range(lanes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(seconds + 120)
    latencies.sort()
    return {
        "requests": len(latencies),
        "statuses": statuses,
        "p50_ms": round(measure.percentile(latencies, 50) * 1000, 2),
        "p99_ms": round(measure.percentile(latencies, 99) * 1000, 2),
        "max_ms": round(latencies[-1] * 1000, 2),
    }


def probe_stall(
    port: int,
    ctx: ssl.SSLContext,
    cafile: Path,
    counts: dict[str, int],
    rate: float,
    seconds: float,
    rounds: int,
) -> dict[str, Any]:
    """The client alone, then beside the attack, `rounds` times in turn; the medians of each."""
    import multiprocessing

    body = inputs.review_body(inputs.big_training_pod())
    well_behaved(port, ctx, body, rate, 2.0)  # warm: connections, caches
    alone: list[dict[str, Any]] = []
    attacked: list[dict[str, Any]] = []
    attacks: list[dict[str, Any]] = []
    mp = multiprocessing.get_context("fork")
    for r in range(rounds):
        log(f"abuse: stall round {r + 1}/{rounds}: alone")
        alone.append(well_behaved(port, ctx, body, rate, seconds))
        log(f"abuse: stall round {r + 1}/{rounds}: beside {counts}")
        ready, stop, out = mp.Event(), mp.Event(), mp.Queue()
        attacker = mp.Process(
            target=_attack, args=(port, str(cafile), counts, seconds + 120, ready, stop, out), daemon=True
        )
        attacker.start()
        ready.wait(120)
        attacked.append(well_behaved(port, ctx, body, rate, seconds))
        stop.set()
        attacks.append(out.get(timeout=60))
        attacker.join(30)
    with urllib.request.urlopen(f"https://{servers.HOST}:{port}/metrics", context=ctx, timeout=10) as resp:
        rejected = {
            line.split('reason="')[1].split('"')[0]: int(float(line.rsplit(" ", 1)[1]))
            for line in resp.read().decode().splitlines()
            if line.startswith("trainguard_admission_rejected_requests_total{")
        }

    def med(runs: list[dict[str, Any]], key: str) -> float:
        return round(measure.median([run[key] for run in runs]), 2)

    attacked_429 = sum(run["statuses"].get(429, 0) for run in attacked)
    p99_ratio = med(attacked, "p99_ms") / med(alone, "p99_ms")
    return {
        "rate": rate,
        "seconds": seconds,
        "rounds": rounds,
        "attack": counts,
        "alone_p50_ms_median": med(alone, "p50_ms"),
        "alone_p99_ms_median": med(alone, "p99_ms"),
        "attacked_p50_ms_median": med(attacked, "p50_ms"),
        "attacked_p99_ms_median": med(attacked, "p99_ms"),
        "p99_ratio": round(p99_ratio, 2),
        "attacked_429": attacked_429,
        "attacked_non_200": sum(n for run in attacked for s, n in run["statuses"].items() if s != 200),
        "verdict": "ok"
        if attacked_429 == 0 and p99_ratio <= 2.0
        else "MISSED (target: 0 x 429, p99 within 2x)",
        "alone": alone,
        "attacked": attacked,
        "attacker_connections": attacks,
        "server_rejections_by_reason": rejected,
    }


@contextlib.contextmanager
def server(workers: int, tmp: Path, name: str) -> Iterator[tuple[servers.Server, ssl.SSLContext]]:
    port = servers.free_port()
    # --workers 0: leave the option out (a tree without it, for comparisons).
    s = servers.trainguard_server(port, tmp / "certs", tmp / f"{name}.log", workers=workers or None)
    with s:
        time.sleep(0.5)  # every worker up, not just the first that answered /readyz
        yield s, ssl.create_default_context(cafile=str(tmp / "certs" / "ca.crt"))


def run(
    quick: bool,
    workers: int = 2,
    max_in_flight: int = 8,
    only: set[str] | None = None,
    stall_seconds: float = 30.0,
    stall_rounds: int = 3,
) -> dict[str, Any]:
    results: dict[str, Any] = {"workers": workers, "loadavg": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="trainguard-abuse-") as d:
        tmp = Path(d)
        servers.make_certs(tmp / "certs")
        probes: list[tuple[str, Callable[[servers.Server, ssl.SSLContext], dict[str, Any]]]] = [
            ("big-pod", lambda s, c: probe_big_pod(s.port, c, s.pid)),
            ("nested-3MB", lambda s, c: probe_big_pod(s.port, c, s.pid, nested_blocks_review())),
            ("headers-16MiB", lambda s, c: probe_headers(s.port, c, s.pid)),
            (
                "slowloris",
                lambda s, c: probe_slow_connections(
                    s.port,
                    c,
                    s.pid,
                    50 if quick else 200,
                    lambda: b"P",
                    b"OST /validate HTTP/1.1\r\nX: " + b"a" * 64,
                ),
            ),
            (
                "no-body",
                lambda s, c: probe_slow_connections(s.port, c, s.pid, 20, lambda: post_head(1000), None),
            ),
            (
                "withheld",
                lambda s, c: probe_slow_connections(
                    s.port,
                    c,
                    s.pid,
                    10 if quick else 40,
                    lambda: post_head(3 * MiB) + b"a" * (3 * MiB - 1),
                    None,
                ),
            ),
            ("deep", lambda s, c: probe_deep(s.port, c)),
            ("small-slow", lambda s, c: probe_small_slow(s.port, c, max_in_flight, 5 if quick else 10)),
            ("sequential", lambda s, c: probe_sequential(s.port, c, 500 if quick else 2000)),
            ("peak", lambda s, c: probe_peak(s.port, c, s.pid, workers * max_in_flight, 5 if quick else 10)),
            (
                "stall",
                lambda s, c: probe_stall(
                    s.port,
                    c,
                    tmp / "certs" / "ca.crt",
                    {"no-body": 200, "slowloris": 200, "withheld": 40},
                    50.0,
                    10.0 if quick else stall_seconds,
                    1 if quick else stall_rounds,
                ),
            ),
        ]
        for name, probe in probes:
            if only and name not in only:
                continue
            log(f"abuse: {name}")
            with server(workers, tmp, name) as (s, ctx):
                results[name] = probe(s, ctx)
    rows = [(name, json.dumps(value)) for name, value in results.items() if isinstance(value, dict)]
    print(
        table(
            f"abuse probes ({workers} workers, load average {results['loadavg']})", ["probe", "figures"], rows
        )
    )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=2, help="0: do not pass --workers")
    parser.add_argument("--only", help="comma-separated probe names")
    parser.add_argument("--stall-seconds", type=float, default=30.0, help="stall: seconds of each run")
    parser.add_argument("--stall-rounds", type=int, default=3, help="stall: alone/attacked pairs")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    command = "python tests/bench/bench_abuse.py " + " ".join(sys.argv[1:])
    results = run(
        args.quick, args.workers, only=only, stall_seconds=args.stall_seconds, stall_rounds=args.stall_rounds
    )
    results["command"] = command.strip()
    results["loadavg_after"] = os.getloadavg()
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

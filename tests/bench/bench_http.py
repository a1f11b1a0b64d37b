"""HTTP: trainguard's webhook against the no-op floor, side by side in one run; then its memory.

Both servers run at once, each one uvicorn worker on the same stack (Starlette, uvicorn with
httptools and uvloop, TLS with the same certificate, orjson), and are loaded in turn, A/B/A/B:

* throughput: wrk (closed loop, one thread, a few keep-alive connections) cycling through the
  same AdmissionReview bodies, each POSTed to /validate and to /mutate; the Go load generator in
  closed-loop mode where wrk is missing;
* latency at a fixed rate: the Go load generator (open loop, latency from each request's due time);
* the server's CPU seconds per request (from /proc), which other processes on the machine disturb
  much less than requests per second;
* memory: VmRSS and VmHWM of the trainguard worker after all of that load.

    python tests/bench/bench_http.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import inputs
import measure
import servers
from measure import log, median, table


def write_bodies(path: Path) -> list[tuple[str, int]]:
    bodies = inputs.bench_bodies()
    with open(path, "wb") as fh:
        for _, body in bodies:
            fh.write(body + b"\n")
    return [(label, len(body)) for label, body in bodies]


def _throughput(server: servers.Server, bodies: Path, seconds: float, connections: int) -> dict[str, Any]:
    cpu0 = server.cpu_seconds()
    if servers.wrk_binary():
        out = servers.run_wrk(server.url, bodies, seconds, connections=connections)
        out["tool"] = "wrk"
    else:
        res = servers.run_loadgen(
            server.url, bodies, rate=0, seconds=seconds, connections=connections, ca=server.ca
        )
        out = {
            "rps": res["achieved_rps"],
            "requests": res["requests"],
            "non_2xx": res["non_200"],
            "errors": res["errors"],
            "tool": "loadgen (closed loop)",
        }
    out["server_cpu_ms_per_request"] = (server.cpu_seconds() - cpu0) * 1000 / max(1, out["requests"])
    return out


def _latency(server: servers.Server, bodies: Path, rate: float, seconds: float) -> dict[str, Any]:
    cpu0 = server.cpu_seconds()
    res = servers.run_loadgen(server.url, bodies, rate=rate, seconds=seconds, connections=64, ca=server.ca)
    res["server_cpu_ms_per_request"] = (server.cpu_seconds() - cpu0) * 1000 / max(1, res["requests"])
    return res


def engine_split(bodies: list[bytes], rounds: int = 9) -> dict[str, float]:
    """In process, what the engine costs per call on the bodies the servers were sent, cycled through
    as the load generator does (each to /validate's and /mutate's engine call, decoded afresh), and
    how much of it the CEL runtime takes (evaluation and the conversion of what it reads). CPU ms
    per call, the least over `rounds` passes: other work on a shared machine only ever adds to a
    pass. The server's engine runs colder than this loop (the HTTP stack runs between calls), so
    the split is a floor, not the server's own figure."""
    import time

    import orjson

    from webhook.engine import AdmissionInput

    engine = inputs.engine_for("cel-expr-python")
    calls = [(body, kw) for body in bodies for kw in ({"mutate": False}, {"validate": False})]

    def one_pass() -> None:
        for body, kw in calls:
            obj = orjson.loads(body)["request"]["object"]
            engine.decide(AdmissionInput(object=obj, namespace="default"), **kw)

    one_pass()
    totals, cels = [], []
    for _ in range(rounds):
        start = time.thread_time()
        one_pass()
        totals.append((time.thread_time() - start) * 1000 / len(calls))
        with measure.cel_runtime_seconds() as in_cel:
            one_pass()
        cels.append(in_cel[0] * 1000 / len(calls))
    return {"engine_cpu_ms_per_call": min(totals), "cel_cpu_ms_per_call": min(cels)}


def run(
    quick: bool = False,
    workdir: Path | None = None,
    rate: float = 500.0,
    extra_rates: tuple[float, ...] | None = None,
) -> dict[str, Any]:
    """`rate`: the fixed rate of the latency bar; `extra_rates`: more fixed rates, each reported
    as p50/p99 added (default: 100 req/s in the full run, none in the quick one)."""
    rounds = 3 if quick else 5
    tput_seconds = 2.0 if quick else 10.0
    lat_seconds = 3.0 if quick else 15.0
    if extra_rates is None:
        extra_rates = () if quick else (100.0,)
    connections = 8
    tmp = tempfile.TemporaryDirectory(prefix="trainguard-bench-http-")
    work = workdir or Path(tmp.name)
    try:
        bodies = work / "bodies.jsonl"
        sizes = write_bodies(bodies)
        certs = servers.make_certs(work / "certs")
        servers.loadgen_binary()  # build before the clock matters
        noop = servers.noop_server(servers.free_port(), certs, work / "noop.log")
        tg = servers.trainguard_server(servers.free_port(), certs, work / "trainguard.log")
        with noop, tg:
            rss_idle = tg.status()
            arms = {"noop": noop, "trainguard": tg}
            log(
                f"http: warming up both servers ({len(sizes)} bodies, {min(s for _, s in sizes)}–"
                f"{max(s for _, s in sizes)} bytes)"
            )
            for server in arms.values():
                _throughput(server, bodies, 1.0 if quick else 3.0, connections)
            tput: dict[str, list[dict[str, Any]]] = {name: [] for name in arms}
            lat: dict[str, list[dict[str, Any]]] = {name: [] for name in arms}
            for r in range(rounds):
                for name, server in arms.items():  # A/B/A/B …
                    res = _throughput(server, bodies, tput_seconds, connections)
                    tput[name].append(res)
                    log(f"http: round {r + 1}/{rounds} throughput {name}: {res['rps']:.0f} req/s")
            for r in range(rounds):
                for name, server in arms.items():
                    res = _latency(server, bodies, rate, lat_seconds)
                    lat[name].append(res)
                    log(
                        f"http: round {r + 1}/{rounds} latency @{rate:.0f}/s {name}: "
                        f"p50 {res['latency_ms']['p50']:.2f} ms p99 {res['latency_ms']['p99']:.2f} ms"
                    )
            extra: dict[float, dict[str, list[dict[str, Any]]]] = {}
            for extra_rate in extra_rates:
                extra[extra_rate] = {name: [] for name in arms}
                for _ in range(max(2, rounds - 2)):
                    for name, server in arms.items():
                        extra[extra_rate][name].append(_latency(server, bodies, extra_rate, lat_seconds))
                log(f"http: latency @{extra_rate:.0f}/s done")
            rss_loaded = tg.status()
            noop_rss = noop.status()
        log("http: the engine in process on the same bodies")
        split = engine_split([body for _, body in inputs.bench_bodies()])
    finally:
        if workdir is None:
            tmp.cleanup()

    def med(name: str, key: str, rows: dict[str, list[dict[str, Any]]], sub: str | None = None) -> float:
        return median(r[key][sub] if sub else r[key] for r in rows[name])

    noop_rps, policy_rps = med("noop", "rps", tput), med("trainguard", "rps", tput)
    ratios = [t["rps"] / n["rps"] for n, t in zip(tput["noop"], tput["trainguard"], strict=True)]
    lat_rows = []
    for name in ("noop", "trainguard"):
        lat_rows.append(
            [
                name,
                med(name, "achieved_rps", lat),
                med(name, "latency_ms", lat, "p50"),
                med(name, "latency_ms", lat, "p90"),
                med(name, "latency_ms", lat, "p99"),
                med(name, "latency_ms", lat, "max"),
                med(name, "server_cpu_ms_per_request", lat),
                sum(r["errors"] + r["non_200"] for r in lat[name]),
            ]
        )
    p50_added = lat_rows[1][2] - lat_rows[0][2]
    p99_added = lat_rows[1][4] - lat_rows[0][4]
    tool = tput["noop"][0]["tool"]
    print(
        table(
            f"HTTP throughput, closed loop ({tool}, 1 thread, {connections} connections, "
            f"{tput_seconds:.0f} s x "
            f"{rounds} rounds A/B; medians)",
            ["server", "req/s", "min", "max", "server CPU ms/req", "non-2xx+errors"],
            [
                [
                    name,
                    med(name, "rps", tput),
                    min(r["rps"] for r in tput[name]),
                    max(r["rps"] for r in tput[name]),
                    med(name, "server_cpu_ms_per_request", tput),
                    sum(r["non_2xx"] + r["errors"] for r in tput[name]),
                ]
                for name in ("noop", "trainguard")
            ],
        )
    )
    print(
        f"throughput ratio trainguard / no-op: {policy_rps / noop_rps:.3f} (median of medians); "
        f"per-round ratios {', '.join(f'{x:.3f}' for x in ratios)}\n"
    )
    noop_cpu = med("noop", "server_cpu_ms_per_request", tput)
    policy_cpu = med("trainguard", "server_cpu_ms_per_request", tput)
    engine_cpu, cel_cpu = split["engine_cpu_ms_per_call"], split["cel_cpu_ms_per_call"]
    print(
        table(
            "Where a request's server CPU goes (ms per request; the engine measured in process on the "
            "same bodies, best of 9 passes: warmer than the server runs it)",
            ["part", "CPU ms"],
            [
                ["no-op server: TLS, HTTP, ASGI, JSON in and out", noop_cpu],
                ["trainguard server", policy_cpu],
                ["  beyond the no-op", policy_cpu - noop_cpu],
                ["    the engine, in process", engine_cpu],
                ["      in the CEL runtime (evaluation, conversion)", cel_cpu],
                ["      adapters, views, bookkeeping (Python)", engine_cpu - cel_cpu],
                [
                    "    the rest: the app's checks, metrics, logs; a colder engine",
                    policy_cpu - noop_cpu - engine_cpu,
                ],
                ["  what a throughput ratio of 0.5 allows beyond the no-op", noop_cpu],
            ],
        )
    )
    print()
    print(
        table(
            f"HTTP latency at a fixed {rate:.0f} req/s (Go open-loop generator, "
            f"{lat_seconds:.0f} s x {rounds} rounds; "
            "medians, ms, from each request's due time)",
            ["server", "achieved/s", "p50", "p90", "p99", "max", "server CPU ms/req", "errors"],
            lat_rows,
        )
    )
    print(f"added by trainguard: p50 {p50_added:+.3f} ms, p99 {p99_added:+.3f} ms\n")
    extra_out: dict[str, float] = {}
    for extra_rate, rows_by_arm in extra.items():
        rows = [
            [
                name,
                med(name, "achieved_rps", rows_by_arm),
                med(name, "latency_ms", rows_by_arm, "p50"),
                med(name, "latency_ms", rows_by_arm, "p99"),
                med(name, "server_cpu_ms_per_request", rows_by_arm),
            ]
            for name in ("noop", "trainguard")
        ]
        print(
            table(
                f"HTTP latency at a fixed {extra_rate:.0f} req/s "
                f"(medians of {len(rows_by_arm['noop'])} rounds, ms)",
                ["server", "achieved/s", "p50", "p99", "server CPU ms/req"],
                rows,
            )
        )
        tag = f"{extra_rate:.0f}"
        extra_out[f"p50_added_ms_at_{tag}"] = round(rows[1][2] - rows[0][2], 3)
        extra_out[f"p99_added_ms_at_{tag}"] = round(rows[1][3] - rows[0][3], 3)
        print(
            f"added by trainguard at {tag} req/s: p50 {extra_out[f'p50_added_ms_at_{tag}']:+.3f} ms, "
            f"p99 {extra_out[f'p99_added_ms_at_{tag}']:+.3f} ms\n"
        )
    print(
        table(
            "Memory of one trainguard serve worker (kB, /proc/PID/status)",
            ["when", "VmRSS", "VmHWM"],
            [
                ["after start-up", rss_idle["VmRSS"], rss_idle["VmHWM"]],
                ["after the load above", rss_loaded["VmRSS"], rss_loaded["VmHWM"]],
                ["(no-op server, after load)", noop_rss["VmRSS"], noop_rss["VmHWM"]],
            ],
        )
    )
    return {
        "noop_rps": round(noop_rps, 1),
        "policy_rps": round(policy_rps, 1),
        "throughput_ratio": round(policy_rps / noop_rps, 4),
        "throughput_ratio_rounds": [round(x, 4) for x in ratios],
        "noop_cpu_ms_per_request": round(med("noop", "server_cpu_ms_per_request", tput), 4),
        "policy_cpu_ms_per_request": round(med("trainguard", "server_cpu_ms_per_request", tput), 4),
        "engine_cpu_ms_per_call": round(engine_cpu, 4),
        "cel_cpu_ms_per_call": round(cel_cpu, 4),
        "latency_rate": rate,
        "noop_p50_ms": round(lat_rows[0][2], 3),
        "noop_p99_ms": round(lat_rows[0][4], 3),
        "policy_p50_ms": round(lat_rows[1][2], 3),
        "policy_p99_ms": round(lat_rows[1][4], 3),
        "p50_added_ms": round(p50_added, 3),
        "p99_added_ms": round(p99_added, 3),
        "rss_mb": round(rss_loaded["VmRSS"] / 1024, 1),
        "rss_hwm_mb": round(rss_loaded["VmHWM"] / 1024, 1),
        "rss_idle_mb": round(rss_idle["VmRSS"] / 1024, 1),
        "http_bodies": len(sizes),
        "http_tool": tool,
        **extra_out,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rate", type=float, default=500.0, help="fixed rate of the latency bar (req/s)")
    parser.add_argument("--extra-rate", type=float, action="append", help="more fixed rates to report")
    args = parser.parse_args()
    extra = tuple(args.extra_rate) if args.extra_rate else None
    print(json.dumps(run(args.quick, rate=args.rate, extra_rates=extra)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""HTTP in instructions: what one admission costs the whole server process, trainguard against the
no-op floor, counted by callgrind instead of timed, so that a shared machine's load does not move it.

Each server (the same two `bench_http.py` loads: `noop_app.py` and `trainguard serve`, one worker,
the same certificate) runs under `valgrind --tool=callgrind` with instrumentation off. Once it is
ready and has answered every body once, instrumentation is turned on, the bench bodies are POSTed
in turn to /validate and /mutate over one keep-alive TLS connection, and it is turned off again.
A server also works while idle (uvicorn's tick), and under valgrind a request takes tens of
milliseconds of wall time, so the same wall time spent idle is counted too and taken off;
trainguard's policy-file poll is set to once an hour for the same reason, and its inline slice
to 3 s (a request under valgrind takes longer than the 20 ms after which a decision moves to a
thread and starts again there, which at full speed it does not). What the kernel does for a
request (sockets, epoll) is not counted, for either server.

The CEL runtime's share is read from trainguard's profile: the inclusive cost of its evaluation
entry point, which includes converting the values an evaluation reads.

What a throughput ratio of 0.5 to the no-op needs, in these units: trainguard's count per
request at most twice the no-op's, so everything trainguard adds fits in one no-op request.

    python tests/bench/count_http.py [--requests 100]
    PYTHONPATH=OTHER_TREE python tests/bench/count_http.py   # another tree's servers, the same way

Needs valgrind (Debian package) and about 3 minutes per server on 2 cores.
"""

from __future__ import annotations

import argparse
import http.client
import re
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import inputs
import servers
from measure import log, table

# callgrind_annotate names: the C++ runtime's evaluation of one program (a phase program or a
# policy's), and its lazy conversion of a Python value the evaluation reads.
_EVALUATION = "ProgramImpl::TraceImpl"
_CONVERSION = "PyCelValueProvider::Provide"


def _under_callgrind(server: servers.Server, out: Path) -> servers.Server:
    argv = [
        "env",
        "PYTHONHASHSEED=0",  # the same dict and set layouts run to run
        "valgrind",
        "--tool=callgrind",
        "--instr-atstart=no",
        "--dump-instr=no",
        f"--callgrind-out-file={out}.%p",
        *server.argv,
    ]
    return servers.Server(server.name, argv, server.port, server.ca, server.log_path)


def _control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args], check=True, capture_output=True, timeout=120)


def _sender(server: servers.Server, bodies: list[bytes]) -> Callable[[int], None]:
    context = ssl.create_default_context(cafile=str(server.ca))
    conn = http.client.HTTPSConnection(servers.HOST, server.port, context=context, timeout=300)
    requests = [(path, body) for body in bodies for path in ("/validate", "/mutate")]

    def send(n: int) -> None:
        for i in range(n):
            path, body = requests[i % len(requests)]
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"{server.name} {path}: HTTP {response.status}")

    return send


def _counted(out: Path, pid: int, action: Callable[[], None]) -> tuple[float, dict[str, int]]:
    """(wall seconds, {"total": Ir, "evaluation": Ir, "conversion": Ir}) of `action`, one dump."""
    before = set(out.parent.glob(f"{out.name}.{pid}*"))
    _control("-i", "on", str(pid))
    start = time.monotonic()
    action()
    seconds = time.monotonic() - start
    _control("-i", "off", str(pid))
    _control("-d", str(pid))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        new = set(out.parent.glob(f"{out.name}.{pid}.*")) - before
        if new:
            time.sleep(0.5)  # written whole before the next poll
            return seconds, _read_dump(max(new, key=lambda p: p.stat().st_mtime))
        time.sleep(0.2)
    raise RuntimeError(f"no callgrind dump from {pid}")


def _read_dump(path: Path) -> dict[str, int]:
    text = path.read_text(errors="replace")
    totals = re.findall(r"^(?:totals|summary): (\d+)", text, re.M)
    out = {"total": int(totals[-1]) if totals else 0}
    annotated = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(path)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    for key, name in (("evaluation", _EVALUATION), ("conversion", _CONVERSION)):
        # The first line naming the function, not a recursive entry ('2): its inclusive count.
        match = re.search(rf"^\s*([\d,]+) \([ \d.]+%\)  .*?{re.escape(name)}\(", annotated, re.M)
        out[key] = int(match.group(1).replace(",", "")) if match else 0
    return out


def _worker_pid(server: servers.Server) -> int:
    """The process that answers: `trainguard serve` forks its worker (valgrind follows the fork)."""
    assert server.proc is not None
    children = Path(f"/proc/{server.pid}/task/{server.pid}/children")
    pids = [int(p) for p in children.read_text().split()] if children.exists() else []
    return pids[0] if pids else server.pid


def count(server: servers.Server, work: Path, bodies: list[bytes], requests: int) -> dict[str, float]:
    out = work / f"callgrind.{server.name}"
    traced = _under_callgrind(server, out)
    traced.start(timeout=900)
    try:
        pid = _worker_pid(traced)
        send = _sender(traced, bodies)
        send(2 * len(bodies))  # every body to both endpoints once: caches and first-call work
        busy_seconds, busy = _counted(out, pid, lambda: send(requests))
        _, idle = _counted(out, pid, lambda: time.sleep(busy_seconds))
    finally:
        traced.stop(timeout=120)
    per_request = {key: value / requests for key, value in busy.items()}
    per_request["idle"] = idle["total"] / requests
    per_request["net"] = per_request["total"] - per_request["idle"]
    return per_request


def measure(tree: str, requests: int) -> dict[str, dict[str, float]]:
    bodies = [body for _, body in inputs.bench_bodies()]
    with tempfile.TemporaryDirectory(prefix="trainguard-count-http-") as tmp:
        work = Path(tmp)
        certs = servers.make_certs(work / "certs")
        arms = {
            "no-op": servers.noop_server(servers.free_port(), certs, work / "noop.log"),
            # The policy-file poll (every 2 s by default, on a thread) is work per second, not per
            # request: under valgrind it would land on the requests of whichever second it ran in.
            # And valgrind runs a decision some 50 times slower, past the 20 ms inline slice: it
            # would defer to a thread and be decided twice, which the server never does at speed.
            "trainguard": servers.trainguard_server(
                servers.free_port(),
                certs,
                work / "trainguard.log",
                extra=["--reload-interval", "3600", "--inline-slice", "3", "--request-budget", "60"],
            ),
        }
        result = {}
        for name, server in arms.items():
            log(f"{tree}: {name} under callgrind, {requests} requests …")
            result[name] = count(server, work, bodies, requests)
    return result


def _rows(result: dict[str, dict[str, float]]) -> list[list[Any]]:
    noop, tg = result["no-op"], result["trainguard"]
    k = 1000.0
    return [
        ["no-op server, per request", noop["net"] / k],
        ["trainguard, per request", tg["net"] / k],
        ["  of which the CEL runtime: evaluation, with conversion", tg["evaluation"] / k],
        ["    of which converting the values read", tg["conversion"] / k],
        ["trainguard beyond the no-op", (tg["net"] - noop["net"]) / k],
        ["what a throughput ratio of 0.5 allows beyond the no-op", noop["net"] / k],
        ["no-op / trainguard (the throughput ratio, if CPU followed instructions)", noop["net"] / tg["net"]],
        [
            "idle work taken off, per request (trainguard / no-op)",
            f"{tg['idle'] / k:.0f} / {noop['idle'] / k:.0f}",
        ],
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100, help="requests counted per server")
    args = parser.parse_args(argv)
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not on PATH (Debian package valgrind)")
    rows = _rows(measure(str(servers.code_root()), args.requests))
    print(
        table("Instructions per admission, whole server process (thousands; callgrind)", ["", "value"], rows)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

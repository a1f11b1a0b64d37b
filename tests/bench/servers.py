"""Processes the HTTP benchmarks run: webhook servers on 127.0.0.1, wrk, and the Go load generator.

Every server is started on a free loopback port with its output in a log file, waited for on
/readyz over TLS, and stopped by its own pid (SIGTERM, then SIGKILL after a timeout).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from inputs import BENCH_DIR
from measure import log

HOST = "127.0.0.1"
LOADGEN_DIR = BENCH_DIR / "loadgen"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def code_root() -> Path:
    """Where the `webhook` package this process imports lives: children run the same code."""
    import webhook

    return Path(webhook.__file__).resolve().parents[1]


# Where children run: `python -m webhook` puts its working directory first on sys.path, so run
# from a checkout it would import that checkout's code whatever PYTHONPATH names.
NEUTRAL_DIR = tempfile.gettempdir()


def python_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(code_root())
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for key in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(key, None)
    return env


def make_certs(out: Path) -> Path:
    """ca.crt, tls.crt, tls.key for 127.0.0.1 in `out`, made by `trainguard certs`."""
    subprocess.run(
        [sys.executable, "-m", "webhook", "certs", "--out", str(out), "--host", HOST],
        check=True,
        env=python_env(),
        cwd=NEUTRAL_DIR,
        stdout=subprocess.DEVNULL,
        timeout=60,
    )
    return out


class Server:
    """One server process; `with Server(...) as s:` starts it and waits until /readyz says 200."""

    def __init__(self, name: str, argv: list[str], port: int, ca: Path, log_path: Path) -> None:
        self.name = name
        self.argv = argv
        self.port = port
        self.ca = ca
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self, timeout: float = 60.0) -> None:
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=python_env(), cwd=NEUTRAL_DIR
            )
        context = ssl.create_default_context(cafile=str(self.ca))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"{self.name} not ready after {timeout}s: {self.tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def status(self) -> dict[str, int]:
        """VmRSS, VmHWM (kB) from /proc/PID/status."""
        out = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0])
        return out

    def cpu_seconds(self) -> float:
        """User + system CPU seconds the process and its live descendants have used so far
        (/proc/PID/stat): `serve` decides in a worker process it forks (recycling needs a
        supervisor), whose time the supervisor's own fields do not hold until it exits."""
        stats = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                except OSError:  # gone meanwhile
                    continue
                stats[int(entry.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
        tree = {self.pid}
        grew = True
        while grew:
            grew = False
            for pid, (ppid, _) in stats.items():
                if ppid in tree and pid not in tree:
                    tree.add(pid)
                    grew = True
        ticks = sum(stats[pid][1] for pid in tree if pid in stats)
        return ticks / os.sysconf("SC_CLK_TCK")


def trainguard_server(
    port: int,
    certs: Path,
    log_path: Path,
    extra: list[str] | None = None,
    workers: int | None = 1,
    recycle: bool = False,
) -> Server:
    """`trainguard serve` on `port`; one worker process, as the no-op floor runs, so that figures are
    per worker (None, or a tree from before --workers: the option is left out). With one worker
    and no `recycle`, recycling is off too: a recycling server is a supervisor and its worker, and
    the figures read from the pid would be the supervisor's."""
    # The flags of the tree under test (an older one may lack them), read from its source.
    flags = (code_root() / "webhook" / "cli" / "serve.py").read_text()
    if "--workers" not in flags:
        workers = None
    one_process = workers == 1 and not recycle and "--recycle-after" in flags
    argv = [
        sys.executable,
        "-m",
        "webhook",
        "serve",
        *_listen(port, certs),
        "--shutdown-delay",
        "0",
        *(["--workers", str(workers)] if workers is not None else []),
        *(["--recycle-after", "0"] if one_process else []),
        *(extra or []),
    ]
    return Server("trainguard", argv, port, certs / "ca.crt", log_path)


def _listen(port: int, certs: Path) -> list[str]:
    """Where both servers listen, and the certificate they serve (their options are the same)."""
    return [
        "--host",
        HOST,
        "--port",
        str(port),
        "--tls-cert",
        str(certs / "tls.crt"),
        "--tls-key",
        str(certs / "tls.key"),
    ]


def noop_server(port: int, certs: Path, log_path: Path, mutate_patch: Path | None = None) -> Server:
    """noop_app.py; with `mutate_patch`, its /mutate answers with that JSON patch file."""
    argv = [
        sys.executable,
        str(BENCH_DIR / "noop_app.py"),
        *_listen(port, certs),
        *(["--mutate-patch", str(mutate_patch)] if mutate_patch else []),
    ]
    return Server("no-op", argv, port, certs / "ca.crt", log_path)


# -- load generators ---------------------------------------------------------------------------------


def wrk_binary() -> str | None:
    return shutil.which("wrk")


def run_wrk(url: str, bodies: Path, seconds: float, connections: int = 8, threads: int = 1) -> dict[str, Any]:
    """Closed-loop throughput with wrk and bodies.lua; the script's JSON summary line."""
    wrk = wrk_binary()
    assert wrk is not None
    argv = [
        wrk,
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "-s",
        str(BENCH_DIR / "bodies.lua"),
        url,
        "--",
        str(bodies),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=True)
    line = next(ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{"))
    out: dict[str, Any] = json.loads(line)
    out["rps"] = out["requests"] / (out["duration_us"] / 1e6)
    out["errors"] = sum(out[k] for k in ("connect_errors", "read_errors", "write_errors", "timeouts"))
    return out


def go_binary() -> str | None:
    return shutil.which("go") or (
        str(Path("/usr/local/go/bin/go")) if Path("/usr/local/go/bin/go").exists() else None
    )


def loadgen_binary() -> Path:
    """The Go load generator (standard library only), built on first use into a cache directory."""
    digest = hashlib.sha256()
    for name in ("go.mod", "main.go"):
        digest.update((LOADGEN_DIR / name).read_bytes())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trainguard-bench"
    binary = cache / f"loadgen-{digest.hexdigest()[:12]}"
    if binary.exists():
        return binary
    go = go_binary()
    if go is None:
        raise RuntimeError("the fixed-rate latency benchmark needs Go (go on PATH or /usr/local/go/bin/go)")
    cache.mkdir(parents=True, exist_ok=True)
    log(f"building the load generator with {go} …")
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod", GOTOOLCHAIN="local")
    tmp = binary.with_suffix(".tmp")
    subprocess.run([go, "build", "-o", str(tmp), "."], cwd=LOADGEN_DIR, env=env, check=True, timeout=600)
    tmp.rename(binary)
    return binary


def run_loadgen(
    url: str,
    bodies: Path,
    *,
    rate: float,
    seconds: float,
    connections: int = 64,
    ca: Path | None = None,
    warmup: float = 0.0,
) -> dict[str, Any]:
    """Fixed-rate (open loop) when rate > 0, else closed loop; the generator's JSON result."""
    argv = [
        str(loadgen_binary()),
        "-url",
        url,
        "-bodies",
        str(bodies),
        "-rate",
        str(rate),
        "-duration",
        str(seconds),
        "-connections",
        str(connections),
        "-warmup",
        str(warmup),
    ]
    if ca is not None:
        argv += ["-cacert", str(ca)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + warmup + 120, check=True)
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result

"""`trainguard serve` stopped at any moment of its start exits 0, and starts no more workers than CPUs.

Each case runs the real command with several workers and sends SIGTERM at one moment of its
start: when it first logs (policies still loading), right as the workers are forked, and 0.1 s
or 0.3 s after "workers started", when they are still starting uvicorn. The outcome must not
depend on where the signal lands: exit 0, no worker killed, no failure logged.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson
import pytest

from tests.test_server_tls import REPO, REVIEW, WAIT, client_context, denied_by_gang, free_port
from webhook.serve.workers import default_workers, usable_workers

CPUS = default_workers()
# Generous: a loaded CI machine starts Python, compiles the policy set and forks slowly.
START = 60.0


def serve(files: Path, *extra: str) -> subprocess.Popen[str]:
    argv = [
        *(sys.executable, "-m", "webhook", "serve", "--host", "127.0.0.1", "--port", "0"),
        *("--tls-cert", str(files / "certs" / "tls.crt"), "--tls-key", str(files / "certs" / "tls.key")),
        *("--policies", str(files / "policies"), "--shutdown-delay", "0.2", "--graceful-timeout", "2"),
        *extra,
    ]
    return subprocess.Popen(argv, cwd=REPO, stderr=subprocess.PIPE, text=True)


class Log:
    """The server's JSON log lines as they come (read on a thread: stderr must never fill up)."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self._seen = threading.Condition()
        assert process.stderr is not None
        self._stream = process.stderr
        self._thread = threading.Thread(target=self._read, args=(process.stderr,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            with self._seen:
                self.lines.append(line)
                self._seen.notify_all()

    def wait(self, condition: Callable[[list[str]], bool], what: str) -> None:
        with self._seen:
            if not self._seen.wait_for(lambda: condition(self.lines), timeout=START):
                pytest.fail(f"timed out after {START} s waiting for {what}:\n{''.join(self.lines)[-3000:]}")

    def close(self) -> None:
        """Once the process has ended: the rest of its log, and the pipe closed."""
        self._thread.join(WAIT)
        self._stream.close()

    def messages(self) -> list[str]:
        return [orjson.loads(line)["msg"] for line in self.lines if line.startswith("{")]


@contextmanager
def served(files: Path, *extra: str) -> Iterator[tuple[subprocess.Popen[str], Log]]:
    """`serve` with its log read as it comes; killed if still running at the end, its log closed."""
    process = serve(files, *extra)
    log = Log(process)
    try:
        yield process, log
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        log.close()


def any_line(lines: list[str]) -> bool:
    return bool(lines)


def workers_started(lines: list[str]) -> bool:
    return any('"workers started"' in line for line in lines)


MOMENTS = [
    pytest.param(any_line, 0.0, id="while-loading-the-policies"),
    pytest.param(workers_started, 0.0, id="as-the-workers-start"),
    pytest.param(workers_started, 0.1, id="0.1s-after-workers-started"),
    pytest.param(workers_started, 0.3, id="0.3s-after-workers-started"),
]


@pytest.mark.skipif(CPUS < 2, reason="several workers need at least two usable CPUs")
@pytest.mark.parametrize(("moment", "after"), MOMENTS)
def test_sigterm_at_any_moment_of_the_start_exits_0(
    files: Path, moment: Callable[[list[str]], bool], after: float
) -> None:
    with served(files, "--workers", "2") as (process, log):
        log.wait(moment, "the moment to stop it")
        # Not a race the test depends on: every moment must give the same outcome.
        time.sleep(after)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=START)
    messages = log.messages()
    assert process.returncode == 0, "".join(log.lines)[-3000:]
    failures = {"worker died: starting another", "workers killed: not drained in time", "worker failed"}
    assert not failures & set(messages)
    assert messages[-1] in {"stopped", "stopped before serving: asked to stop while starting"}


@pytest.mark.skipif(CPUS < 2, reason="one worker is served without a supervisor")
def test_workers_beyond_the_usable_cpus_are_capped_with_a_warning(files: Path) -> None:
    with served(files, "--workers", str(CPUS + 3)) as (process, log):
        log.wait(lambda lines: any('"workers started"' in line for line in lines), "the workers")
        started = next(orjson.loads(line) for line in log.lines if '"workers started"' in line)
        children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=START)
    warning = next(orjson.loads(line) for line in log.lines if "CPUs this process can use" in line)
    assert f"--workers {CPUS + 3}" in warning["msg"] and f"the {CPUS} CPUs" in warning["msg"]
    assert warning["level"] == "warning"
    assert started["workers"] == CPUS and len(children) == CPUS
    assert process.returncode == 0


@pytest.mark.parametrize(
    ("cpu_max", "requested", "expected"),
    [
        pytest.param("100000 100000\n", 4, 1, id="quota-of-one-cpu-caps-4"),
        pytest.param("100000 100000\n", 1, 1, id="one-of-one-kept"),
        pytest.param(
            "max 100000\n", len(os.sched_getaffinity(0)), len(os.sched_getaffinity(0)), id="all-cpus"
        ),
        pytest.param("max 100000\n", 64, len(os.sched_getaffinity(0)), id="64-capped-at-affinity"),
    ],
)
def test_usable_workers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cpu_max: str, requested: int, expected: int
) -> None:
    (tmp_path / "cpu.max").write_text(cpu_max)
    assert usable_workers(requested, str(tmp_path)) == expected
    warned = [r.getMessage() for r in caplog.records if "CPUs this process can use" in r.getMessage()]
    assert bool(warned) == (requested > expected)


# -- recycling ------------------------------------------------------------------------------------


@pytest.mark.skipif(CPUS < 2, reason="several workers need at least two usable CPUs")
def test_recycled_workers_fail_no_request(files: Path) -> None:
    port = free_port()
    answers: list[int | str] = []
    lock = threading.Lock()
    with served(files, "--workers", "2", "--recycle-after", "40", "--port", str(port)) as (process, log):
        log.wait(lambda lines: any('"Application startup complete."' in line for line in lines), "a worker")
        base = f"https://127.0.0.1:{port}"

        def client() -> None:
            # Keep-alive connections, as the API server's: a retiring worker's answers ask each to
            # reconnect, which httpx does for the next request.
            with httpx.Client(verify=client_context(files), timeout=60) as c:
                for _ in range(100):
                    try:
                        r = c.post(
                            f"{base}/validate", content=REVIEW, headers={"content-type": "application/json"}
                        )
                        outcome: int | str = (
                            r.status_code if denied_by_gang(r.json()["response"]) else "wrong"
                        )
                    except httpx.HTTPError as exc:
                        outcome = type(exc).__name__
                    with lock:
                        answers.append(outcome)

        clients = [threading.Thread(target=client, daemon=True) for _ in range(4)]
        for t in clients:
            t.start()
        for t in clients:
            t.join(START * 3)
        log.wait(lambda lines: any('"worker recycled"' in line for line in lines), "a worker to be recycled")
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=START)
    assert answers == [200] * 400
    messages = log.messages()
    assert "worker died: starting another" not in messages
    assert process.returncode == 0

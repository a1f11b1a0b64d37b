"""Several worker processes on one listening socket, and the CPU count that sizes them.

The parent builds the server once (policies compiled, TLS loaded: a broken set fails here, before
any fork), binds the socket, and forks `workers` children that serve it; the kernel hands each
new connection to a worker that is waiting in accept(), so a worker busy with a slow request
does not take new connections from the others. The parent only supervises: it forwards SIGTERM
and SIGINT, replaces a worker that dies (a bounded number of times), and exits once all have
drained. uvicorn's own multi-process mode re-imports the app by name in spawned children, which
would compile the policy set once per worker and cannot share a server built from Settings.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import math
import os
import signal
import socket
import struct
import sys
import tempfile
import time
from typing import TYPE_CHECKING, NoReturn

from webhook.serve import stopsignal
from webhook.serve.settings import Settings
from webhook.serve.sockets import bind

if TYPE_CHECKING:
    from webhook.serve.server import WebhookServer

__all__ = ["default_workers", "run", "usable_workers"]

log = logging.getLogger("trainguard.server")

_RESTARTS = 5  # per _RESTART_WINDOW seconds; a worker dying faster than that stops the server
_RESTART_WINDOW = 60.0
_POLL = 0.1
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_MESSAGE = struct.Struct("!cI")  # a worker's message to its supervisor: kind, pid
_RETIRE = signal.SIGUSR2  # supervisor to worker: your replacement is ready


def default_workers(cgroup_root: str = "/sys/fs/cgroup") -> int:
    """Workers for this container: its CPU limit (cgroup v2 cpu.max), else the CPUs it may run on."""
    cpus = len(os.sched_getaffinity(0))
    try:
        with open(os.path.join(cgroup_root, "cpu.max")) as fh:
            quota, _, period = fh.read().partition(" ")
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass  # no cgroup v2 limit visible: the affinity mask is the limit
    return max(1, cpus)


def usable_workers(requested: int, cgroup_root: str = "/sys/fs/cgroup") -> int:
    """`requested`, capped at the CPUs this container may use: a worker beyond them adds no
    throughput, only its memory (tens of MB each) and a longer start and drain."""
    cpus = default_workers(cgroup_root)
    if requested <= cpus:
        return requested
    log.warning(
        f"--workers {requested} is more than the {cpus} CPUs this process can use "
        f"(its CPU affinity and cgroup CPU quota): starting {cpus}",
        extra={"requested": requested, "cpus": cpus},
    )
    return cpus


def _stop_with_parent(parent: int) -> None:
    """Ask the kernel for SIGTERM when the supervisor dies (a SIGKILL to it must not leave workers
    serving the port with nobody to stop them); ctypes because the os module has no prctl()."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # it died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def run(server: WebhookServer, settings: Settings) -> int:
    """Serve with `settings.workers` processes until SIGTERM/SIGINT; 0 when every worker drained."""
    sock = bind(settings.host, settings.port, server.config.backlog)
    supervisor = _Supervisor(server, sock, settings.recycle_after)
    original = {sig: signal.signal(sig, supervisor.on_signal) for sig in stopsignal.STOP_SIGNALS}
    supervisor.stopping.extend(stopsignal.take())  # asked to stop while the server was being built
    try:
        supervisor.start_all(settings.workers or default_workers())
        # Bounded: after a stop signal the workers have shutdown_delay + graceful_timeout to drain.
        supervisor.supervise(drain_limit=settings.shutdown_delay + settings.graceful_timeout + 5.0)
    finally:
        for sig, handler in original.items():
            signal.signal(sig, handler)
        sock.close()
        if server.metrics_listener is not None:
            server.metrics_listener[1].close()
        supervisor.close()
    log.info("stopped")
    return 1 if supervisor.failed else 0


class _Supervisor:
    """The parent's view of its workers: which run, which replace or retire which, and whether
    the whole ended in a failure."""

    def __init__(self, server: WebhookServer, sock: socket.socket, recycle_after: int) -> None:
        self.server = server
        self.sock = sock
        self.recycle_after = recycle_after
        self.parent = os.getpid()
        self.children: dict[int, int] = {}  # pid -> worker index
        self.stopping: list[int] = []  # the signal that asked us to stop, once one did
        # Workers tell the supervisor through a pipe: "R" ready (accepting), "O" old (replace me).
        # Five bytes a message, far below PIPE_BUF, so the writes of several workers never interleave.
        self.inbox, self.outbox = os.pipe()
        os.set_blocking(self.inbox, False)
        self.replacing: dict[int, int] = {}  # new pid -> the pid of the worker it replaces, until ready
        self.retiring: set[int] = set()
        self.restarts: list[float] = []
        self.failed = False

    def on_signal(self, sig: int, frame: object) -> None:
        self.stopping.append(sig)
        for pid in self.children:
            _signal(pid, sig)

    def start_all(self, workers: int) -> None:
        for index in range(workers):
            if self.stopping:
                break  # a worker forked now would only be stopped again
            self.start(index)
        log.info("workers started", extra={"workers": len(self.children), "pids": sorted(self.children)})

    def start(self, index: int) -> int:
        # Stop signals wait while a worker is forked: one that came between fork() and the pid
        # being listed would reach the supervisor but never the new worker, which would then
        # serve on until it is killed. Pending signals are not inherited, so the worker starts
        # with none and receives its own copy once the supervisor has listed it.
        signal.pthread_sigmask(signal.SIG_BLOCK, stopsignal.STOP_SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:
                os.close(self.inbox)
                _worker(self.server, index, self.parent, self.sock, self.outbox, self.recycle_after)
            self.children[pid] = index
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, stopsignal.STOP_SIGNALS)
        return pid

    def supervise(self, drain_limit: float) -> None:
        """Until every worker has exited: messages, exits, restarts, and the drain's time limit."""
        stop_at: float | None = None
        while self.children:
            if self.stopping and stop_at is None:
                stop_at = time.monotonic() + drain_limit
            if stop_at is not None and time.monotonic() > stop_at:
                self._kill_all()
                stop_at = math.inf
            self._read_inbox()
            pid, status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                time.sleep(_POLL)
            elif pid in self.children:
                self._exited(pid, os.waitstatus_to_exitcode(status))

    def close(self) -> None:
        os.close(self.inbox)
        os.close(self.outbox)

    def _kill_all(self) -> None:
        for pid in self.children:
            _signal(pid, signal.SIGKILL)
        log.error("workers killed: not drained in time", extra={"pids": sorted(self.children)})
        self.failed = True

    def _read_inbox(self) -> None:
        try:
            data = os.read(self.inbox, 819 * _MESSAGE.size)  # whole messages only
        except BlockingIOError:
            return
        for offset in range(0, len(data), _MESSAGE.size):
            kind, pid = _MESSAGE.unpack_from(data, offset)
            if kind == b"O" and pid in self.children and pid not in self.retiring and not self.stopping:
                # The replacement starts first; the old worker stops accepting only once it is ready.
                self.replacing[self.start(self.children[pid])] = pid
                log.info("recycling a worker: starting its replacement", extra={"pid": pid})
            elif kind == b"R" and pid in self.replacing:
                old = self.replacing.pop(pid)
                self.retiring.add(old)
                _signal(old, _RETIRE)

    def _exited(self, pid: int, code: int) -> None:
        """A worker is gone: expected (stopping, recycled), or replaced unless they keep dying."""
        index = self.children.pop(pid)
        _forget_metrics_of(pid)
        if self.stopping:
            self.failed = self.failed or code != 0
        elif pid in self.retiring:
            self.retiring.discard(pid)
            log.info("worker recycled", extra={"worker": index, "pid": pid, "exit": code})
        elif pid in self.replacing:  # the replacement died before it was ready: the old one serves on
            self.replacing.pop(pid)
            log.error("a replacement worker died before it was ready", extra={"worker": index, "exit": code})
        elif self._dying_too_fast():
            log.error("workers keep dying: stopping", extra={"worker": index, "exit": code})
            self.failed = True
            self.on_signal(signal.SIGTERM, None)
        else:
            log.error("worker died: starting another", extra={"worker": index, "exit": code})
            self.start(index)

    def _dying_too_fast(self) -> bool:
        now = time.monotonic()
        self.restarts = [t for t in self.restarts if now - t < _RESTART_WINDOW] + [now]
        return len(self.restarts) > _RESTARTS


def _worker(
    server: WebhookServer, index: int, parent: int, sock: socket.socket, outbox: int, recycle_after: int
) -> NoReturn:
    """The forked worker's whole life: serve until stopped, then leave without returning."""
    code = 1
    try:
        me = os.getpid()
        server.tell = lambda kind: _tell(outbox, kind, me)
        server.recycle_after = recycle_after
        signal.signal(_RETIRE, lambda sig, frame: server.retire())
        # Until uvicorn installs its handlers a stop signal is recorded, and answered by them
        # (WebhookServer.capture_signals), or here before serving: nothing is in flight yet.
        stopsignal.install()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stopsignal.STOP_SIGNALS)
        server.worker = index
        _stop_with_parent(parent)
        if server.state.engine is not None:
            # A forked worker's metric values start from zero in its own files (multiprocess
            # mode): publish its readiness and policy count there.
            server.state.install(server.state.engine)
        for handler in logging.getLogger().handlers:
            handler.addFilter(_WorkerField(index))
        if not stopsignal.pending():
            server.run(sockets=[sock])
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        log.exception("worker failed", extra={"worker": index})
    finally:
        logging.shutdown()
        sys.stderr.flush()
        os._exit(code)  # never return into the parent's code


def _tell(outbox: int, kind: bytes, pid: int) -> None:
    with contextlib.suppress(OSError):  # the supervisor is gone: PDEATHSIG stops this worker
        os.write(outbox, _MESSAGE.pack(kind, pid))


class _WorkerField(logging.Filter):
    """Every record a worker writes says which worker wrote it (a `worker` field in the JSON line)."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self.index
        return True


def shared_metrics_dir() -> str | None:
    """Point prometheus_client at a fresh directory for the workers' metric files, before it is imported.

    The directory made here is returned (the caller removes it at exit); None when the environment
    already names one, or when prometheus_client was imported too early to switch (a scrape then
    reports the worker that answers it, which is logged).
    """
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return None
    if "prometheus_client" in sys.modules:
        log.warning("metrics are per worker: prometheus_client was imported before the workers were set up")
        return None
    path = tempfile.mkdtemp(prefix="trainguard-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path
    return path


def _forget_metrics_of(pid: int) -> None:
    """A worker's gauges leave with it (its counters stay in the sums)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone; waitpid() collects it
        os.kill(pid, sig)

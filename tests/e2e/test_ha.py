"""Two trainguard replicas behind a real load balancer: losing one, and rolling the other, fails no admission.

Debian's haproxy (installed by .ci/setup) listens on 127.0.0.1 in TCP mode and passes TLS through
to two `trainguard serve` processes, checking each one's /readyz over TLS. The API server is given
the balancer's URL, as it would be given a Service. Client threads keep creating a GPU Pod
(server-side dry run: both webhooks are called, nothing is stored) through the API server on
persistent HTTP/1.1 connections with the kubeconfig's client certificate, while the test

  1. SIGKILLs replica A (no drain, no goodbye): its connections die, the balancer's next health
     check marks it down, and a connection attempt before that is redispatched to B;
  2. starts A's replacement and waits until the balancer has it up;
  3. rolls B: SIGTERM (not ready at once, `Connection: close` on every answer, then drain), and
     starts its replacement once it has exited.

Every create must be admitted. The kill is timed between two creates: with TLS passed through,
a request already written to a process that dies is lost whatever balances it (the API server does
not resend a webhook POST on a broken connection), so what HA promises, and this test holds it to,
is that nothing after a replica's death fails: not the pooled connections to it, not the balancer's
detection delay, not the roll. The figures (creates, failures, latency p50/p99 overall and in the
seconds after the kill) are printed and written to the transcripts directory.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import shutil
import socket
import ssl
import statistics
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from .controlplane import HOST, ControlPlane, clean_environment, free_port
from .webhook_server import Transcripts, WebhookServer, pod, trainguard

CONFIGURATION_NAME = "trainguard-ha"
CHECK_INTERVAL_MS = 200
SHUTDOWN_DELAY_S = 2  # a replica stays up, not ready, this long after SIGTERM: the balancer takes it out
CLIENTS = 2
MAX_CREATES = 20_000  # per client: the loop is bounded even if the phases never end
MAX_SECONDS = 180.0
KILL_WINDOW_S = 3.0  # the "during the kill" figures: creates that start within this after the SIGKILL


class Replica(WebhookServer):
    """`trainguard serve` as WebhookServer runs it, with a drain long enough for the balancer to see it."""

    def argv(self) -> list[str]:
        args = super().argv()
        args[args.index("--shutdown-delay") + 1] = str(SHUTDOWN_DELAY_S)
        args[args.index("--log-level") + 1] = "info"
        return args


class Balancer:
    """haproxy in the foreground, TCP mode, TLS passed through, /readyz checked over TLS."""

    def __init__(self, work: Path, backends: list[int]) -> None:
        self.work = work
        self.port = free_port()
        self.socket = work / "haproxy.sock"
        self.config = work / "haproxy.cfg"
        self.log = work / "haproxy.log"
        servers = "\n".join(f"    server r{i} {HOST}:{port}" for i, port in enumerate(backends, start=1))
        self.config.write_text(
            f"""global
    stats socket {self.socket} mode 600 level admin
    maxconn 256

defaults
    mode tcp
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    # A connection refused by a replica that just died is tried again, on the other one.
    retries 3
    option redispatch 1

frontend webhook
    bind {HOST}:{self.port}
    default_backend replicas

backend replicas
    balance roundrobin
    # /readyz over TLS: 200 when the replica decides, 503 from SIGTERM on (it is draining).
    option httpchk
    http-check send meth GET uri /readyz ver HTTP/1.1 hdr Host localhost
    http-check expect status 200
    default-server check check-ssl verify none inter {CHECK_INTERVAL_MS} fall 1 rise 2
{servers}
""",
            encoding="utf-8",
        )
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}"

    def start(self) -> None:
        haproxy = shutil.which("haproxy")
        assert haproxy, "haproxy is not on PATH: .ci/setup installs it (apt-get install haproxy)"
        checked = subprocess.run(
            [haproxy, "-c", "-f", str(self.config)], capture_output=True, text=True, timeout=30, check=False
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                [haproxy, "-db", "-f", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=clean_environment(),
                start_new_session=True,
            )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)

    def states(self) -> dict[str, str]:
        """Each server's status as haproxy sees it (UP, DOWN, …), from its stats socket."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(2)
                sock.connect(str(self.socket))
                sock.sendall(b"show stat\n")
                raw = b""
                while chunk := sock.recv(65536):
                    raw += chunk
        except OSError:
            return {}
        lines = raw.decode().splitlines()
        if not lines:
            return {}
        header = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(header, line.split(","), strict=False)) for line in lines[1:] if line]
        return {
            r["svname"]: r["status"]
            for r in rows
            if r.get("pxname") == "replicas" and r["svname"] != "BACKEND"
        }

    def wait_for(self, server: str, status: str, timeout: float = 30.0) -> float:
        """Seconds until `server` has `status` (UP or DOWN)."""
        started = time.monotonic()
        while (seen := self.states().get(server, "")).split(" ")[0] != status:
            if time.monotonic() - started > timeout:
                raise AssertionError(f"haproxy: {server} is {seen!r}, not {status}, after {timeout:.0f} s")
            time.sleep(0.05)
        return time.monotonic() - started


@dataclass
class Create:
    started: float
    seconds: float
    status: int
    message: str = ""


@dataclass
class Driver:
    """Client threads creating Pods through the API server, each on its own persistent connection."""

    plane: ControlPlane
    namespace: str
    results: list[Create] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    hold: threading.Event = field(default_factory=threading.Event)  # set: clients pause between creates
    idle: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _connection(self) -> http.client.HTTPSConnection:
        pki = self.plane.ca_file.parent
        context = ssl.create_default_context(cafile=str(self.plane.ca_file))
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return http.client.HTTPSConnection(HOST, self.plane.port, context=context, timeout=30)

    def run(self) -> None:
        body = json.dumps(pod("ha-probe", self.namespace, gpus=1)).encode()
        path = f"/api/v1/namespaces/{self.namespace}/pods?dryRun=All"
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        connection = self._connection()
        deadline = time.monotonic() + MAX_SECONDS
        try:
            for _ in range(MAX_CREATES):
                if self.stop.is_set() or time.monotonic() > deadline:
                    return
                if self.hold.is_set():
                    self.idle.release()
                    while self.hold.is_set() and not self.stop.is_set():
                        time.sleep(0.001)
                started = time.monotonic()
                try:
                    connection.request("POST", path, body=body, headers=headers)
                    response = connection.getresponse()
                    answer = response.read()
                    status, message = response.status, "" if response.status == 201 else answer.decode()
                except (OSError, http.client.HTTPException) as exc:
                    status, message = 0, f"{type(exc).__name__}: {exc}"
                    connection.close()
                    connection = self._connection()
                with self._lock:
                    self.results.append(Create(started, time.monotonic() - started, status, message))
        finally:
            connection.close()

    @contextlib.contextmanager
    def quiet(self, clients: int) -> Iterator[None]:
        """Every client between two creates (none in flight) for the duration of the block."""
        self.hold.set()
        try:
            for _ in range(clients):
                assert self.idle.acquire(timeout=30), "a client did not pause within 30 s"
            yield
        finally:
            self.hold.clear()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))] if ordered else float("nan")


def figures(name: str, creates: list[Create]) -> str:
    ms = [c.seconds * 1000 for c in creates]
    failed = sum(c.status != 201 for c in creates)
    if not ms:
        return f"{name}: no creates"
    return (
        f"{name}: {len(creates)} creates, {failed} failed, latency p50 {statistics.median(ms):.1f} ms, "
        f"p99 {percentile(ms, 99):.1f} ms, max {max(ms):.1f} ms"
    )


@pytest.fixture
def ha_setup(
    control_plane: ControlPlane,
    webhook_certs: Path,
    namespace: str,
    transcripts: Transcripts,
    tmp_path: Path,
) -> Iterator[tuple[list[Replica], Balancer]]:
    config = tmp_path / "platform.yaml"
    config.write_text("apiVersion: trainguard.dev/v1alpha1\nkind: PlatformConfig\n", encoding="utf-8")
    replicas = [
        Replica(
            certs=webhook_certs,
            config=config,
            kubeconfig=control_plane.kubeconfig,
            log=tmp_path / f"r{i}.log",
        )
        for i in (1, 2)
    ]
    balancer: Balancer | None = None
    try:
        for replica in replicas:
            replica.start()
        balancer = Balancer(tmp_path, [r.port for r in replicas])
        balancer.start()
        for name in ("r1", "r2"):
            balancer.wait_for(name, "UP")
        rendered = trainguard(
            "webhook-config",
            "--certs",
            str(webhook_certs),
            "--url",
            balancer.url,
            "--name",
            CONFIGURATION_NAME,
            "--config",
            str(config),
            "-o",
            "yaml",
        )
        assert rendered.returncode == 0, rendered.stderr
        documents = list(yaml.safe_load_all(rendered.stdout))
        for document in documents:
            for hook in document["webhooks"]:
                # The control plane is shared by the session: this test's namespace only.
                hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(documents))
        yield replicas, balancer
    finally:
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            control_plane.kubectl("delete", kind, CONFIGURATION_NAME, "--ignore-not-found", check=False)
        if balancer is not None:
            balancer.stop()
        for replica in replicas:
            replica.kill()


def test_a_replica_killed_and_the_other_rolled_fail_no_admission(
    control_plane: ControlPlane,
    namespace: str,
    ha_setup: tuple[list[Replica], Balancer],
    transcripts: Transcripts,
) -> None:
    (a, b), balancer = ha_setup
    # Until the API server's informer has the configurations and both replicas have answered (the
    # balancer spreads connections, not requests: concurrent creates open more than one).
    deadline = time.monotonic() + 60
    while not (a.admission_calls() and b.admission_calls()):
        assert time.monotonic() < deadline, "the API server never called both replicas through haproxy"
        warm = Driver(control_plane, namespace)
        threads = [threading.Thread(target=warm.run) for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        warm.stop.set()
        for thread in threads:
            thread.join(timeout=40)

    driver = Driver(control_plane, namespace)
    clients = [threading.Thread(target=driver.run, name=f"client-{i}") for i in range(CLIENTS)]
    for client in clients:
        client.start()
    timeline: list[str] = []
    try:
        time.sleep(3)  # steady state on both replicas
        calls_before = a.admission_calls() + b.admission_calls()
        with driver.quiet(CLIENTS):
            killed_at = time.monotonic()
            assert a.process is not None
            a.process.kill()  # SIGKILL
            a.process.wait(timeout=10)
            # The balancer closes the API server's idle connections to A once A's sockets are gone;
            # a request written at that very instant would be lost like one in flight (see above).
            time.sleep(0.1)
        balancer.wait_for("r1", "DOWN")
        timeline.append(
            f"replica A SIGKILLed; haproxy marked it DOWN {time.monotonic() - killed_at:.2f} s later"
        )
        time.sleep(KILL_WINDOW_S)
        a.start()  # its replacement, on the same address
        timeline.append(f"replica A's replacement UP after {balancer.wait_for('r1', 'UP'):.2f} s")
        time.sleep(2)
        assert b.process is not None
        b.process.terminate()  # SIGTERM: not ready, still serving, then drain
        timeline.append(
            f"replica B SIGTERMed; haproxy marked it DOWN after {balancer.wait_for('r2', 'DOWN'):.2f} s"
        )
        assert b.process.wait(timeout=30) == 0, b.log_tail()
        b.start()
        timeline.append(f"replica B's replacement UP after {balancer.wait_for('r2', 'UP'):.2f} s")
        time.sleep(2)
    finally:
        driver.stop.set()
        for client in clients:
            client.join(timeout=60)
    calls = a.admission_calls() + b.admission_calls()  # the replacements' counters, since their start

    results = sorted(driver.results, key=lambda c: c.started)
    window = [c for c in results if killed_at <= c.started < killed_at + KILL_WINDOW_S]
    lines = [
        *timeline,
        figures("all", results),
        figures(f"the {KILL_WINDOW_S:.0f} s after the SIGKILL", window),
        f"webhook calls seen by the replicas: {calls_before:.0f} before the kill, {calls:.0f} by the replacements",
    ]
    for line in lines:
        transcripts.record_line("ha", line)
    print("\n".join(["", "HA through haproxy:", *lines]))

    failures = [c for c in results if c.status != 201]
    assert len(results) > 100, f"too few creates to say anything: {len(results)}"
    assert calls > 0, "the replacements were never called"
    assert not failures, "\n".join(f"{c.status}: {c.message[:300]}" for c in failures[:10])
    assert window, "no create ran while replica A was down"

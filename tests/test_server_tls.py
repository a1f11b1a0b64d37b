"""A real uvicorn server on 127.0.0.1 with certificates from webhook.certs: TLS, reload, rotation, shutdown.

Every server here runs in a thread of this process (its own uvloop loop), listens on an ephemeral
port of 127.0.0.1 and is stopped by the fixture; every wait and every traffic loop is bounded.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from cryptography import x509

from webhook import certs
from webhook.cli import main as cli_main
from webhook.errors import PolicyError
from webhook.serve.server import WebhookServer, build
from webhook.serve.settings import ServerError, Settings

REPO = Path(__file__).resolve().parents[1]
UID = "c0ffee00-0000-4000-8000-000000000001"
WAIT = 10.0  # seconds any single condition may take before the test fails

GANG_MISSING: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {
        "name": "train",
        "namespace": "research",
        "annotations": {"trainguard.dev/topology-slo": "best-effort"},
    },
    "spec": {
        "pytorchReplicaSpecs": {
            "Master": {
                "replicas": 1,
                "template": {"spec": {"containers": [{"name": "pytorch", "image": "i"}]}},
            },
            "Worker": {
                "replicas": 3,
                "template": {"spec": {"containers": [{"name": "pytorch", "image": "i"}]}},
            },
        }
    },
}
REVIEW = orjson.dumps(
    {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": UID, "operation": "CREATE", "namespace": "research", "object": GANG_MISSING},
    }
)
BROKEN_POLICY = """\
apiVersion: trainguard.dev/v1alpha1
kind: TrainingPolicy
metadata:
  name: broken
spec:
  mode: Enforce
  validations:
    - expression: "object.spec.(("
      message: never compiles
"""


def wait_for(condition: Callable[[], Any], what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout} s waiting for {what}")


# -- certificates and files -----------------------------------------------------------------------


def settings_for(files: Path, **overrides: Any) -> Settings:
    base = Settings(
        tls_cert=str(files / "certs" / "tls.crt"),
        tls_key=str(files / "certs" / "tls.key"),
        host="127.0.0.1",
        port=0,
        policies=(str(files / "policies"),),
        reload_interval=0.05,
        shutdown_delay=0.3,
        graceful_timeout=5,
        metrics_sample_every=1,
    )
    return replace(base, **overrides)


def client_context(files: Path, **versions: ssl.TLSVersion) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(files / "certs" / "ca.crt"))
    for name, version in versions.items():
        setattr(ctx, name, version)
    return ctx


def serve_argv(files: Path, *extra: str, policies: str = "policies") -> list[str]:
    return [
        *("serve", "--host", "127.0.0.1", "--policies", str(files / policies)),
        *("--tls-cert", str(files / "certs" / "tls.crt"), "--tls-key", str(files / "certs" / "tls.key")),
        *extra,
    ]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def served_process(
    files: Path, *extra: str, policies: str = "policies", stderr: int | None = subprocess.PIPE
) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """`trainguard serve` as its own process on a free port, once its /readyz answers 200; yields it
    and the port, and kills it at the end if it still runs."""
    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "webhook",
        *serve_argv(files, "--port", str(port), *extra, policies=policies),
    ]
    process = subprocess.Popen(argv, cwd=REPO, stderr=stderr, text=True)
    try:

        def ready() -> bool:
            with (
                contextlib.suppress(httpx.HTTPError),
                httpx.Client(verify=client_context(files), timeout=1) as client,
            ):
                return client.get(f"https://127.0.0.1:{port}/readyz").status_code == 200
            return False

        wait_for(ready, "the served process to be ready", timeout=30)
        yield process, port
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


# -- a running server -----------------------------------------------------------------------------


@contextlib.contextmanager
def running(settings: Settings) -> Iterator[WebhookServer]:
    server = build(settings)
    thread = threading.Thread(target=server.run, name="webhook-under-test", daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), "the server to start")
        assert server.started, "the server thread died during startup"
        yield server
    finally:
        server.should_exit = True
        thread.join(timeout=WAIT)
        assert not thread.is_alive(), "the server did not stop"


@pytest.fixture
def server(files: Path) -> Iterator[WebhookServer]:
    with running(settings_for(files)) as s:
        yield s


def url(server: WebhookServer, path: str) -> str:
    return f"https://127.0.0.1:{server.port}{path}"


def validate(client: httpx.Client, server: WebhookServer) -> dict[str, Any]:
    response = client.post(
        url(server, "/validate"), content=REVIEW, headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.text
    out: dict[str, Any] = response.json()["response"]
    assert out["uid"] == UID
    return out


def peer_serial(server: WebhookServer, ctx: ssl.SSLContext) -> int:
    """The serial number of the certificate a *new* connection is served."""
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def metric(server: WebhookServer, name: str, **labels: str) -> float:
    value = server.state.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


@dataclass
class Traffic:
    """Admission requests in a loop on a thread, until stopped or `limit` requests: every result kept."""

    server: WebhookServer
    ctx: ssl.SSLContext
    limit: int = 20_000
    fresh_every: int = 5  # every Nth request opens a new connection (a new handshake)
    results: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    slowest: float = 0.0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __enter__(self) -> Traffic:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        wait_for(lambda: self.results or self.failures, "the first request")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=WAIT)

    def since(self, mark: int) -> list[dict[str, Any]]:
        return self.results[mark:]

    def _run(self) -> None:
        with httpx.Client(verify=self.ctx, timeout=WAIT) as pooled:
            for i in range(self.limit):
                if self._stop.is_set():
                    return
                start = time.perf_counter()
                try:
                    if i % self.fresh_every == 0:
                        with httpx.Client(verify=self.ctx, timeout=WAIT) as fresh:
                            self.results.append(validate(fresh, self.server))
                    else:
                        self.results.append(validate(pooled, self.server))
                except Exception as exc:  # every failure is kept and reported by the test
                    self.failures.append(repr(exc))
                self.slowest = max(self.slowest, time.perf_counter() - start)


def denied_by_gang(out: dict[str, Any]) -> bool:
    return out["allowed"] is False and "gang-required" in out["status"]["message"]


def warned_by_gang(out: dict[str, Any]) -> bool:
    return out["allowed"] is True and any(w.startswith("gang-required:") for w in out.get("warnings", ()))


# -- TLS ------------------------------------------------------------------------------------------


def test_handshake_verifies_with_the_generated_ca(server: WebhookServer, files: Path) -> None:
    with httpx.Client(verify=client_context(files)) as client:
        assert client.get(url(server, "/healthz")).json() == {"status": "ok"}
        assert client.get(url(server, "/readyz")).status_code == 200
        assert denied_by_gang(validate(client, server))


def test_a_client_without_the_ca_refuses_the_server(server: WebhookServer) -> None:
    with httpx.Client(verify=ssl.create_default_context()) as client, pytest.raises(httpx.ConnectError):
        client.get(url(server, "/healthz"))


def test_plain_http_gets_no_answer(server: WebhookServer) -> None:
    with httpx.Client() as client, pytest.raises(httpx.HTTPError):
        client.get(f"http://127.0.0.1:{server.port}/healthz")


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1:DeprecationWarning")  # the point of the test
def test_tls_1_1_is_refused_and_1_2_accepted(server: WebhookServer, files: Path) -> None:
    assert server.config.ssl is not None
    assert server.config.ssl.minimum_version == ssl.TLSVersion.TLSv1_2
    old = client_context(files, minimum_version=ssl.TLSVersion.TLSv1, maximum_version=ssl.TLSVersion.TLSv1_1)
    old.set_ciphers("DEFAULT:@SECLEVEL=0")  # a client that really offers TLS 1.1 (OpenSSL 3 would not)
    assert negotiated_with_a_permissive_server(old, files) == "TLSv1.1"  # so a refusal is the server's
    with httpx.Client(verify=old) as client, pytest.raises(httpx.ConnectError):
        client.get(url(server, "/healthz"))
    tls12 = client_context(files, maximum_version=ssl.TLSVersion.TLSv1_2)
    with httpx.Client(verify=tls12) as client:
        assert client.get(url(server, "/healthz")).status_code == 200


TLS12_SUITES = [
    pytest.param("ECDHE-ECDSA-AES128-GCM-SHA256", True, id="ecdhe-aes128-gcm"),
    pytest.param("ECDHE-ECDSA-AES256-GCM-SHA384", True, id="ecdhe-aes256-gcm"),
    pytest.param("ECDHE-ECDSA-CHACHA20-POLY1305", True, id="ecdhe-chacha20-poly1305"),
    pytest.param("ECDHE-ECDSA-AES128-SHA", False, id="ecdhe-aes128-cbc-sha"),
    pytest.param("ECDHE-ECDSA-AES256-SHA384", False, id="ecdhe-aes256-cbc-sha384"),
    pytest.param("ECDHE-ECDSA-AES128-SHA256", False, id="ecdhe-aes128-cbc-sha256"),
]


@pytest.mark.parametrize(("suite", "accepted"), TLS12_SUITES)
def test_tls_1_2_offers_only_ecdhe_with_aead_ciphers(
    server: WebhookServer, files: Path, suite: str, accepted: bool
) -> None:
    ctx = client_context(files, maximum_version=ssl.TLSVersion.TLSv1_2)
    ctx.set_ciphers(suite)
    if accepted:
        with httpx.Client(verify=ctx) as client:
            assert client.get(url(server, "/healthz")).status_code == 200
    else:
        with httpx.Client(verify=ctx) as client, pytest.raises(httpx.ConnectError):
            client.get(url(server, "/healthz"))


def test_tls_1_3_is_offered(server: WebhookServer, files: Path) -> None:
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as raw,
        client_context(files).wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.version() == "TLSv1.3"


def negotiated_with_a_permissive_server(client: ssl.SSLContext, files: Path) -> str | None:
    """The version `client` agrees on with a server that accepts anything down to TLS 1.0."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(files / "certs" / "tls.crt", files / "certs" / "tls.key")
    server.minimum_version = ssl.TLSVersion.TLSv1
    server.set_ciphers("DEFAULT:@SECLEVEL=0")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        accepted: list[socket.socket] = []
        thread = threading.Thread(target=lambda: accepted.append(listener.accept()[0]), daemon=True)
        thread.start()
        with socket.create_connection(listener.getsockname(), timeout=WAIT) as raw:
            thread.join(timeout=WAIT)
            (conn,) = accepted
            handshake = threading.Thread(
                target=lambda: server.wrap_socket(conn, server_side=True).close(), daemon=True
            )
            handshake.start()
            with client.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                version = tls.version()
            handshake.join(timeout=WAIT)
            conn.close()
    return version


def test_metrics_report_seconds_until_the_certificate_expires(server: WebhookServer, files: Path) -> None:
    with httpx.Client(verify=client_context(files)) as client:
        text = client.get(url(server, "/metrics")).text
    (line,) = [x for x in text.splitlines() if x.startswith("trainguard_certificate_expiry_seconds ")]
    assert 86400 < float(line.split()[1]) <= 2 * 86400  # written with days=2


# -- live reload ----------------------------------------------------------------------------------


def test_policy_reload_under_traffic_keeps_the_last_good_set(server: WebhookServer, files: Path) -> None:
    gang = files / "policies" / "gang-required.yaml"
    enforce = gang.read_text()
    failures_before = metric(server, "trainguard_reloads_total", source="policies", result="failure")
    with Traffic(server, client_context(files)) as traffic:
        assert all(denied_by_gang(r) for r in traffic.results)

        # 1. A good change is picked up.
        changed_at = time.monotonic()
        gang.write_text(enforce.replace("mode: Enforce", "mode: Warn"))
        mark = len(traffic.results)
        wait_for(lambda: any(warned_by_gang(r) for r in traffic.since(mark)), "the Warn policy to decide")
        reload_seconds = time.monotonic() - changed_at

        # 2. A broken file is rejected and counted; the Warn set keeps deciding.
        (files / "policies" / "broken.yaml").write_text(BROKEN_POLICY)
        wait_for(
            lambda: (
                metric(server, "trainguard_reloads_total", source="policies", result="failure")
                > failures_before
            ),
            "the broken policy set to be rejected",
        )
        mark = len(traffic.results)
        wait_for(lambda: len(traffic.results) >= mark + 20, "traffic after the broken reload")
        assert all(warned_by_gang(r) for r in traffic.since(mark))
        assert server.state.engine is not None and "broken" not in server.state.engine.policies.names()

        # 3. Fixing the files brings the original policies back.
        (files / "policies" / "broken.yaml").unlink()
        gang.write_text(enforce)
        mark = len(traffic.results)
        wait_for(lambda: any(denied_by_gang(r) for r in traffic.since(mark)), "the Enforce policy to decide")
    assert traffic.failures == []
    assert reload_seconds < 2.0
    print(
        f"\npolicy reload visible after {reload_seconds * 1000:.0f} ms (poll 50 ms); {len(traffic.results)} "
        f"requests, slowest {traffic.slowest * 1000:.0f} ms"
    )


def test_policy_set_swapped_by_a_configmap_symlink_update(tmp_path: Path, files: Path) -> None:
    """A ConfigMap volume: files are symlinks into `..data`, itself a symlink to a timestamped directory."""
    mount = tmp_path / "mount"
    first = mount / "..2025_01_01_00_00_00.000000001"
    shutil.copytree(files / "policies", first)
    (mount / "..data").symlink_to(first.name)
    for policy in sorted(first.iterdir()):
        (mount / policy.name).symlink_to(Path("..data") / policy.name)
    with (
        running(settings_for(files, policies=(str(mount),))) as server,
        httpx.Client(verify=client_context(files)) as client,
    ):
        assert denied_by_gang(validate(client, server))
        # The kubelet writes a new timestamped directory and swaps ..data in one rename.
        second = mount / "..2025_01_01_00_01_00.000000002"
        shutil.copytree(first, second)
        gang = second / "gang-required.yaml"
        gang.write_text(gang.read_text().replace("mode: Enforce", "mode: Warn"))
        (mount / "..data_tmp").symlink_to(second.name)
        os.replace(mount / "..data_tmp", mount / "..data")
        shutil.rmtree(first)
        wait_for(lambda: warned_by_gang(validate(client, server)), "the swapped policies to decide")


def test_a_cluster_cache_change_rebuilds_the_engine_without_recompiling(files: Path) -> None:
    server = build(settings_for(files))
    before = server.state.engine
    assert before is not None
    runtime = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "ClusterTrainingRuntime"}
    server.reloader.set_cluster({"training-high": 100000}, {(None, "torch-distributed"): runtime})
    after = server.state.engine
    assert after is not None and after is not before
    assert after.policies is before.policies
    assert after.priority_classes == {"training-high": 100000}
    assert after.runtimes == {(None, "torch-distributed"): runtime}


def test_config_reload_and_a_broken_config_keeps_the_last_good_one(files: Path) -> None:
    config = files / "config.yaml"
    config.write_text("apiVersion: trainguard.dev/v1alpha1\nkind: PlatformConfig\n")
    with (
        running(settings_for(files, config=str(config))) as server,
        httpx.Client(verify=client_context(files)) as client,
    ):
        assert denied_by_gang(validate(client, server))
        config.write_text("kind: PlatformConfig\nexcludedNamespaces: [research]\n")
        wait_for(lambda: validate(client, server) == {"uid": UID, "allowed": True}, "the namespace exclusion")
        config.write_text("kind: PlatformConfig\nexcludedNamespaces: [research]\nnoSuchField: 1\n")
        wait_for(
            lambda: metric(server, "trainguard_reloads_total", source="config", result="failure") == 1,
            "the broken config to be rejected",
        )
        assert validate(client, server) == {"uid": UID, "allowed": True}


def test_certificate_rotation_under_traffic(server: WebhookServer, files: Path) -> None:
    ctx = client_context(files)
    before = peer_serial(server, ctx)
    with Traffic(server, ctx) as traffic:
        mark = len(traffic.results)
        wait_for(lambda: len(traffic.results) >= mark + 20, "traffic before the rotation")
        rotated_at = time.monotonic()
        paths = certs.write_bundle(files / "certs", hosts=["127.0.0.1", "localhost"], days=30)
        assert not paths.ca_created  # same CA: the registered caBundle stays valid
        expected = x509.load_pem_x509_certificate(paths.tls_cert.read_bytes()).serial_number
        wait_for(lambda: peer_serial(server, ctx) == expected, "new connections to get the new certificate")
        rotation_seconds = time.monotonic() - rotated_at
        mark = len(traffic.results)
        wait_for(lambda: len(traffic.results) >= mark + 20, "traffic after the rotation")
    assert expected != before
    assert traffic.failures == []
    assert metric(server, "trainguard_reloads_total", source="certificate", result="success") == 1
    assert metric(server, "trainguard_certificate_expiry_seconds") > 29 * 86400
    print(f"\nnew certificate served after {rotation_seconds * 1000:.0f} ms; {len(traffic.results)} requests")


def test_a_certificate_without_its_key_is_not_loaded(
    server: WebhookServer, files: Path, ca: tuple[bytes, bytes]
) -> None:
    ctx = client_context(files)
    before = peer_serial(server, ctx)
    cert_pem, _ = certs.issue_serving_cert(ca[0], ca[1], ["localhost"], ["127.0.0.1"], 2)
    (files / "certs" / "tls.crt").write_bytes(cert_pem)  # the key on disk belongs to the old certificate
    wait_for(
        lambda: metric(server, "trainguard_reloads_total", source="certificate", result="failure") == 1,
        "the mismatched pair to be rejected",
    )
    assert peer_serial(server, ctx) == before
    with httpx.Client(verify=ctx) as client:
        assert denied_by_gang(validate(client, server))


# -- graceful shutdown ----------------------------------------------------------------------------


def raw_request(body: bytes) -> tuple[bytes, bytes]:
    head = (
        b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + b"Content-Length: %d\r\n\r\n" % len(body)
    )
    return head, body


def read_response(tls: ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _content_length(data):
        chunk = tls.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def _content_length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


# -- the write path ---------------------------------------------------------------------------------


def _connect(server: WebhookServer, files: Path) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT)
    return client_context(files).wrap_socket(raw, server_hostname="127.0.0.1")


ONE_RECORD = [
    pytest.param(b"".join(raw_request(REVIEW)), b"HTTP/1.1 200 OK", id="admission"),
    pytest.param(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b"HTTP/1.1 200 OK", id="probe"),
    pytest.param(
        b"GET /validate HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"HTTP/1.1 405",
        id="admission-path-wrong-method",
    ),
]


@pytest.mark.parametrize(("request_bytes", "status"), ONE_RECORD)
def test_a_response_reaches_the_client_in_one_tls_record(
    server: WebhookServer, files: Path, request_bytes: bytes, status: bytes
) -> None:
    """Head and body in one write: one TLS record, one wake-up of the client (a read returns one record)."""
    with _connect(server, files) as tls:
        for _ in range(2):  # and again on the same connection
            tls.sendall(request_bytes)
            first = tls.recv(65536)
            head, _, body = first.partition(b"\r\n\r\n")
            assert head.startswith(status)
            assert len(body) == _content_length(first) > 0


def test_a_head_request_gets_its_headers(server: WebhookServer, files: Path) -> None:
    with _connect(server, files) as tls:
        tls.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        head = tls.recv(65536)
        assert head.startswith(b"HTTP/1.1 200 OK") and head.endswith(b"\r\n\r\n")
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # the connection still serves
        assert read_response(tls).endswith(b'{"status":"ok"}')


def test_a_client_expecting_100_continue_gets_it_before_sending_the_body(
    server: WebhookServer, files: Path
) -> None:
    head, body = raw_request(REVIEW)
    with _connect(server, files) as tls:
        tls.sendall(head.replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n"))
        assert tls.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        tls.sendall(body)
        response = read_response(tls)
    assert response.startswith(b"HTTP/1.1 200 OK")
    assert orjson.loads(response.partition(b"\r\n\r\n")[2])["response"]["uid"] == UID


def test_graceful_shutdown_turns_not_ready_keeps_serving_then_drains(files: Path) -> None:
    settings = settings_for(files, shutdown_delay=0.5)
    server = build(settings)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, "the server to start")
    ctx = client_context(files)
    port = server.port
    try:
        # A request in flight: headers and half the body sent.
        in_flight = ctx.wrap_socket(
            socket.create_connection(("127.0.0.1", server.port), timeout=WAIT), server_hostname="127.0.0.1"
        )
        head, body = raw_request(REVIEW)
        in_flight.sendall(head + body[: len(body) // 2])
        with httpx.Client(verify=ctx) as client:
            assert client.get(url(server, "/readyz")).status_code == 200
            asked_at = time.monotonic()
            server.handle_exit(signal.SIGTERM, None)  # what the signal handler runs

            # Not ready at once, while admissions are still answered (asking clients to reconnect).
            wait_for(lambda: client.get(url(server, "/readyz")).status_code == 503, "not ready")
            answer = client.post(
                url(server, "/validate"), content=REVIEW, headers={"content-type": "application/json"}
            )
            assert answer.status_code == 200 and answer.headers["connection"] == "close"

        # After the delay the listener closes: new connections are refused.
        def refused() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except ConnectionRefusedError:
                return True
            return False

        wait_for(refused, "the listener to close")
        assert time.monotonic() - asked_at >= 0.5
        assert thread.is_alive()  # still draining: the in-flight request holds it

        in_flight.sendall(body[len(body) // 2 :])
        response = read_response(in_flight)
        in_flight.close()
        assert response.startswith(b"HTTP/1.1 200 ")
        assert denied_by_gang(orjson.loads(response.split(b"\r\n\r\n", 1)[1])["response"])
        thread.join(timeout=WAIT)
        assert not thread.is_alive()
    finally:
        server.should_exit = True
        thread.join(timeout=WAIT)


def test_sigterm_stops_the_served_process_cleanly(files: Path) -> None:
    with served_process(files, "--shutdown-delay", "0.3") as (process, _):
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=WAIT)
    assert process.returncode == 0, stderr
    messages = [orjson.loads(line)["msg"] for line in stderr.splitlines() if line.startswith("{")]
    assert messages.index("shutdown requested: not ready, still serving") < messages.index("stopped")


# -- refusing to start ----------------------------------------------------------------------------


def test_a_broken_policy_set_at_start_is_an_error(files: Path) -> None:
    (files / "policies" / "broken.yaml").write_text(BROKEN_POLICY)
    with pytest.raises(PolicyError, match="broken"):
        build(settings_for(files))


@pytest.mark.parametrize(
    ("tls", "args", "message"),
    [
        pytest.param(False, [], "--tls-cert and --tls-key required", id="no-tls-files"),
        pytest.param(False, ["--tls-cert", "/nonexistent/tls.crt", "--tls-key", "/nonexistent/tls.key"],
                     "no such file", id="missing-tls-files"),
        pytest.param(True, ["--self-register"], "cluster access", id="self-register-without-cluster"),
        pytest.param(True, ["--kubeconfig", "/nonexistent/config"], "credentials", id="bad-kubeconfig"),
        pytest.param(True, ["--in-cluster", "--self-register"], "--ca-bundle", id="self-register-without-ca"),
        pytest.param(True, ["--inline-slice", "4", "--request-budget", "4"], "--inline-slice must be",
                     id="inline-slice-not-below-the-budget"),
    ],
)  # fmt: skip
def test_serve_refuses_to_start_with_exit_2(
    files: Path, capsys: pytest.CaptureFixture[str], tls: bool, args: list[str], message: str
) -> None:
    argv = serve_argv(files, *args) if tls else ["serve", "--host", "127.0.0.1", *args]
    assert cli_main([*argv, "--port", "0"]) == 2
    assert message in capsys.readouterr().err


def test_a_negative_inline_slice_is_a_usage_error(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main([*serve_argv(files, "--inline-slice", "-0.1"), "--port", "0"])
    assert exited.value.code == 2
    assert "--inline-slice: must not be negative" in capsys.readouterr().err


def test_the_inline_slice_reaches_the_server_state(files: Path) -> None:
    assert build(replace(settings_for(files), inline_slice=0.0)).state.inline_slice == 0.0
    assert build(settings_for(files)).state.inline_slice == 0.02


def test_serve_with_a_broken_policy_set_exits_2(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (files / "policies" / "broken.yaml").write_text(BROKEN_POLICY)
    assert cli_main(serve_argv(files, "--port", "0")) == 2
    assert "broken.yaml" in capsys.readouterr().err


def test_a_port_in_use_exits_2(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert cli_main(serve_argv(files, "--port", str(port))) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_unusable_tls_files_are_a_server_error(files: Path) -> None:
    (files / "certs" / "tls.key").write_bytes(b"not a key")
    with pytest.raises(ServerError, match="--tls-cert"):
        build(settings_for(files))


def _exception_doc(expires_at: str) -> str:
    return (
        "apiVersion: trainguard.dev/v1alpha1\nkind: PolicyException\n"
        "metadata: {name: legacy-train, namespace: research}\n"
        "spec:\n  policies: [gang-required]\n"
        "  match:\n    workloads: [{namespace: research, name: train}]\n"
        "  justification: migrating to Kueue next sprint\n  owner: research-infra\n"
        f'  expiresAt: "{expires_at}"\n'
    )


def test_the_webhook_honours_exception_files_and_reloads_them(files: Path) -> None:
    exceptions = files / "exceptions.yaml"
    exceptions.write_text(_exception_doc("2999-01-01T00:00:00Z"))
    with (
        running(settings_for(files, exceptions=(str(exceptions),))) as server,
        httpx.Client(verify=client_context(files)) as client,
    ):
        out = validate(client, server)
        assert out["allowed"] is True
        assert "migrating to Kueue next sprint" in out["auditAnnotations"]["gang-required-exempted"]
        # An expired exception exempts nothing, in the webhook as everywhere else.
        exceptions.write_text(_exception_doc("2020-01-01T00:00:00Z"))
        wait_for(lambda: denied_by_gang(validate(client, server)), "the expired exception to stop exempting")
        # A broken file is reported and the last good exceptions stay in force.
        exceptions.write_text("apiVersion: trainguard.dev/v1alpha1\nkind: PolicyException\nspec: {}\n")
        wait_for(
            lambda: metric(server, "trainguard_reloads_total", source="exceptions", result="failure") >= 1,
            "the failure",
        )
        assert denied_by_gang(validate(client, server))


def test_cluster_policy_exceptions_reach_the_engine(files: Path) -> None:
    from webhook.engine import parse_exception

    server = build(settings_for(files))
    exception = parse_exception(
        __import__("yaml").safe_load(_exception_doc("2999-01-01T00:00:00Z")), "cluster"
    )
    server.reloader.set_cluster({}, {}, [exception])
    engine = server.state.engine
    assert engine is not None and list(engine.exceptions) == [exception]

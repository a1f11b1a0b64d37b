"""The webhook under abuse, on a real server on 127.0.0.1: what a client that misbehaves gets back.

Slow or silent clients are cut off, oversized headers refused, deep nesting answered with 400 on
a connection that keeps working, a full server answers 429, a slow decision holds up neither the
probes nor the answer past its budget, and SIGTERM with a slow decision in flight still exits.
The slow decision is real: a policy whose CEL nests three comprehensions over the containers,
evaluated by the pure-Python CEL runtime (cel-expr-python stops such an expression at its
iteration budget, so it cannot be made slow there).
"""

from __future__ import annotations

import contextlib
import select
import signal
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from tests.test_server_metrics_port import validate_count
from tests.test_server_tls import (
    REVIEW,
    UID,
    WAIT,
    client_context,
    denied_by_gang,
    metric,
    read_response,
    running,
    served_process,
    settings_for,
    url,
    wait_for,
)
from webhook.serve.server import WebhookServer

SLOW_POLICY = """\
apiVersion: trainguard.dev/v1alpha1
kind: TrainingPolicy
metadata:
  name: slow
spec:
  mode: Enforce
  match:
    kinds: [Pod]
  validations:
    - expression: >-
        object.spec.containers.all(a, object.spec.containers.all(b,
        object.spec.containers.all(c, a.name != '')))
      message: never fails
"""


def slow_review(containers: int, uid: str = UID) -> bytes:
    """A Pod whose decision under SLOW_POLICY on cel-python grows with containers³: about half a
    second for 20 on an idle machine, seconds on a loaded one. A test that needs a decision still in
    flight holds it (held_decisions) rather than count on its length."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml", "labels": {"trainguard.dev/role": "training"}},
        "spec": {"containers": [{"name": f"c{i}", "image": "x"} for i in range(containers)]},
    }
    return orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": uid, "operation": "CREATE", "namespace": "ml", "object": pod},
        }
    )


@pytest.fixture
def files(files: Path) -> Path:
    (files / "slow").mkdir()
    (files / "slow" / "slow.yaml").write_text(SLOW_POLICY)
    return files


@contextlib.contextmanager
def tls_socket(server: WebhookServer, files: Path) -> Iterator[ssl.SSLSocket]:
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT)
    with client_context(files).wrap_socket(raw, server_hostname="127.0.0.1") as tls:
        yield tls


def post_bytes(body: bytes, *extra_headers: bytes) -> bytes:
    return (
        b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + b"".join(h + b"\r\n" for h in extra_headers)
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


def read_until_closed(tls: ssl.SSLSocket, limit: float) -> tuple[bytes, bool]:
    """Everything the server sends within `limit` seconds, and whether it closed the connection."""
    data = b""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        tls.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = tls.recv(65536)
        except TimeoutError:
            return data, False
        except (ConnectionResetError, ssl.SSLError):
            return data, True
        if not chunk:
            return data, True
        data += chunk
    return data, False


# -- slow and silent clients ----------------------------------------------------------------------


def trickle_and_read(tls: ssl.SSLSocket, data: bytes, every: float, limit: float) -> tuple[bytes, bool]:
    """Send `data` a byte every `every` seconds while reading what the server sends, for at most
    `limit` seconds; returns what was read and whether the server closed the connection.

    One thread does both: an SSL socket read and written from two threads at once is undefined in
    OpenSSL, and shows up as spurious SSL errors that lose what was received."""
    received = b""
    pending = list(data)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if pending:
            try:
                tls.sendall(bytes([pending.pop(0)]))
            except (OSError, ValueError):  # closed by the server: read what it sent
                pending = []
        readable, _, _ = select.select([tls], [], [], every)
        if not readable and not tls.pending():
            continue
        tls.settimeout(every)
        try:
            chunk = tls.recv(65536)
        except TimeoutError:
            continue
        except (ConnectionResetError, ssl.SSLError):
            return received, True
        if not chunk:
            return received, True
        received += chunk
    return received, False


def send_and_read(tls: ssl.SSLSocket, sent: bytes, trickled: bytes | None) -> tuple[bytes, bool]:
    """Send `sent`, then trickle `trickled` a byte every 50 ms while reading: what the server sent
    within WAIT seconds, and whether it closed the connection."""
    tls.sendall(sent)
    if trickled is not None:
        return trickle_and_read(tls, trickled, 0.05, WAIT)
    return read_until_closed(tls, WAIT)


SLOW_CLIENTS = [
    pytest.param(b"", None, "request headers not received", id="connects-and-says-nothing"),
    pytest.param(
        b"", b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 200,
        "request headers not received", id="headers-a-byte-at-a-time",
    ),
    pytest.param(
        b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 1000\r\n\r\n",
        None, "request body not received", id="content-length-and-no-body",
    ),
    pytest.param(
        post_bytes(REVIEW)[:-1], None, "request body not received", id="body-without-its-last-byte",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("sent", "trickled", "message"), SLOW_CLIENTS)
def test_a_slow_or_silent_client_gets_408_and_is_closed(
    files: Path, sent: bytes, trickled: bytes | None, message: str
) -> None:
    settings = settings_for(files, header_timeout=0.5, body_timeout=0.5)
    with running(settings) as server, tls_socket(server, files) as tls:
        data, closed = send_and_read(tls, sent, trickled)
        assert closed, "the server kept the connection open"
        assert data.startswith(b"HTTP/1.1 408 "), data[:200]
        assert message.encode() in data
        # The server itself is unharmed.
        with httpx.Client(verify=client_context(files)) as client:
            assert client.get(url(server, "/healthz")).status_code == 200


# After answered requests on the same connection (whose timeouts were set and moved on), a slow
# request is still cut off by its own timeout; a body timeout far shorter than the header timeout
# is kept, though the connection's timer was last set for the later header deadline. Headers
# trickled after an answered request are cut off by closing only: the connection's last response
# has been written, and a second status line could follow a response still on its way.
_TRICKLED = b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 200
_WITHHELD = post_bytes(REVIEW)[:-1]
KEPT_ALIVE_THEN_SLOW = [
    pytest.param(1, b"", _TRICKLED, (0.5, 0.5), b"", id="one-answered-then-headers-a-byte-at-a-time"),
    pytest.param(20, b"", _TRICKLED, (0.5, 0.5), b"", id="twenty-answered-then-headers-a-byte-at-a-time"),
    pytest.param(
        1, _WITHHELD, None, (0.5, 0.5), b"HTTP/1.1 408 ", id="one-answered-then-body-without-its-last-byte"
    ),
    pytest.param(
        20, _WITHHELD, None, (60.0, 0.5), b"HTTP/1.1 408 ",
        id="twenty-answered-then-body-withheld-header-timeout-far-longer",
    ),
    pytest.param(
        0, _WITHHELD, None, (60.0, 0.5), b"HTTP/1.1 408 ", id="first-body-withheld-header-timeout-far-longer"
    ),
]  # fmt: skip


@pytest.mark.parametrize(("answered", "sent", "trickled", "timeouts", "answer"), KEPT_ALIVE_THEN_SLOW)
def test_a_slow_request_after_answered_ones_is_cut_off(
    files: Path,
    answered: int,
    sent: bytes,
    trickled: bytes | None,
    timeouts: tuple[float, float],
    answer: bytes,
) -> None:
    header_timeout, body_timeout = timeouts
    settings = settings_for(files, header_timeout=header_timeout, body_timeout=body_timeout)
    with running(settings) as server, tls_socket(server, files) as tls:
        for _ in range(answered):
            tls.sendall(post_bytes(REVIEW))
            assert read_response(tls).startswith(b"HTTP/1.1 200 ")
        # WAIT is far below the longer header timeout: only the body's own timeout ends it in time.
        data, closed = send_and_read(tls, sent, trickled)
        assert closed, "the server kept the connection open"
        assert data.startswith(answer) and (answer or not data), data[:200]
        if answer:
            assert b"request body not received within 0.5 s" in data


def test_a_client_that_never_starts_the_tls_handshake_is_disconnected(files: Path) -> None:
    with (
        running(settings_for(files, header_timeout=0.5)) as server,
        socket.create_connection(("127.0.0.1", server.port), timeout=WAIT) as raw,
    ):
        started = time.monotonic()
        try:
            data = raw.recv(1024)  # nothing was sent: the next thing is the server hanging up
        except ConnectionResetError:
            data = b""
        waited = time.monotonic() - started
    assert data == b""
    assert waited < WAIT


# -- clients that withhold their body: no slot held, bytes bounded ----------------------------------


def head_and_part(declared: int, sent: int) -> bytes:
    """A /validate request's headers declaring `declared` bytes of body, and the first `sent` of them."""
    return post_bytes(b"x" * declared)[: -declared or None] + b"x" * sent


WITHHELD = [
    pytest.param(100_000, 0, id="headers-and-no-body"),
    pytest.param(len(REVIEW), len(REVIEW) // 2, id="half-a-review"),
    pytest.param(1024 * 1024, 1000, id="a-large-body-barely-begun"),
]


@pytest.mark.parametrize(("declared", "sent"), WITHHELD)
def test_withheld_bodies_hold_no_slot_and_a_full_review_is_answered(
    files: Path, declared: int, sent: int
) -> None:
    # Two slots and two places in the queue: before bodies came first, four such clients were
    # enough to turn every other admission into a 429 until their body timeout.
    settings = settings_for(files, max_in_flight=2, max_queued=2, queue_wait=0.2, body_timeout=60.0)
    stalled = 12
    with running(settings) as server, contextlib.ExitStack() as stack:
        for _ in range(stalled):
            tls = stack.enter_context(tls_socket(server, files))
            tls.sendall(head_and_part(declared, sent))
        wait_for(
            lambda: server.state.bodies.receiving == stalled, "the server to read every request's headers"
        )
        with httpx.Client(verify=client_context(files)) as client:
            answers = [
                client.post(
                    url(server, "/validate"), content=REVIEW, headers={"content-type": "application/json"}
                )
                for _ in range(5)
            ]
        assert [a.status_code for a in answers] == [200] * 5
        assert all(denied_by_gang(a.json()["response"]) for a in answers)
        assert server.state.bodies.receiving == stalled  # still waiting for their bodies
        assert metric(server, "trainguard_admissions_in_flight") == 0
        assert metric(server, "trainguard_admissions_waiting") == 0


def padded(pad: int) -> bytes:
    review = orjson.loads(REVIEW)
    review["request"]["object"]["metadata"]["annotations"]["pad"] = "x" * pad
    return orjson.dumps(review)


def test_large_bodies_on_their_way_share_a_byte_budget(files: Path) -> None:
    # A 1 MiB body limit: bodies on their way may hold 4 MiB (past their first 64 KiB each). Four
    # withheld just before their last byte hold nearly all of it; a fifth large body waits for room
    # while a small review is answered, and is received once one of the four leaves.
    settings = settings_for(files, max_body_bytes=1024 * 1024, body_timeout=60.0, request_budget=60.0)
    with running(settings) as server, contextlib.ExitStack() as stack:
        withheld = []
        for _ in range(4):
            withheld.append(stack.enter_context(tls_socket(server, files)))
            withheld[-1].sendall(head_and_part(1024 * 1024, 1024 * 1024 - 1))
        wait_for(
            lambda: server.state.bodies.reserved == 4 * (1024 * 1024 - 1 - 64 * 1024),
            "four large bodies to be received but their last byte",
        )
        answers: list[Any] = []
        waiting = threading.Thread(
            target=post_review, args=(files, server, padded(900_000), answers), daemon=True
        )
        waiting.start()
        wait_for(lambda: server.state.bodies.waiting == 1, "the fifth large body to wait for room")
        with httpx.Client(verify=client_context(files)) as client:
            small = client.post(
                url(server, "/validate"), content=REVIEW, headers={"content-type": "application/json"}
            )
        assert server.state.bodies.waiting == 1 and not answers  # still waiting
        withheld[0].close()  # one withheld body leaves: its bytes are given back
        waiting.join(timeout=WAIT * 3)
        assert server.state.bodies.receiving == 3  # the other three still withheld
    assert small.status_code == 200 and denied_by_gang(small.json()["response"])
    assert answers and answers[0].status_code == 200
    assert denied_by_gang(answers[0].json()["response"])


# -- header limits --------------------------------------------------------------------------------

HEADER_ABUSE = [
    pytest.param([b"X-H%d: v" % i for i in range(101)], "more than 100 request headers", id="101-headers"),
    pytest.param([b"X-Big: " + b"a" * 70_000], "exceed 65536 bytes", id="one-70-KB-header"),
    pytest.param([b"X-H%d: %s" % (i, b"a" * 1000) for i in range(80)], "exceed 65536 bytes", id="80-KB-in-80"),
]  # fmt: skip


@pytest.mark.parametrize(("headers", "message"), HEADER_ABUSE)
def test_too_many_or_too_large_headers_get_431_and_close(
    files: Path, headers: list[bytes], message: str
) -> None:
    with running(settings_for(files)) as server, tls_socket(server, files) as tls:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, ssl.SSLError):
            tls.sendall(post_bytes(REVIEW, *headers))
        data, closed = read_until_closed(tls, WAIT)
    assert data.startswith(b"HTTP/1.1 431 "), data[:200]
    assert message.encode() in data
    assert closed


def test_headers_that_never_end_are_cut_off_at_the_limit(files: Path) -> None:
    """16 MiB of one header line, sent as fast as possible: 431 once the first 64 KiB are in.

    (What it costs the server in memory is measured by tests/bench/bench_abuse.py.)
    """
    with running(settings_for(files)) as server, tls_socket(server, files) as tls:
        tls.sendall(b"POST /validate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Endless: ")
        sent = 0
        with contextlib.suppress(BrokenPipeError, ConnectionResetError, ssl.SSLError, TimeoutError):
            tls.settimeout(WAIT)
            while sent < 16 * 1024 * 1024:
                tls.sendall(b"a" * 65536)
                sent += 65536
        data, closed = read_until_closed(tls, WAIT)
    assert closed
    assert data.startswith(b"HTTP/1.1 431 "), data[:200]


# -- deep nesting ---------------------------------------------------------------------------------


def nested(depth: int) -> bytes:
    """`{"kind": {"kind": … "Pod" …}}`, `depth` levels, as JSON text (orjson will not write it that deep)."""
    return b'{"kind":' * depth + b'"Pod"' + b"}" * depth


def review_with(**request: bytes) -> bytes:
    fields = {"uid": orjson.dumps(UID), "operation": b'"CREATE"', "object": b'{"kind":"Pod"}'} | request
    inner = b",".join(b'"%s":%s' % (k.encode(), v) for k, v in fields.items())
    return b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{%s}}' % inner


DEEP = [
    pytest.param(review_with(kind=nested(990)), "nested deeper than 100 levels", id="kind-kind-990-levels"),
    pytest.param(
        review_with(object=b'{"kind":"Pod","spec":%s}' % nested(500)), "nested deeper than 100", id="object-500-levels"
    ),
    pytest.param(b'{"a":' * 2000 + b"1" + b"}" * 2000, "malformed JSON", id="json-2000-levels"),
    pytest.param(review_with(kind=b'{"kind":["Pod"]}'), "request.kind.kind must be a string", id="kind-a-list"),
    pytest.param(review_with(name=b'{"x":1}'), "request.name must be a string", id="name-an-object"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "message"), DEEP)
def test_deep_or_odd_reviews_get_400_and_the_connection_then_serves_a_valid_one(
    files: Path, body: bytes, message: str
) -> None:
    with running(settings_for(files)) as server, tls_socket(server, files) as tls:
        tls.sendall(post_bytes(body))
        first = read_response(tls)
        assert first.startswith(b"HTTP/1.1 400 "), first[:300]
        assert message in orjson.loads(first.split(b"\r\n\r\n", 1)[1])["error"]
        tls.sendall(post_bytes(REVIEW))  # the same keep-alive connection
        second = read_response(tls)
    assert second.startswith(b"HTTP/1.1 200 "), second[:300]
    assert denied_by_gang(orjson.loads(second.split(b"\r\n\r\n", 1)[1])["response"])


# -- slow decisions: probes, other requests, the budget, the slot limit ---------------------------


def slow_settings(files: Path, **overrides: Any) -> Any:
    return replace(settings_for(files, policies=(str(files / "slow"),), cel="cel-python"), **overrides)


def post_review(files: Path, server: WebhookServer, body: bytes, out: list[Any]) -> None:
    with httpx.Client(verify=client_context(files), timeout=60) as client:
        out.append(
            client.post(url(server, "/validate"), content=body, headers={"content-type": "application/json"})
        )


@contextlib.contextmanager
def held_decisions(server: WebhookServer, which: Callable[[Any], bool]) -> Iterator[None]:
    """The decisions of the objects `which` selects wait until the block ends: whether they are
    still in flight when the test looks must not depend on how fast this machine decides (an idle
    one decides the slow review in half a second, a loaded one takes many)."""
    engine = server.state.engine
    assert engine is not None
    decide, release = engine.decide, threading.Event()

    def held(inp: Any, **options: Any) -> Any:
        if which(inp.object):
            release.wait(WAIT)
        return decide(inp, **options)

    engine.decide = held  # type: ignore[method-assign]
    try:
        yield
    finally:
        release.set()


def many_containers(obj: Any) -> bool:
    return len(obj["spec"]["containers"]) > 2


def test_probes_are_answered_while_a_slow_decision_runs(files: Path) -> None:
    with running(slow_settings(files, request_budget=30.0)) as server:
        answers: list[Any] = []
        slow = threading.Thread(
            target=post_review, args=(files, server, slow_review(20), answers), daemon=True
        )
        with held_decisions(server, many_containers):
            slow.start()
            wait_for(lambda: server.state.threads.running == 1, "the slow decision to start")
            with httpx.Client(verify=client_context(files)) as client:
                probes = [
                    client.get(url(server, path)).status_code for path in ("/healthz", "/readyz", "/healthz")
                ]
            assert server.state.threads.running == 1, "the decision ended before the probes were answered"
        slow.join(timeout=60)
    assert probes == [200, 200, 200]
    assert answers[0].status_code == 200 and answers[0].json()["response"]["allowed"] is True


def test_a_decision_past_its_budget_is_answered_fail_closed_in_time(files: Path) -> None:
    with running(slow_settings(files, request_budget=0.5)) as server:
        answers: list[Any] = []
        with held_decisions(server, many_containers):
            post_review(files, server, slow_review(20), answers)
            assert server.state.threads.running == 1, "the answer waited for the decision"
        wait_for(lambda: server.state.threads.running == 0, "the abandoned decision to end", timeout=60)
    out = answers[0].json()["response"]
    assert out["uid"] == UID and out["allowed"] is False
    assert "time budget of 0.5 s" in out["status"]["message"]


def test_a_full_server_answers_429_with_retry_after(files: Path) -> None:
    settings = slow_settings(files, request_budget=30.0, max_in_flight=1, max_queued=1, queue_wait=0.2)
    with running(settings) as server:
        answers: list[Any] = []
        slow = threading.Thread(
            target=post_review, args=(files, server, slow_review(18), answers), daemon=True
        )
        with held_decisions(server, many_containers):
            slow.start()
            wait_for(lambda: server.state.threads.running == 1, "the slow decision to start")
            with httpx.Client(verify=client_context(files)) as client:
                refused = client.post(
                    url(server, "/validate"),
                    content=slow_review(2),
                    headers={"content-type": "application/json"},
                )
                ready = client.get(url(server, "/readyz"))
        slow.join(timeout=60)
        after: list[Any] = []
        post_review(files, server, slow_review(2), after)
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "1"
    assert "too many admissions in progress" in refused.json()["error"]
    assert ready.status_code == 200  # busy is not unready: the probes stay green
    assert after[0].status_code == 200  # and the slot is free again


# -- SIGTERM with a slow decision in flight -------------------------------------------------------


@pytest.mark.parametrize("workers", [pytest.param(1, id="one-process"), pytest.param(2, id="two-workers")])
def test_sigterm_with_a_slow_decision_in_flight_exits_within_the_grace_period(
    files: Path, workers: int
) -> None:
    grace = 10.0  # what a Deployment would give it here
    with served_process(
        files,
        *("--cel", "cel-python", "--workers", str(workers)),
        *("--shutdown-delay", "0.5", "--graceful-timeout", "2", "--request-budget", "60"),
        policies="slow",
    ) as (process, port):
        answers: list[Any] = []

        def slow() -> None:
            with (
                contextlib.suppress(httpx.HTTPError),
                httpx.Client(verify=client_context(files), timeout=60) as c,
            ):
                body = slow_review(40)  # about 4 s of CEL on an idle machine, longer on a loaded one
                answers.append(
                    c.post(
                        f"https://127.0.0.1:{port}/validate",
                        content=body,
                        headers={"content-type": "application/json"},
                    )
                )

        threading.Thread(target=slow, daemon=True).start()
        time.sleep(1.0)  # the decision is running
        asked = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=grace)
        took = time.monotonic() - asked
    assert process.returncode == 0, stderr[-2000:]
    assert took < grace
    messages = [orjson.loads(line)["msg"] for line in stderr.splitlines() if line.startswith("{")]
    assert "shutdown requested: not ready, still serving" in messages


TWO_WORKERS = ("--workers", "2", "--shutdown-delay", "0")


def test_workers_stop_when_their_supervisor_is_killed(files: Path) -> None:
    with served_process(files, *TWO_WORKERS, stderr=subprocess.DEVNULL) as (process, _):
        children_file = Path(f"/proc/{process.pid}/task/{process.pid}/children")
        workers = wait_for(lambda: [int(p) for p in children_file.read_text().split()], "the workers")
        assert len(workers) == 2
        process.kill()
        process.wait(WAIT)

        def gone() -> bool:
            return not any(Path(f"/proc/{pid}").exists() for pid in workers)

        wait_for(gone, "the workers to stop")


def large_slow_review(containers: int, pad: int) -> bytes:
    review = orjson.loads(slow_review(containers))
    review["request"]["object"]["metadata"]["annotations"] = {"pad": "x" * pad}
    return orjson.dumps(review)


def test_large_bodies_share_a_byte_budget_and_small_ones_pass(files: Path) -> None:
    # 1 MiB body limit: two bodies of 0.9 MB fit the 2 MiB budget of large bodies, a third does not.
    settings = slow_settings(files, request_budget=30.0, max_body_bytes=1024 * 1024)
    with running(settings) as server:
        # The two large decisions are held until the third large body and a small one have been
        # answered (a loaded machine can take longer to upload 0.9 MB than to decide it).
        answers: list[Any] = []
        large = [
            threading.Thread(
                target=post_review, args=(files, server, large_slow_review(2, 900_000), answers), daemon=True
            )
            for _ in range(2)
        ]
        third: list[Any] = []
        small: list[Any] = []
        with held_decisions(server, lambda obj: "pad" in (obj["metadata"].get("annotations") or {})):
            for thread in large:
                thread.start()
            wait_for(lambda: server.state.threads.running == 2, "both large decisions to start")
            post_review(files, server, large_slow_review(2, 900_000), third)
            post_review(files, server, slow_review(2), small)
        for thread in large:
            thread.join(timeout=60)
    assert third[0].status_code == 429 and third[0].headers["retry-after"] == "1"
    assert "too many large admissions" in third[0].json()["error"]
    assert small[0].status_code == 200
    assert [a.status_code for a in answers] == [200, 200]


def test_with_two_workers_every_scrape_counts_every_admission(files: Path) -> None:
    with served_process(files, *TWO_WORKERS) as (process, port):
        base = f"https://127.0.0.1:{port}"
        for _ in range(12):  # a new connection each: the kernel spreads them over the workers
            with httpx.Client(verify=client_context(files), timeout=WAIT) as client:
                answer = client.post(
                    f"{base}/validate", content=REVIEW, headers={"content-type": "application/json"}
                )
                assert denied_by_gang(answer.json()["response"])
        scrapes = []
        for _ in range(6):
            with httpx.Client(verify=client_context(files), timeout=WAIT) as client:
                scrapes.append(client.get(f"{base}/metrics").text)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=WAIT)
    assert process.returncode == 0, stderr[-2000:]
    pids = {orjson.loads(line).get("worker") for line in stderr.splitlines() if '"admission"' in line}
    for text in scrapes:
        assert validate_count(text) == 12, text
        ready_lines = [line for line in text.splitlines() if line.startswith("trainguard_ready")]
        assert ready_lines and all(line.endswith(" 1.0") for line in ready_lines), ready_lines
    assert pids  # the admission log lines say which worker decided

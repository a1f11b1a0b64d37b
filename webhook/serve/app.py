"""The webhook's HTTP layer: an ASGI app over admission_review.py and the engine, built by create_app().

Errors are reported in two separate ways (as kopf and Kyverno do):

- a call that is not a usable AdmissionReview (wrong Content-Type, body over the limit, malformed
  JSON, no request, wrong kind, object not a mapping) gets an HTTP 4xx with `{"error": "…"}`, and
  the API server applies the webhook's failurePolicy;
- everything else gets HTTP 200 with an AdmissionReview. A policy outcome is `allowed` true or
  false. An object the adapters cannot read (an InputError naming the field) is denied on
  /validate and left unmutated, with a warning, on /mutate. An unexpected exception inside the
  engine is handled the same way, naming the error, and is logged and counted: never a 500.

Until a policy set is installed the admission endpoints answer 503 (the server cannot decide yet,
so failurePolicy does) and /readyz is not ready.

Isolation (DESIGN §6): an admission's body is received first (isolation.BodyBudget bounds the
bytes of large bodies on their way), then it takes a slot (isolation.Slots: a few at once, a
short queue, else 429 with Retry-After), so a client withholding its body holds no slot; it is
parsed and decided on the event loop within a slice, or on a deciding thread, so /healthz and
/readyz never wait behind a decision. Each admission has a time budget: policies not evaluated
when it runs out get their failurePolicy outcome, and an answer still not ready at the budget is
the fail-closed one (deny on /validate, no patch on /mutate), with a message saying so, well
before the API server's timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from time import monotonic, perf_counter
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from webhook.engine import Adaptations, Decision, Deferred, Engine, Finding
from webhook.errors import InputError
from webhook.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from webhook.metrics import Metrics
from webhook.serve import admission_review, logs, runtime_tuning
from webhook.serve.isolation import BodyBudget, Busy, DecisionThreads, Slots
from webhook.serve.readiness_notes import Notes
from webhook.serve.settings import Settings, default

LARGE_BODY_BYTES = 256 * 1024  # a 30-env 8-GPU training Pod's review is about 12 KB
# Bodies up to this size are decided on the event loop, within ServerState.inline_slice (larger
# ones, and the rare small one that needs longer, on a deciding thread).
INLINE_BODY_BYTES = 64 * 1024
RECEIVING_BUDGET_BODIES = 4  # bodies of the largest size that may be on their way at once, per worker
LARGE_BUDGET_BODIES = 2  # bodies of the largest size that may be decided at once, per worker
RETRY_AFTER_SECONDS = 1
_JSON = "application/json"
_INTERNAL = "trainguard"  # the "policy" named by findings about the webhook itself


@dataclass(eq=False)
class ServerState:
    """What the routes read: the current Engine (swapped whole, by one assignment), readiness, metrics.

    Read and written on the event loop's thread only (the deciding threads get the engine and the
    decoded review as arguments); `install()` is the only writer of `engine`.
    """

    metrics: Metrics = field(default_factory=lambda: Metrics(sample_every=default("metrics_sample_every")))
    engine: Engine | None = None
    shutting_down: bool = False
    closing_connections: bool = False  # a retiring worker: every answer asks the client to reconnect
    admissions: int = 0  # admission calls answered by this worker (what recycling counts)
    max_body_bytes: int = default("max_body_bytes")
    budget: float = default("request_budget")
    large_bytes_in_flight: int = 0
    inline_body_bytes: int = INLINE_BODY_BYTES  # 0: every decision on a deciding thread
    inline_slice: float = default("inline_slice")  # seconds an inline decision may take before deferring
    # What mutating calls leave for their validating calls, shared by every engine installed
    adaptations: Adaptations | None = None
    # What a side task (the audit) cannot do, by task: /readyz says it without failing admission.
    notes: Notes = field(default_factory=Notes)
    slots: Slots = field(
        default_factory=lambda: Slots(default("max_in_flight"), default("max_queued"), default("queue_wait"))
    )
    threads: DecisionThreads = field(default_factory=lambda: DecisionThreads(default("decision_threads")))
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger(logs.ADMISSION_LOGGER))
    policy_error_log: logs.RateLimited = field(
        default_factory=lambda: logs.RateLimited(logging.getLogger(logs.ADMISSION_LOGGER))
    )
    # Large bodies being received at once: a body withheld after its headers holds its bytes here
    # (until its body timeout), never a slot. Sized from max_body_bytes.
    bodies: BodyBudget = field(init=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> ServerState:
        metrics = Metrics(sample_every=settings.metrics_sample_every)
        return cls(
            metrics=metrics,
            adaptations=Adaptations(
                settings.adaptation_bytes,
                on_lookup=metrics.observe_adaptation,
                ahead_seconds=settings.inline_slice,
            ),
            max_body_bytes=settings.max_body_bytes,
            budget=settings.request_budget,
            inline_slice=settings.inline_slice,
            slots=Slots(settings.max_in_flight, settings.max_queued, settings.queue_wait),
            threads=DecisionThreads(settings.decision_threads),
        )

    @property
    def large_body_budget(self) -> int:
        """Bytes of large bodies read or decided at once."""
        return LARGE_BUDGET_BODIES * self.max_body_bytes

    def __post_init__(self) -> None:
        self.bodies = BodyBudget(RECEIVING_BUDGET_BODIES * self.max_body_bytes)
        self.metrics.set_in_flight(lambda: self.slots.busy, lambda: self.slots.waiting)

    @property
    def ready(self) -> bool:
        return self.engine is not None and not self.shutting_down

    def install(self, engine: Engine) -> None:
        self.engine = engine
        engine.fallbacks.observe(self.metrics.observe_fallback)
        self.metrics.ready.set(self.ready)
        self.metrics.policy_set_policies.set(len(engine.policies.policies))

    def begin_shutdown(self) -> None:
        self.shutting_down = True
        self.metrics.ready.set(0)


@dataclass(frozen=True, slots=True)
class _Endpoint:
    name: str
    mutate: bool  # run the mutating policies and answer with their patch
    validate: bool  # run the validating policies


VALIDATE = _Endpoint("validate", mutate=False, validate=True)
MUTATE = _Endpoint("mutate", mutate=True, validate=False)


class _Rejected(Exception):
    """A call we answer with an HTTP error instead of an AdmissionReview."""

    def __init__(self, status: int, reason: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason  # metric label
        self.message = message
        self.headers = headers


@dataclass(slots=True)
class _Answer:
    """What the deciding thread hands back for one admission."""

    parsed: admission_review.ParsedReview
    decision: Decision
    error: Exception | None = None
    timings: dict[str, float] | None = None


def create_app(state: ServerState, *, with_metrics: bool = True) -> ASGIApp:
    """The ASGI app: /validate, /mutate, /healthz, /readyz, /metrics over `state`.

    Without `with_metrics`, /metrics is not found here: it has a listener of its own
    (`create_metrics_app`), so that a NetworkPolicy can let scrapers reach it and nothing else.

    A POST to /validate or /mutate, nearly every call the server gets, goes straight to its
    handler; everything else (probes, metrics, a wrong method or path, lifespan) goes through
    Starlette's routing. The admission handler answers every exception itself (_guarded), so
    Starlette's error middleware, router, Request and per-route wrapper would only add work to it:
    together about a tenth of the server's time outside the engine.
    """

    async def healthz(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type=_JSON)

    async def readyz(request: Request) -> Response:
        engine = state.engine
        if state.shutting_down:
            return _json(503, {"status": "not ready", "reason": "shutting down"})
        if engine is None:
            return _json(503, {"status": "not ready", "reason": "no policy set loaded"})
        ready: dict[str, Any] = {"status": "ready", "policies": len(engine.policies.policies)}
        notes = state.notes.current()
        if notes:
            # Admission is ready; what is not (reports without their Lease) is said, not failed:
            # a failed probe would take admission down for the audit's sake.
            ready["not ready"] = notes
        return _json(200, ready)

    # The same handlers as routes: a GET is answered 405 naming POST, as on any other route.
    async def validate(request: Request) -> Response:
        return await _guarded(state, VALIDATE, request.scope, request.receive)

    async def mutate(request: Request) -> Response:
        return await _guarded(state, MUTATE, request.scope, request.receive)

    routes = Starlette(
        routes=[
            Route("/validate", validate, methods=["POST"]),
            Route("/mutate", mutate, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            *([Route("/metrics", _metrics_handler(state), methods=["GET"])] if with_metrics else []),
        ]
    )
    admissions = {"/validate": VALIDATE, "/mutate": MUTATE}

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = admissions.get(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None or scope["method"] != "POST":
            await routes(scope, receive, send)
            return
        response = await _guarded(state, endpoint, scope, receive)
        await response(scope, receive, send)

    return app


def create_metrics_app(state: ServerState) -> ASGIApp:
    """The metrics listener's app: /metrics over `state`, every other path not found."""
    return Starlette(routes=[Route("/metrics", _metrics_handler(state), methods=["GET"])])


def _metrics_handler(state: ServerState) -> Callable[[Request], Awaitable[Response]]:
    async def metrics(request: Request) -> Response:
        return Response(state.metrics.render(), headers={"content-type": METRICS_CONTENT_TYPE})

    return metrics


async def _guarded(state: ServerState, endpoint: _Endpoint, scope: Scope, receive: Receive) -> Response:
    """_admit(), with the last word on anything it did not foresee: a 400 naming the error, never a 500."""
    start = perf_counter()
    state.admissions += 1
    try:
        return await _admit(state, endpoint, scope, receive, start)
    except Exception as exc:  # RecursionError, MemoryError, a bug: the API server applies failurePolicy
        state.metrics.observe_engine_error(endpoint.name)
        state.logger.error(
            "admission call failed",
            extra={
                "endpoint": endpoint.name,
                "error": type(exc).__name__,
                "error_at": logs.error_location(exc),
            },
        )
        failed = _Rejected(400, "internal-error", f"the request could not be handled ({type(exc).__name__})")
        failed.headers = {"connection": "close"}  # what was left unread of the body must not follow
        return _reject(state, endpoint, failed, start)


async def _admit(
    state: ServerState, endpoint: _Endpoint, scope: Scope, receive: Receive, start: float
) -> Response:
    deadline = monotonic() + state.budget
    # The whole body first, under its own limits (protocol: body timeout; BodyBudget: bytes), and
    # only then a slot: a client that withholds its body never holds up anyone else's admission.
    try:
        body = await _receive(state, scope, receive, deadline)
    except _Rejected as exc:
        return _reject(state, endpoint, exc, start)
    except ClientDisconnect:
        return _reject(state, endpoint, _Rejected(400, "client-disconnect", "client went away"), start)
    try:
        reserved = _reserve_large_body(state, len(body))
    except _Rejected as exc:
        return _reject(state, endpoint, exc, start)
    try:
        await state.slots.acquire()
    except Busy:
        state.large_bytes_in_flight -= reserved
        busy = _Rejected(
            429,
            "busy",
            f"too many admissions in progress ({state.slots.size} deciding, {state.slots.queue} waiting); "
            f"retry in {RETRY_AFTER_SECONDS} s",
            {"retry-after": str(RETRY_AFTER_SECONDS)},
        )
        return _reject(state, endpoint, busy, start)
    except BaseException:  # cancelled while waiting (a drain): the reservation goes with it
        state.large_bytes_in_flight -= reserved
        raise
    work: asyncio.Future[_Answer] | None = None
    try:
        engine = state.engine
        if engine is None:
            return _reject(state, endpoint, _Rejected(503, "not-ready", "no policy set is loaded yet"), start)
        try:
            raw = admission_review.loads(body)  # on the loop: fast, and the uid lets a late answer be used
        except admission_review.ReviewError as exc:
            return _reject(state, endpoint, _Rejected(400, "malformed", exc.describe()), start)
        inline = len(body) <= state.inline_body_bytes and engine.steps_bounded
        timings: dict[str, float] | None = {} if state.metrics.sample(endpoint.name) else None
        try:
            if inline:
                # Most admissions: decided here, within a slice (state.inline_slice, and the
                # engine's cap on launch-line reading); handing them to a thread costs about half
                # a millisecond of CPU and more of latency. A long one defers to a thread,
                # decided afresh there, so /healthz never waits more than a slice.
                try:
                    answer = _decide(
                        engine, endpoint, raw, body, deadline, timings, monotonic() + state.inline_slice
                    )
                    state.metrics.observe_placement("inline")
                    return _respond(state, endpoint, answer, start)
                except Deferred:
                    state.metrics.observe_placement("deferred")
                    timings = {} if timings is not None else None
            else:
                state.metrics.observe_placement("thread")
            work = state.threads.submit(lambda: _decide(engine, endpoint, raw, body, deadline, timings))
            # The engine stops between policies at the deadline; a single step that overruns it
            # (an object too large to adapt in time) is answered here, a little later.
            answer = await asyncio.wait_for(asyncio.shield(work), max(0.0, deadline - monotonic()) + 0.25)
        except admission_review.ReviewError as exc:
            return _reject(state, endpoint, _Rejected(400, "malformed", exc.describe()), start)
        except TimeoutError:
            return _too_slow(state, endpoint, admission_review.peek_uid(raw), start)
        return _respond(state, endpoint, answer, start)
    finally:

        def release(_: object = None) -> None:
            state.slots.release()
            state.large_bytes_in_flight -= reserved
            if reserved:
                # Once this admission's buffers are gone (after the answer is on its way).
                asyncio.get_running_loop().call_soon(runtime_tuning.give_back_free_memory)

        if work is not None and not work.done():
            # The thread is still deciding: its slot stays taken until it ends, so a pile of
            # slow requests turns into 429s, not into unbounded work.
            work.add_done_callback(release)
        else:
            release()


async def _receive(state: ServerState, scope: Scope, receive: Receive, deadline: float) -> bytes:
    """The request's body, checked against its headers and received within the body budget."""
    content_type, declared = _body_headers(scope)
    if content_type is None or content_type.partition(";")[0].strip().lower() != _JSON:
        raise _Rejected(400, "content-type", f"header Content-Type must be {_JSON}, got {content_type!r}")
    if declared is not None and not declared.isdigit():
        raise _Rejected(400, "malformed", f"header Content-Length is not a number: {declared!r}")
    # No Content-Length (a chunked body): it may be as large as the limit allows.
    size = int(declared) if declared is not None else state.max_body_bytes
    if size > state.max_body_bytes:
        raise _too_large(state.max_body_bytes)
    bodies = state.bodies
    bodies.receiving += 1
    held = [0]  # bytes of this body counted against the budget so far
    try:
        return await _read_body(receive, state.max_body_bytes, bodies, held, deadline)
    finally:
        bodies.receiving -= 1
        bodies.release(held[0])


def _reserve_large_body(state: ServerState, size: int) -> int:
    """Bytes reserved for deciding a large body, or _Rejected (429) when large bodies use up their budget.

    A decision holds about 15 times its body in memory (the decoded object, the workload view,
    the CEL values): a few slots of 3 MiB bodies would need more memory than many slots of the
    usual 10 KB. So bodies past LARGE_BODY_BYTES also draw on a byte budget per worker while they
    wait for a slot and are decided; one large body is always let through, so any body under the
    size limit can be decided.
    """
    if size < LARGE_BODY_BYTES:
        return 0
    if state.large_bytes_in_flight and state.large_bytes_in_flight + size > state.large_body_budget:
        raise _Rejected(
            429,
            "busy-large",
            f"too many large admissions in progress ({state.large_bytes_in_flight} bytes of bodies over "
            f"{LARGE_BODY_BYTES} bytes); retry in {RETRY_AFTER_SECONDS} s",
            {"retry-after": str(RETRY_AFTER_SECONDS)},
        )
    state.large_bytes_in_flight += size
    return size


def _decide(
    engine: Engine,
    endpoint: _Endpoint,
    raw: Any,
    body: bytes,
    deadline: float,
    timings: dict[str, float] | None,
    yield_at: float | None = None,
) -> _Answer:
    """Check the review decoded from `body` (ReviewError propagates), then decide; nothing else
    escapes but Deferred, which only a `yield_at` (an inline decision) raises."""
    try:
        parsed = admission_review.parse_review(raw, body, deadline=deadline, yield_at=yield_at)
    except admission_review.ReviewError:
        raise
    except Exception as exc:  # MemoryError, or a bug in the checks: still a 400, never a 500
        raise admission_review.ReviewError(f"cannot read the AdmissionReview: {type(exc).__name__}") from None
    try:
        decision = engine.decide(
            parsed.admission, mutate=endpoint.mutate, validate=endpoint.validate, timings=timings
        )
    except Deferred:
        raise
    except InputError as exc:  # an object the adapters cannot read (replicas: "abc"): the user's to fix
        return _Answer(parsed, _invalid_decision(endpoint, exc))
    except Exception as exc:  # an engine bug (RecursionError, MemoryError too) must answer, never crash
        return _Answer(parsed, _error_decision(endpoint, exc), exc)
    return _Answer(parsed, decision, None, timings)


def _respond(state: ServerState, endpoint: _Endpoint, answer: _Answer, start: float) -> Response:
    parsed, decision, error = answer.parsed, answer.decision, answer.error
    try:
        content = orjson.dumps(
            admission_review.build_response(parsed.uid, decision, mutating=endpoint.mutate)
        )
    except Exception as exc:  # a value the encoder cannot write: answered, counted, never a 500
        error = exc
        decision = _error_decision(endpoint, exc)
        content = orjson.dumps(
            admission_review.build_response(parsed.uid, decision, mutating=endpoint.mutate)
        )
    seconds = perf_counter() - start
    # While draining, ask clients to reconnect (elsewhere: this endpoint is being removed).
    headers = {"connection": "close"} if state.shutting_down or state.closing_connections else None
    after = BackgroundTask(_after_answer, state, endpoint, answer, decision, error, seconds)
    return Response(content, media_type=_JSON, headers=headers, background=after)


async def _after_answer(
    state: ServerState,
    endpoint: _Endpoint,
    answer: _Answer,
    decision: Decision,
    error: Exception | None,
    seconds: float,
) -> None:
    """What an answer leaves to do once it is on its way: its metrics and log record, and, after
    /mutate, the patched object's adaptation and validating decision, made ahead for the validating
    call while the API server applies the patch (Adaptations.settle)."""
    # A coroutine: Starlette would hand a plain function to a worker thread, a hop that costs more
    # than this work (bounded like an inline decision: Adaptations.ahead_seconds). uvloop writes a
    # small response at the end of the loop's iteration, not in send(): the answer goes out first.
    await asyncio.sleep(0)
    parsed = answer.parsed
    if error is not None:
        state.metrics.observe_engine_error(endpoint.name)
    _count_policy_errors(state, decision)
    outcome = _outcome(decision, error)
    state.metrics.observe_request(endpoint.name, parsed.operation, parsed.kind, outcome, seconds)
    if answer.timings:
        state.metrics.observe_policies(answer.timings)
    kept = state.adaptations
    if endpoint.validate and kept is not None and kept.enabled and outcome != "skipped":
        state.metrics.observe_decided_ahead(decision.made_ahead)
    logs.log_admission(
        state.logger,
        endpoint=endpoint.name,
        uid=parsed.uid,
        operation=parsed.operation,
        kind=parsed.kind,
        namespace=parsed.namespace,
        name=parsed.name,
        dry_run=parsed.dry_run,
        decision=decision,
        outcome=outcome,
        seconds=seconds,
        error=error,
    )
    if endpoint.mutate and kept is not None:
        kept.settle()


def _count_policy_errors(state: ServerState, decision: Decision) -> None:
    for result in decision.results:
        if result.outcome == "error":
            state.metrics.observe_policy_error(result.policy)
            state.policy_error_log.warning(
                result.policy, "policy could not be evaluated", policy=result.policy, problem=result.messages
            )


def _too_slow(state: ServerState, endpoint: _Endpoint, uid: str, start: float) -> Response:
    """The answer at the end of the budget when the decision is still running: fail closed, say why."""
    seconds = perf_counter() - start
    state.metrics.observe_request(endpoint.name, "other", "other", "timeout", seconds)
    state.logger.error(
        "admission not decided within its time budget",
        extra={"endpoint": endpoint.name, "budget_s": state.budget, "duration_ms": round(seconds * 1000, 1)},
    )
    message = (
        f"not decided within the webhook's time budget of {state.budget:g} s "
        "(an object too large or complex to check in time)"
    )
    if endpoint.validate:
        response: dict[str, Any] = {
            "uid": uid,
            "allowed": False,
            "status": {"code": 403, "reason": "Forbidden", "message": f"{_INTERNAL}: {message}: denied"},
        }
    else:
        response = {"uid": uid, "allowed": True, "warnings": [f"{_INTERNAL}: {message}: not mutated"]}
    return _json(
        200, {"apiVersion": admission_review.API_VERSION, "kind": "AdmissionReview", "response": response}
    )


def _body_headers(scope: Scope) -> tuple[str | None, str | None]:
    """The request's Content-Type and Content-Length (the first of each; uvicorn lowercases names)."""
    content_type = declared = None
    for name, value in scope["headers"]:
        if name == b"content-type" and content_type is None:
            content_type = value.decode("latin-1")
        elif name == b"content-length" and declared is None:
            declared = value.decode("latin-1")
    return content_type, declared


async def _read_body(
    receive: Receive, limit: int, bodies: BodyBudget, held: list[int], deadline: float
) -> bytes:
    """The body, read in chunks and abandoned past `limit` bytes. What arrives beyond the budget's
    threshold is counted against it (in `held`) as it arrives: a body withheld after its headers,
    or after a part, holds only what it sent; one that would take the budget past its limit waits,
    reading nothing, for room until `deadline`, then is refused (429)."""
    # ASGI receive() directly: what Request.stream() does, without an async generator per request.
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
        beyond = size - bodies.threshold
        if beyond > held[0]:
            try:
                held[0] += await bodies.reserve(beyond - held[0], max(0.0, deadline - monotonic()))
            except Busy:
                raise _Rejected(
                    429,
                    "busy-receiving",
                    f"too many large request bodies on their way ({bodies.reserved} bytes); "
                    f"retry in {RETRY_AFTER_SECONDS} s",
                    {"retry-after": str(RETRY_AFTER_SECONDS)},
                ) from None
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)  # one chunk, the usual case: no copy


def _too_large(limit: int) -> _Rejected:
    return _Rejected(413, "too-large", f"request body exceeds the limit of {limit} bytes")


def _reject(state: ServerState, endpoint: _Endpoint, exc: _Rejected, start: float) -> Response:
    state.metrics.observe_rejected(endpoint.name, exc.reason, perf_counter() - start)
    state.logger.warning(
        "rejected admission call",
        extra={"endpoint": endpoint.name, "status": exc.status, "reason": logs.clip(exc.message)},
    )
    headers = dict(exc.headers or {})
    if exc.status in (413, 429) or state.closing_connections:
        # An unread body would be parsed as the next request on this connection: close it instead
        # (and a retiring worker sends every client to its successor).
        headers["connection"] = "close"
    return _json(exc.status, {"error": exc.message}, headers or None)


def _error_decision(endpoint: _Endpoint, exc: Exception) -> Decision:
    what = f"{type(exc).__name__}: {exc}"[:500]
    if endpoint.validate:
        message = f"internal error while deciding, denied to be safe: {what}"
        return Decision(False, violations=[Finding(_INTERNAL, message, None, "InternalError")])
    message = f"internal error while mutating, admitted without changes: {what}"
    return Decision(True, warnings=[Finding(_INTERNAL, message, None, "InternalError")])


def _invalid_decision(endpoint: _Endpoint, exc: InputError) -> Decision:
    if endpoint.validate:
        return Decision(False, violations=[Finding(_INTERNAL, exc.describe(), exc.field, "Invalid")])
    message = f"not mutated, the object cannot be read: {exc.describe()}"
    return Decision(True, warnings=[Finding(_INTERNAL, message, exc.field, "Invalid")])


def _outcome(decision: Decision, error: Exception | None) -> str:
    if error is not None:
        return "error"
    if decision.skipped_reason is not None:
        return "skipped"
    return "allowed" if decision.allowed else "denied"


def _json(status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> Response:
    return Response(orjson.dumps(payload), status_code=status, media_type=_JSON, headers=headers)

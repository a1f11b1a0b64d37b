"""The webhook's HTTP layer: a Starlette app over review.py and the engine, built by create_app().

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
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

import orjson
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from webhook import logs, review
from webhook.engine import Decision, Engine, Finding
from webhook.errors import InputError
from webhook.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from webhook.metrics import Metrics

DEFAULT_MAX_BODY_BYTES = 3 * 1024 * 1024
_JSON = "application/json"
_INTERNAL = "trainguard"  # the "policy" named by findings about the webhook itself


@dataclass(eq=False)
class ServerState:
    """What the routes read: the current Engine (swapped whole, by one assignment), readiness, metrics.

    Everything runs on the event loop's thread; `install()` is the only writer of `engine`.
    """

    metrics: Metrics = field(default_factory=Metrics)
    engine: Engine | None = None
    shutting_down: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger(logs.ADMISSION_LOGGER))

    @property
    def ready(self) -> bool:
        return self.engine is not None and not self.shutting_down

    def install(self, engine: Engine) -> None:
        self.engine = engine
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

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason  # metric label
        self.message = message


def create_app(state: ServerState) -> Starlette:
    """The ASGI app: /validate, /mutate, /healthz, /readyz, /metrics over `state`."""

    async def validate(request: Request) -> Response:
        return await _admit(state, VALIDATE, request)

    async def mutate(request: Request) -> Response:
        return await _admit(state, MUTATE, request)

    async def healthz(request: Request) -> Response:
        return Response(b'{"status":"ok"}', media_type=_JSON)

    async def readyz(request: Request) -> Response:
        engine = state.engine
        if state.shutting_down:
            return _json(503, {"status": "not ready", "reason": "shutting down"})
        if engine is None:
            return _json(503, {"status": "not ready", "reason": "no policy set loaded"})
        return _json(200, {"status": "ready", "policies": len(engine.policies.policies)})

    async def metrics(request: Request) -> Response:
        return Response(state.metrics.render(), headers={"content-type": METRICS_CONTENT_TYPE})

    return Starlette(
        routes=[
            Route("/validate", validate, methods=["POST"]),
            Route("/mutate", mutate, methods=["POST"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )


async def _admit(state: ServerState, endpoint: _Endpoint, request: Request) -> Response:
    start = perf_counter()
    try:
        parsed = review.parse_request(await _read_body(request, state.max_body_bytes))
        engine = state.engine
        if engine is None:
            raise _Rejected(503, "not-ready", "no policy set is loaded yet")
    except _Rejected as exc:
        return _reject(state, endpoint, exc, start)
    except review.ReviewError as exc:
        return _reject(state, endpoint, _Rejected(400, "malformed", exc.describe()), start)
    except ClientDisconnect:
        return _reject(state, endpoint, _Rejected(400, "client-disconnect", "client went away"), start)

    timings: dict[str, float] | None = {} if state.metrics.sample() else None
    error: Exception | None = None
    try:
        decision = engine.review(
            parsed.admission, mutate=endpoint.mutate, validate=endpoint.validate, timings=timings
        )
        content = orjson.dumps(review.build_response(parsed.uid, decision, mutating=endpoint.mutate))
    except InputError as exc:  # an object the adapters cannot read (replicas: "abc"): the user's to fix
        decision = _invalid_decision(endpoint, exc)
        content = orjson.dumps(review.build_response(parsed.uid, decision, mutating=endpoint.mutate))
    except Exception as exc:  # an engine bug must answer the API server, never crash the request
        error = exc
        decision = _error_decision(endpoint, exc)
        content = orjson.dumps(review.build_response(parsed.uid, decision, mutating=endpoint.mutate))
        state.metrics.observe_engine_error(endpoint.name)

    outcome = _outcome(decision, error)
    seconds = perf_counter() - start
    state.metrics.observe_request(endpoint.name, parsed.operation, parsed.kind, outcome, seconds)
    if timings:
        state.metrics.observe_policies(timings)
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
    # While draining, ask clients to reconnect (elsewhere: this endpoint is being removed).
    headers = {"connection": "close"} if state.shutting_down else None
    return Response(content, media_type=_JSON, headers=headers)


async def _read_body(request: Request, limit: int) -> bytes:
    """The body, after the Content-Type check, read in chunks and abandoned past `limit` bytes."""
    headers = request.headers
    content_type = headers.get("content-type")
    if content_type is None or content_type.partition(";")[0].strip().lower() != _JSON:
        raise _Rejected(400, "content-type", f"header Content-Type must be {_JSON}, got {content_type!r}")
    declared = headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise _Rejected(400, "malformed", f"header Content-Length is not a number: {declared!r}")
        if int(declared) > limit:
            raise _too_large(limit)
    # ASGI receive() directly: what Request.stream() does, without an async generator per request.
    receive = request.receive
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
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)  # one chunk, the usual case: no copy


def _too_large(limit: int) -> _Rejected:
    return _Rejected(413, "too-large", f"request body exceeds the limit of {limit} bytes")


def _reject(state: ServerState, endpoint: _Endpoint, exc: _Rejected, start: float) -> Response:
    state.metrics.observe_rejected(endpoint.name, exc.reason, perf_counter() - start)
    state.logger.warning(
        "rejected admission call",
        extra={"endpoint": endpoint.name, "status": exc.status, "reason": exc.message},
    )
    # An unread body would be parsed as the next request on this connection: close it instead.
    headers = {"connection": "close"} if exc.status == 413 else None
    return _json(exc.status, {"error": exc.message}, headers)


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

"""AdmissionReview v1 <-> the engine: parse_request() and build_response(). No HTTP in here.

Two kinds of failure, kept apart (as kopf does): a malformed review is a ReviewError that the
HTTP layer answers with 400; a policy outcome is always a well-formed response with allowed
true or false.
"""

from __future__ import annotations

import base64
import threading
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import orjson

from webhook.documents import MAX_DEPTH as MAX_OBJECT_DEPTH
from webhook.documents import MAX_VALUES, check_metadata, check_structure
from webhook.engine import AdmissionInput, Decision
from webhook.errors import InputError

API_VERSION = "admission.k8s.io/v1"
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
# The API server shows at most this much of each warning; longer ones are cut by it anyway.
_WARNING_LIMIT = 1024
# Past this, containers in a review are refused (400): the object sits two levels down (review,
# request), so this is the manifest files' bound on an object's own nesting.
MAX_DEPTH = MAX_OBJECT_DEPTH + 2
_TOO_DEEP = (
    f"nested deeper than {MAX_OBJECT_DEPTH} levels below the request ({MAX_DEPTH} from the review's top)"
)
MAX_UID_LENGTH = 128  # a UID is 36 characters


class ReviewError(InputError):
    """The body is not an AdmissionReview v1 we can answer."""


@dataclass(frozen=True, slots=True)
class ParsedReview:
    uid: str
    operation: str
    kind: str
    namespace: str | None
    name: str | None
    dry_run: bool
    admission: AdmissionInput


def _fail(message: str, field: str | None = None) -> ReviewError:
    return ReviewError(message, source="AdmissionReview", field=field)


def parse_request(body: bytes) -> ParsedReview:
    """The AdmissionReview in `body`; ReviewError (HTTP 400) for anything else, never another error."""
    return parse_review(loads(body), body)


def loads(body: bytes) -> Any:
    """The JSON value of `body` (orjson refuses nesting past 1024 levels itself; parse_review()
    bounds it to MAX_DEPTH)."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise _fail(f"malformed JSON: {exc}") from None
    except MemoryError:
        raise _fail("body too large to decode") from None


def peek_uid(review: Any) -> str:
    """request.uid when it is there (to answer a review whose decision is late), else ""."""
    request = review.get("request") if isinstance(review, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) and len(uid) <= MAX_UID_LENGTH else ""


def parse_review(
    review: Any, body: bytes, *, deadline: float | None = None, yield_at: float | None = None
) -> ParsedReview:
    """Check `review`, what loads() decoded from `body`: its depth first (_check_depth), then the
    request fields the engine reads. `deadline` and `yield_at` go into the AdmissionInput as they are.

    Everything after this (the adapters, the CEL view, logging, encoding) may recurse over the
    value: bounding the depth here keeps RecursionError out of all of them. It is not done in
    loads(), which runs on the event loop: on a crafted 3 MB body it takes most of a second.
    """
    try:
        _check_depth(review, body)
    except ReviewError:
        _name_the_deep_field(review)
        raise
    if not isinstance(review, dict):
        raise _fail(f"expected a JSON object, got {type(review).__name__}")
    if review.get("apiVersion") != API_VERSION or review.get("kind") != "AdmissionReview":
        raise _fail(
            f"expected apiVersion {API_VERSION} kind AdmissionReview, got "
            f"{_short(review.get('apiVersion'))} {_short(review.get('kind'))}",
            "apiVersion",
        )
    request = review.get("request")
    if not isinstance(request, dict):
        raise _fail("missing request", "request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise _fail("missing request.uid", "request.uid")
    if len(uid) > MAX_UID_LENGTH:
        raise _fail(f"request.uid is longer than {MAX_UID_LENGTH} characters", "request.uid")
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise _fail(
            f"request.operation must be one of {', '.join(OPERATIONS)}, got {_short(operation)}",
            "request.operation",
        )
    obj = request.get("object")
    old = request.get("oldObject")
    if operation in ("CREATE", "UPDATE") and not isinstance(obj, dict):
        raise _fail(
            f"request.object must be an object for {operation}, got {type(obj).__name__}", "request.object"
        )
    if old is not None and not isinstance(old, dict):
        raise _fail("request.oldObject must be an object or null", "request.oldObject")
    # The manifest files' own checks (webhook.documents), so that check, review and the webhook
    # refuse the same objects; the text's depth is bounded above.
    for value, prefix in ((obj, "request.object."), (old, "request.oldObject.")):
        if isinstance(value, dict):
            try:
                bound = _values_bound(body)
                check_structure(
                    value, source="AdmissionReview", prefix=prefix, values_bound=bound, depth_checked=True
                )
                check_metadata(value, source="AdmissionReview", prefix=prefix)
            except InputError as exc:
                raise ReviewError(exc.message, source=exc.source, field=exc.field) from None
    kind: dict[str, Any] = request["kind"] if isinstance(request.get("kind"), dict) else {}
    user_info: dict[str, Any] = request["userInfo"] if isinstance(request.get("userInfo"), dict) else {}
    namespace = _optional_string(request, "namespace")
    dry_run = bool(request.get("dryRun"))
    kind_name = _optional_string(kind, "kind", "request.kind.kind") or (
        _optional_string(obj, "kind", "request.object.kind") if isinstance(obj, dict) else None
    )
    return ParsedReview(
        uid=uid,
        operation=operation,
        kind=kind_name or "",
        namespace=namespace,
        name=_optional_string(request, "name"),
        dry_run=dry_run,
        admission=AdmissionInput(
            object=obj if isinstance(obj, dict) else {},
            operation=operation,
            old_object=old,
            namespace=namespace,
            user_info=user_info,
            dry_run=dry_run,
            deadline=deadline,
            yield_at=yield_at,
        ),
    )


def _values_bound(body: bytes) -> int:
    """At most how many values the JSON text holds: each but the first follows a comma or opens a
    container (commas and brackets inside strings only raise the bound). Counted at C speed, and
    only for a body long enough to hold more than the cap (two bytes a value), so that a large
    real object is not walked for its count."""
    bound = len(body) // 2 + 1
    if bound > MAX_VALUES:
        bound = body.count(b",") + body.count(b"[") + body.count(b"{") + 1
    return bound


def _name_the_deep_field(review: Any) -> None:
    """The manifest files' error, naming the field, when what nests too deep is (old)object."""
    request = review.get("request") if isinstance(review, dict) else None
    for key in ("object", "oldObject"):
        value = request.get(key) if isinstance(request, dict) else None
        if isinstance(value, dict):
            try:
                check_structure(value, source="AdmissionReview", prefix=f"request.{key}.")
            except InputError as exc:
                raise ReviewError(exc.message, source=exc.source, field=exc.field) from None


def _optional_string(mapping: dict[str, Any], key: str, field: str | None = None) -> str | None:
    value = mapping.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        where = field or f"request.{key}"
        raise _fail(f"{where} must be a string, got {type(value).__name__}", where)
    return value


def _short(value: Any) -> str:
    """repr() of a value from the request, bounded (a value may be megabytes, or nested deep)."""
    if isinstance(value, dict | list):
        return type(value).__name__
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_depth(review: Any, body: bytes) -> None:
    """ReviewError when `review`, decoded from `body`, nests deeper than MAX_DEPTH.

    A body the size of a real review is bounded by the encoder (_encodes_within_depth), a fifth
    of what reading its text costs; a text the encoder refuses is read (_check_text_depth), which
    decides either way, as is every large body: encoding a crafted 3 MiB one would hold the
    interpreter for as long as reading it does, in one piece, where the event loop cannot answer
    a probe in between.
    """
    if len(body) <= _ENCODED_UP_TO and _encodes_within_depth(review):
        return
    _check_text_depth(body)


def _encoder_depth_limit() -> int:
    """How deep orjson.dumps encodes containers (254 in orjson 3, lists and maps alike), or 0 when
    lists and maps differ, or it encodes past 1,000 levels or refuses MAX_DEPTH (then every body's
    text is read instead)."""
    limits = set()
    for wrap in (lambda v: [v], lambda v: {"": v}):
        value: Any = wrap(None)
        for depth in range(1, 1001):
            try:
                orjson.dumps(value)
            except orjson.JSONEncodeError:
                limits.add(depth - 1)
                break
            value = wrap(value)
        else:
            return 0
    limit = limits.pop()
    return limit if not limits and limit > MAX_DEPTH else 0


# orjson refuses to encode containers nested past a fixed limit: encoding the decoded review
# inside enough lists that only MAX_DEPTH levels are left below it bounds the review's depth at C
# speed, on no more than the decoded value (8 µs for the 11.6 KB Pod's review, against 28 µs for
# its text, whose escapes and strings of brackets take several passes).
_ENCODER_LIMIT = _encoder_depth_limit()
_ENCODED_UP_TO = 64 * 1024 if _ENCODER_LIMIT else -1  # bytes: the bodies decided on the event loop
_chains = threading.local()  # per thread: deciding threads check reviews at the same time


def _encodes_within_depth(review: Any) -> bool:
    """True when orjson encodes `review` below _ENCODER_LIMIT - MAX_DEPTH lists: it nests at most
    MAX_DEPTH deep. False when it nests deeper, or holds a value orjson does not encode (a string
    with a lone surrogate, which the decoder refuses anyway): only True is an answer."""
    chain: tuple[list[Any], list[Any]] | None = getattr(_chains, "chain", None)
    if chain is None:
        inner: list[Any] = [None]
        outer = inner
        for _ in range(_ENCODER_LIMIT - MAX_DEPTH - 1):
            outer = [outer]
        chain = _chains.chain = (outer, inner)
    outer, inner = chain
    inner[0] = review
    try:
        orjson.dumps(outer)
    except orjson.JSONEncodeError:
        return False
    finally:
        inner[0] = None  # the review is not kept alive by the chain
    return True


# Every bracket of JSON text becomes "[" or "]"; everything else is dropped.
_AS_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_NOT_MARKS = bytes(b for b in range(256) if b not in b'[]{}"')  # all but brackets and quotes
# All but the marks, backslashes and what a backslash can escape in JSON text (orjson has checked
# it): dropping the rest leaves each escape whole, its backslash right before the byte it escapes.
# Two runs of backslashes it joins are read as one correctly: the first ended in pairs only (after
# an odd one the escaped byte would sit between them).
_NOT_MARKS_OR_ESCAPES = bytes(b for b in range(256) if b not in b'[]{}"\\/bfnrtu')


# Text split at a time: bytes.join holds an 80-byte buffer view per part, so a 3 MB body of empty
# strings split whole would need about 90 MiB for a moment; a chunk bounds that to about 3 MiB.
_TEXT_CHUNK = 64 * 1024
# Rounds of bytes.replace cost the text's length per level: the cheapest way for the few hundred
# brackets of a real review (8 µs for a 12 KB Pod's), but 40 ms for 64 KiB of lists nested 95
# deep. Past this many brackets the depth is summed in one pass instead (about 60 ns a bracket).
_ROUNDS_UP_TO = 4096
_STEP = (0,) * ord("[") + (1, 0, -1)  # a bracket's change of depth, indexed by its byte


def _brackets_outside_strings(text: bytes) -> bytes:
    """The brackets of unescaped JSON `text` that are not inside a string, as "[" and "]".

    Read a chunk at a time, each cut just before a quote; a chunk that starts inside a string
    keeps the odd parts of its split instead of the even ones.
    """
    out: list[bytes] = []
    inside = False
    start, size = 0, len(text)
    while start < size:
        end = text.find(b'"', min(start + _TEXT_CHUNK, size))
        end = size if end < 0 else end
        parts = text[start:end].split(b'"')
        out.append(b"".join(parts[inside::2]).translate(_AS_BRACKETS, _NOT_BRACKETS))
        inside ^= len(parts) % 2 == 0  # an odd number of quotes in the chunk
        start = end
    return b"".join(out)


def _check_text_depth(body: bytes) -> None:
    """ReviewError when the containers of JSON text orjson has accepted nest deeper than MAX_DEPTH.

    Computed with bytes methods (C speed): walking the decoded 12 KB review in Python costs about
    65 µs, this about 29 µs. Real objects nest about 20 levels (managedFields included).
    Strings go first. Backslashes come in escape pairs (`\\\\` dropped first, then `\\"`), so
    what remains of `"` delimits strings. A real review always has some: the API server's
    managedFields keys quote their keys (`k:{\\"name\\":\\"x\\"}`), a 12 KB Pod's 228 escaped quotes.
    The two replaces scan for a two-byte pattern, at about a third of a translate's speed, so
    they read only what an escape can touch, a third of the text, kept by one translate.
    Only quotes and brackets matter after that, about a fifth of a review's text, so one translate
    keeps just those. Only brackets outside strings are kept (_brackets_of), all of one kind;
    each round removes the innermost pairs present at its start (bytes.replace does not match
    what its own removals join), so the rounds needed are the depth; at most MAX_DEPTH rounds,
    each on a shorter text than the one before. Many brackets are summed in one pass instead
    (_ROUNDS_UP_TO).
    """
    if b"\\" in body:  # a search is much cheaper than the copies
        escapes = body.translate(None, _NOT_MARKS_OR_ESCAPES)
        body = escapes.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = body.translate(None, _NOT_MARKS)
    if marks.count(b"[") + marks.count(b"{") <= MAX_DEPTH:  # too few containers to nest past it
        return
    brackets = _brackets_of(marks)
    if len(brackets) > _ROUNDS_UP_TO:
        # One pass, linear whatever the shape: the running depth after each bracket, a chunk at
        # a time so that other threads (the event loop) get the interpreter between chunks.
        depth = 0
        for i in range(0, len(brackets), _TEXT_CHUNK):
            chunk = brackets[i : i + _TEXT_CHUNK]
            if max(accumulate(map(_STEP.__getitem__, chunk), initial=depth)) > MAX_DEPTH:
                raise _fail(_TOO_DEEP)
            depth += chunk.count(b"[") - chunk.count(b"]")
        return
    for _ in range(MAX_DEPTH):
        if not brackets:
            return
        brackets = brackets.replace(b"[]", b"")
    if brackets:
        raise _fail(_TOO_DEEP)


def _brackets_of(marks: bytes) -> bytes:
    """The brackets outside strings of `marks` (the quotes and brackets of unescaped JSON text).

    Dropping every `""` leaves each run of quotes between two brackets with its length's parity
    (a match never spans a bracket), so every bracket stays inside or outside a string as it was.
    Usually no string holds a bracket: then every run has an even length (the first starts with an
    opening quote, so each does), no quote is left, and what is left is exactly the brackets
    outside strings. A quote left over means some string holds a bracket (a managedFields key
    such as `k:{"name":"x"}`): what is left is split at its quotes, only those strings' quotes
    (a 12 KB Pod's review: 84 of 1,542; splitting at them all cost 17 µs).
    """
    outside = marks.replace(b'""', b"")
    if b'"' not in outside:
        return outside.translate(_AS_BRACKETS)
    return _brackets_outside_strings(outside)


# metav1.StatusReason -> HTTP code, as k8s.io/apimachinery/pkg/api/errors writes them. A validation's
# `reason` is one of these (ValidatingAdmissionPolicy allows Unauthorized, Forbidden, Invalid and
# RequestEntityTooLarge); a reason the table does not know is answered as Forbidden, 403.
STATUS_CODES = {
    "Unauthorized": 401,
    "Forbidden": 403,
    "NotFound": 404,
    "AlreadyExists": 409,
    "Conflict": 409,
    "Gone": 410,
    "Expired": 410,
    "Invalid": 422,
    "ServerTimeout": 500,
    "Timeout": 504,
    "TooManyRequests": 429,
    "BadRequest": 400,
    "MethodNotAllowed": 405,
    "NotAcceptable": 406,
    "RequestEntityTooLarge": 413,
    "UnsupportedMediaType": 415,
    "InternalError": 500,
    "ServiceUnavailable": 503,
}


def denial_status(decision: Decision) -> tuple[int, str]:
    """(code, reason) of a denial: the first violation's reason, as ValidatingAdmissionPolicy
    answers with the first failed validation's. A policy that could not be evaluated (reason
    InternalError) sets the status only when nothing else denied."""
    reasons = [f.reason for f in decision.violations]
    reason = next((r for r in reasons if r != "InternalError"), reasons[0] if reasons else "Forbidden")
    if reason not in STATUS_CODES:
        return 403, "Forbidden"
    return STATUS_CODES[reason], reason


def denial_message(decision: Decision) -> str:
    parts = []
    for f in decision.violations:
        parts.append(f"{f.policy}: {f.message}" + (f" (field {f.field})" if f.field else ""))
    return "; ".join(parts)


def build_response(uid: str, decision: Decision, *, mutating: bool) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if not decision.allowed:
        code, reason = denial_status(decision)
        response["status"] = {"code": code, "reason": reason, "message": denial_message(decision)}
    if decision.warnings:
        response["warnings"] = [f"{f.policy}: {f.message}"[:_WARNING_LIMIT] for f in decision.warnings]
    if mutating and decision.patch:
        response["patchType"] = "JSONPatch"
        # Sorted keys: the same decision always encodes to the same bytes (CEL maps have no order).
        response["patch"] = base64.b64encode(
            orjson.dumps(decision.patch, option=orjson.OPT_SORT_KEYS)
        ).decode("ascii")
    audits: dict[str, str] = {}
    for f in decision.audits:
        key = f"{f.policy}"
        audits[key] = f"{audits[key]}; {f.message}" if key in audits else f.message
    for r in decision.results:
        if r.outcome == "exempt" and r.messages:
            audits[f"{r.policy}-exempted"] = f"{r.exemption}: {'; '.join(r.messages)}"
    if audits:
        response["auditAnnotations"] = audits
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}

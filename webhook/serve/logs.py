"""JSON log lines, one object per line, and the admission log record.

What an admission record carries: the request uid, endpoint, operation, kind, namespace/name,
the decision, the *names* of the policies that denied, warned or audited, the *paths* the patch
touched and the duration. Never an object's values: environment variables, secrets, annotations
and policy messages (a messageExpression may quote any field) stay out of the logs.

Decisions with findings log at INFO; plain allows and skips at DEBUG, so a busy cluster's log
shows what needs a human.
"""

from __future__ import annotations

import logging
import sys
import time
import traceback
from typing import Any

import orjson

from webhook.engine import Decision

ADMISSION_LOGGER = "trainguard.admission"
LEVELS = ("critical", "error", "warning", "info", "debug")
# Values from a request (uid, name, namespace, kind) are cut to this many characters: a client can
# send megabytes in any of them, and a log line should stay a line.
FIELD_LIMIT = 256
# Any string field of any record is cut to this many characters.
_RECORD_FIELD_LIMIT = 4096

# Attributes every LogRecord has; anything else passed with `extra=` becomes a JSON field.
_RESERVED = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's copy of msg with terminal colours
}


class JsonFormatter(logging.Formatter):
    """`{"ts": …, "level": …, "logger": …, "msg": …, <extra fields>}` per record."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        # An admission record is written for most admissions: the loop does the least per field
        # (clip() is called only for a string that needs cutting).
        for key, value in record.__dict__.items():
            if key in _RESERVED or key[0] == "_":
                continue
            if isinstance(value, str) and len(value) > _RECORD_FIELD_LIMIT:
                value = clip(value, _RECORD_FIELD_LIMIT)
            out[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            out["error"] = type(record.exc_info[1]).__name__
            out["traceback"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def configure(level: str = "info", stream: Any = None) -> None:
    """Send trainguard's and uvicorn's records to `stream` (stderr) as JSON lines."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
    # One line per request is ours (the admission record); uvicorn's access line would repeat it.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    # A JSON line carries none of the caller's file and line, thread or process (a worker is
    # named by _WorkerField), so records need not look them up: the logging HOWTO's
    # "Optimization" switches. Finding the caller walks the stack on every record; together these
    # lookups were about a seventh of an admission record's cost.
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def clip(value: str | None, limit: int = FIELD_LIMIT) -> str | None:
    """`value` cut to `limit` characters, saying how long it was."""
    if value is None or len(value) <= limit:
        return value
    return f"{value[:limit]}…({len(value)} characters)"


class RateLimited:
    """At most one record per key every `every` seconds; the next one says how many were dropped.

    A policy that errors on every request must be visible in the log, not flood it. Keys are
    bounded (policy names); used from the event loop's thread only.
    """

    def __init__(self, logger: logging.Logger, every: float = 10.0, max_keys: int = 1024) -> None:
        self.logger = logger
        self.every = every
        self.max_keys = max_keys
        self._state: dict[str, tuple[float, int]] = {}

    def warning(self, key: str, message: str, **fields: Any) -> bool:
        """Log unless `key` was logged less than `every` seconds ago; True when logged."""
        now = time.monotonic()
        last, dropped = self._state.get(key, (float("-inf"), 0))
        if now - last < self.every:
            self._state[key] = (last, dropped + 1)
            return False
        if key not in self._state and len(self._state) >= self.max_keys:
            self._state.clear()
        self._state[key] = (now, 0)
        if dropped:
            fields["suppressed"] = dropped
        self.logger.warning(message, extra=fields)
        return True


def error_location(exc: BaseException) -> list[str]:
    """Where an exception was raised, as "file:line in function" frames: code, never data."""
    return [f"{f.filename}:{f.lineno} in {f.name}" for f in traceback.extract_tb(exc.__traceback__)[-5:]]


def log_admission(
    logger: logging.Logger,
    *,
    endpoint: str,
    uid: str,
    operation: str,
    kind: str,
    namespace: str | None,
    name: str | None,
    dry_run: bool,
    decision: Decision,
    outcome: str,
    seconds: float,
    error: BaseException | None = None,
) -> None:
    """One record per answered admission, at INFO when it has findings, else DEBUG."""
    findings = bool(decision.violations or decision.warnings or decision.audits) or error is not None
    level = logging.ERROR if error is not None else logging.INFO if findings else logging.DEBUG
    if not logger.isEnabledFor(level):
        return
    fields: dict[str, Any] = {
        "endpoint": endpoint,
        "uid": clip(uid),
        "operation": clip(operation),
        "kind": clip(kind),
        "namespace": clip(namespace),
        "object_name": clip(name),  # `name` is the LogRecord's own (the logger's name)
        "decision": outcome,
        "allowed": decision.allowed,
        "duration_ms": round(seconds * 1000, 3),
    }
    if dry_run:
        fields["dry_run"] = True
    if decision.made_ahead:
        fields["decided_ahead"] = True
    if decision.violations:
        fields["denied_by"] = _policies(decision.violations)
    if decision.warnings:
        fields["warned_by"] = _policies(decision.warnings)
    if decision.audits:
        fields["audited_by"] = _policies(decision.audits)
    if decision.patch:
        fields["patched"] = sorted({str(op.get("path")) for op in decision.patch})
    if decision.skipped_reason:
        fields["skipped"] = decision.skipped_reason
    if error is not None:
        fields["error"] = type(error).__name__
        fields["error_at"] = error_location(error)
    logger.log(level, "engine error" if error is not None else "admission", extra=fields)


def _policies(findings: list[Any]) -> list[str]:
    return list(dict.fromkeys(f.policy for f in findings))


# (whole second, its text): a busy server writes many records a second, and strftime is most of
# a timestamp's cost. One tuple, replaced whole, so threads that log at once read a matching pair.
_last_second: tuple[int, str] = (-1, "")


def _timestamp(created: float) -> str:
    global _last_second
    second = int(created)
    last = _last_second
    if last[0] != second:
        last = _last_second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{last[1]}.{int(created % 1 * 1000):03d}Z"

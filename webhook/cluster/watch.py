"""A generic watch cache: one resource listed, then watched from the list's resourceVersion,
mirrored into a dict by a background thread; re-listed on 410 Gone; bounded, jittered backoff on
errors.

The event handling is pure (`apply_event`, `replace_all` over a dict, the key and value
functions), so it is tested without an API server.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes.client.exceptions import ApiException

from webhook.errors import TrainguardError

log = logging.getLogger("trainguard.cluster")

Key = Hashable
KeyFn = Callable[[Mapping[str, Any]], Key | None]
ValueFn = Callable[[Mapping[str, Any]], Any]

WATCH_TIMEOUT_SECONDS = 300  # the API server ends a watch after this; we then resume from the last RV


class ClusterError(TrainguardError):
    """No usable cluster credentials."""


class _Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410): list again."""


# -- pure event handling --------------------------------------------------------------------------


def apply_event(
    store: dict[Key, Any], event_type: str, obj: Mapping[str, Any], key: KeyFn, value: ValueFn
) -> bool:
    """Apply one ADDED / MODIFIED / DELETED watch event to `store`; True when its contents changed."""
    k = key(obj)
    if k is None:
        return False
    if event_type == "DELETED":
        return store.pop(k, _MISSING) is not _MISSING
    if event_type in ("ADDED", "MODIFIED"):
        v = value(obj)
        if v is None:  # the object no longer qualifies (e.g. a PriorityClass without a value)
            return store.pop(k, _MISSING) is not _MISSING
        if store.get(k, _MISSING) == v:
            return False
        store[k] = v
        return True
    return False  # BOOKMARK and anything new carry no object change


def replace_all(
    store: dict[Key, Any], items: Sequence[Mapping[str, Any]], key: KeyFn, value: ValueFn
) -> bool:
    """Replace `store` with a full list's contents (after a re-list); True when its contents changed."""
    fresh: dict[Key, Any] = {}
    for obj in items:
        k, v = key(obj), value(obj)
        if k is not None and v is not None:
            fresh[k] = v
    if fresh == store:
        return False
    store.clear()
    store.update(fresh)
    return True


_MISSING = object()


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def name_key(obj: Mapping[str, Any]) -> str | None:
    name = metadata_of(obj).get("name")
    return name if isinstance(name, str) else None


def namespaced_key(obj: Mapping[str, Any]) -> tuple[str | None, str] | None:
    name = name_key(obj)
    return (metadata_of(obj).get("namespace"), name) if name is not None else None


def cluster_scoped_key(obj: Mapping[str, Any]) -> tuple[None, str] | None:
    name = name_key(obj)
    return (None, name) if name is not None else None


def priority_value(obj: Mapping[str, Any]) -> int | None:
    value = obj.get("value")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def object_value(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object without managedFields, which only cost memory here."""
    meta = {k: v for k, v in metadata_of(obj).items() if k != "managedFields"}
    return {**obj, "metadata": meta}


# -- watch-backed caches --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Resource:
    """What to list and watch, and how an object becomes a cache entry."""

    name: str
    list_call: Callable[..., Any]  # a kubernetes client list function, called with _preload_content=False
    key: KeyFn
    value: ValueFn


class Backoff:
    """Exponential with full jitter, bounded: 0.5 s, 1 s, 2 s … up to `cap` seconds."""

    def __init__(self, base: float = 0.5, cap: float = 30.0) -> None:
        self.base, self.cap, self.attempt = base, cap, 0

    def next(self) -> float:
        delay = min(self.cap, self.base * 2**self.attempt)
        self.attempt = min(self.attempt + 1, 16)
        return random.uniform(delay / 2, delay)

    def reset(self) -> None:
        self.attempt = 0


class WatchCache:
    """One resource mirrored into a dict by a background thread."""

    def __init__(
        self,
        resource: Resource,
        on_change: Callable[[], None],
        stop: threading.Event,
        backoff: Backoff | None = None,
    ) -> None:
        self.resource = resource
        self.backoff = backoff or Backoff()
        self.on_change = on_change
        self.stop_event = stop
        self.store: dict[Key, Any] = {}
        self.synced = threading.Event()
        self._lock = threading.Lock()
        self._response: Any = None
        self._thread = threading.Thread(
            target=self.run, name=f"trainguard-watch-{resource.name}", daemon=True
        )
        self._last_problem: str | None = None

    def start(self) -> None:
        self._thread.start()

    def snapshot(self) -> dict[Key, Any]:
        with self._lock:
            return dict(self.store)

    def interrupt(self) -> None:
        """Unblock a watch that waits for the next event (the stop event is already set).

        The socket is shut down, not the response closed: close() waits for the lock of the
        buffered reader that the watch thread holds while it blocks in read(), so it would block
        the caller (the event loop, at shutdown) until the watch times out, minutes later.
        """
        response = self._response
        if response is not None:
            try:
                shutdown = getattr(response, "shutdown", None)  # urllib3 >= 2.3
                if shutdown is not None:
                    shutdown()  # the blocked read returns; the watch thread releases the connection
                else:
                    response.close()
            except Exception:  # closing a half-dead connection may fail; we are stopping anyway
                log.debug("closing the watch of %s failed", self.resource.name, exc_info=True)

    def run(self) -> None:
        """List, then watch, until the stop event is set (the thread's body)."""
        backoff = self.backoff
        while not self.stop_event.is_set():
            try:
                version = self._list()
                backoff.reset()
                self._watch(version)
            except _Gone:
                log.info("watch expired, listing again", extra={"resource": self.resource.name})
            except Exception as exc:
                if self.stop_event.is_set():
                    break
                self._problem(exc)
                self.stop_event.wait(backoff.next())

    def _list(self) -> str:
        response = self.resource.list_call(_preload_content=False, _request_timeout=30)
        try:
            _check_status(response)
            payload = orjson.loads(response.data)
        finally:
            response.release_conn()
        items = payload.get("items")
        if not isinstance(items, list):  # never mistake an odd answer for "everything was deleted"
            raise RuntimeError(f"list of {self.resource.name} has no items")
        with self._lock:
            changed = replace_all(self.store, items, self.resource.key, self.resource.value)
        self.synced.set()
        self._last_problem = None
        if changed:
            self.on_change()
        return str((payload.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, version: str) -> None:
        while not self.stop_event.is_set():
            response = self.resource.list_call(
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_TIMEOUT_SECONDS,
                _preload_content=False,
                _request_timeout=(10, WATCH_TIMEOUT_SECONDS + 30),
            )
            self._response = response
            try:
                _check_status(response)
                for line in _lines(response):
                    if self.stop_event.is_set():
                        return
                    version = self._handle(orjson.loads(line), version)
            finally:
                self._response = None
                response.release_conn()

    def _handle(self, event: Mapping[str, Any], version: str) -> str:
        """Apply one decoded watch event; the resourceVersion to resume from."""
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Gone()
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
        if kind != "BOOKMARK":
            with self._lock:
                changed = apply_event(self.store, str(kind), obj, self.resource.key, self.resource.value)
            if changed:
                self.on_change()
        return str(metadata_of(obj).get("resourceVersion") or version)

    def _problem(self, exc: Exception) -> None:
        if isinstance(exc, ApiException) and exc.status == 410:
            return
        problem = (
            f"{type(exc).__name__}: {exc.status} {exc.reason}" if isinstance(exc, ApiException) else repr(exc)
        )
        # Say it once per distinct problem (a missing CRD would otherwise log every backoff).
        level = logging.WARNING if problem != self._last_problem else logging.DEBUG
        self._last_problem = problem
        log.log(
            level, "cannot list/watch; retrying", extra={"resource": self.resource.name, "problem": problem}
        )


def _check_status(response: Any) -> None:
    """Raise for a non-2xx answer (unread bodies are not checked by the client): 410 means re-list."""
    status = getattr(response, "status", 200)
    if isinstance(status, int) and not 200 <= status <= 299:
        if status == 410:
            raise _Gone()
        raise ApiException(status=status, reason=getattr(response, "reason", None))


def _lines(response: Any) -> Iterator[bytes]:
    """The non-empty lines of a streamed watch response (one JSON event each)."""
    pending = b""
    for chunk in response.stream(amt=None, decode_content=False):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from (line for line in complete if line.strip())
    if pending.strip():
        yield pending

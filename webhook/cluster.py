"""Optional cluster awareness: watch-backed caches, and self-registration of the webhook configurations.

    ClusterCaches   PriorityClasses (name -> value), TrainingRuntimes ((namespace, name) -> object),
                    ClusterTrainingRuntimes ((None, name) -> object), PolicyExceptions;
                    one background thread per resource: list, then watch from the list's
                    resourceVersion; re-list on 410 Gone; bounded, jittered backoff on errors.
    Registrar       create-or-patch (server-side apply) of webhookconfig.render()'s two objects with
                    the current CA bundle; again whenever the CA file changes.

The event handling is pure (`apply_event`, `replace_all` over a dict), so it is tested without an
API server. Without cluster access the server works from its files alone; nothing here is imported.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from kubernetes import client
from kubernetes import config as kube_config
from kubernetes.client.exceptions import ApiException

from webhook import webhookconfig
from webhook.config import PlatformConfig
from webhook.engine import PolicyException, parse_exception
from webhook.errors import PolicyError, TrainguardError
from webhook.metrics import Metrics

log = logging.getLogger("trainguard.cluster")

Key = Hashable
KeyFn = Callable[[Mapping[str, Any]], Key | None]
ValueFn = Callable[[Mapping[str, Any]], Any]

FIELD_MANAGER = "trainguard"
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


def replace_all(store: dict[Key, Any], items: list[Mapping[str, Any]], key: KeyFn, value: ValueFn) -> bool:
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


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def name_key(obj: Mapping[str, Any]) -> str | None:
    name = _meta(obj).get("name")
    return name if isinstance(name, str) else None


def namespaced_key(obj: Mapping[str, Any]) -> tuple[str | None, str] | None:
    name = name_key(obj)
    return (_meta(obj).get("namespace"), name) if name is not None else None


def cluster_scoped_key(obj: Mapping[str, Any]) -> tuple[None, str] | None:
    name = name_key(obj)
    return (None, name) if name is not None else None


def priority_value(obj: Mapping[str, Any]) -> int | None:
    value = obj.get("value")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def object_value(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object without managedFields, which only cost memory here."""
    meta = {k: v for k, v in _meta(obj).items() if k != "managedFields"}
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
        return str(_meta(obj).get("resourceVersion") or version)

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


TRAINER_GROUP, TRAINER_VERSION = "trainer.kubeflow.org", "v1alpha1"
EXCEPTION_GROUP, EXCEPTION_VERSION, EXCEPTION_PLURAL = "trainguard.dev", "v1alpha1", "policyexceptions"


def exception_value(obj: Mapping[str, Any]) -> PolicyException | None:
    """A PolicyException object as the engine honours it; None (and a log line) when it is invalid.

    The server-managed metadata (uid, resourceVersion, managedFields …) and status are not part of
    the contract and are dropped before the strict parse a file gets.
    """
    meta = _meta(obj)
    doc = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta},
        "spec": obj.get("spec"),
    }
    where = f"PolicyException {meta.get('namespace')}/{meta.get('name')}"
    try:
        return parse_exception(doc, where)
    except PolicyError as exc:
        log.warning("ignoring an invalid PolicyException", extra={"object": where, "problem": str(exc)})
        return None


class ClusterCaches:
    """The caches the engine reads; `on_change(priority_classes, runtimes, exceptions)` after any change."""

    def __init__(
        self,
        api: client.ApiClient,
        on_change: Callable[
            [Mapping[str, int], Mapping[tuple[str | None, str], dict[str, Any]], list[PolicyException]], None
        ],
    ) -> None:
        self._stop = threading.Event()
        self._on_change = on_change
        custom = client.CustomObjectsApi(api)

        def crd(plural: str) -> Callable[..., Any]:
            def call(**kwargs: Any) -> Any:
                return custom.list_cluster_custom_object(TRAINER_GROUP, TRAINER_VERSION, plural, **kwargs)

            return call

        def exceptions_call(**kwargs: Any) -> Any:
            return custom.list_cluster_custom_object(
                EXCEPTION_GROUP, EXCEPTION_VERSION, EXCEPTION_PLURAL, **kwargs
            )

        resources = [
            Resource(
                "priorityclasses", client.SchedulingV1Api(api).list_priority_class, name_key, priority_value
            ),
            Resource("trainingruntimes", crd("trainingruntimes"), namespaced_key, object_value),
            Resource(
                "clustertrainingruntimes", crd("clustertrainingruntimes"), cluster_scoped_key, object_value
            ),
            Resource("policyexceptions", exceptions_call, namespaced_key, exception_value),
        ]
        self.caches = {r.name: WatchCache(r, self._changed, self._stop) for r in resources}

    def start(self) -> None:
        for cache in self.caches.values():
            cache.start()

    def stop(self) -> None:
        self._stop.set()
        for cache in self.caches.values():
            cache.interrupt()

    @property
    def priority_classes(self) -> dict[str, int]:
        return {str(k): v for k, v in self.caches["priorityclasses"].snapshot().items()}

    @property
    def runtimes(self) -> dict[tuple[str | None, str], dict[str, Any]]:
        out: dict[tuple[str | None, str], dict[str, Any]] = {}
        for name in ("trainingruntimes", "clustertrainingruntimes"):
            out.update(self.caches[name].snapshot())  # type: ignore[arg-type]
        return out

    @property
    def exceptions(self) -> list[PolicyException]:
        return list(self.caches["policyexceptions"].snapshot().values())

    def _changed(self) -> None:
        self._on_change(self.priority_classes, self.runtimes, self.exceptions)


# -- credentials ----------------------------------------------------------------------------------


def api_client(*, kubeconfig: str | None = None, in_cluster: bool = False) -> client.ApiClient:
    """An ApiClient from a kubeconfig file, or from the pod's service account."""
    configuration = client.Configuration()
    try:
        if kubeconfig is not None:
            kube_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration
            )
        elif in_cluster:
            kube_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            raise ClusterError("no cluster credentials: give --kubeconfig or --in-cluster")
    except kube_config.ConfigException as exc:
        raise ClusterError(f"cannot load cluster credentials: {exc}") from exc
    return client.ApiClient(configuration)


# -- self-registration ----------------------------------------------------------------------------


class Registrar:
    """Applies the two webhook configurations with the current CA; retries in the background.

    `update()` (a new CA) and `refresh()` (a new platform config) only wake the thread: each wake
    is one more apply of the latest state, however many arrived while it was busy.
    """

    def __init__(
        self,
        api: client.ApiClient,
        *,
        service: str,
        namespace: str,
        url: str | None,
        platform: Callable[[], PlatformConfig | None],
        metrics: Metrics | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.admission = client.AdmissionregistrationV1Api(api)
        self.backoff = backoff or Backoff(base=1.0, cap=60.0)
        self.service, self.namespace, self.url = service, namespace, url
        self.platform = platform
        self.metrics = metrics
        self._ca: bytes | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.run, name="trainguard-register", daemon=True)

    def start(self, ca_pem: bytes) -> None:
        self.update(ca_pem)
        self._thread.start()

    def update(self, ca_pem: bytes) -> None:
        """The CA file changed: apply again (from any thread)."""
        self._ca = ca_pem
        self._wake.set()

    def refresh(self) -> None:
        """The platform config changed (it shapes the matchConditions): apply again."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def objects(self, ca_pem: bytes) -> list[dict[str, Any]]:
        return webhookconfig.render(
            ca_bundle=ca_pem,
            service=self.service,
            namespace=self.namespace,
            url=self.url,
            platform=self.platform(),
        )

    def apply(self, ca_pem: bytes) -> None:
        """Server-side apply of both configurations: creates them, or patches the fields we own."""
        for obj in self.objects(ca_pem):
            patch = (
                self.admission.patch_validating_webhook_configuration
                if obj["kind"] == "ValidatingWebhookConfiguration"
                else self.admission.patch_mutating_webhook_configuration
            )
            patch(
                obj["metadata"]["name"],
                obj,  # sent as JSON, which is YAML: the apply body as is
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type="application/apply-patch+yaml",
            )

    def run(self) -> None:
        """Apply on every wake, retrying with backoff until it succeeds or the stop event is set."""
        backoff = self.backoff
        while True:
            self._wake.wait()
            if self._stop.is_set():
                return
            self._wake.clear()
            ca = self._ca
            if ca is None:
                continue
            try:
                self.apply(ca)
            except Exception as exc:
                self._observe(False)
                log.warning("self-registration failed; retrying", extra={"problem": repr(exc)})
                self._wake.set()  # try again after the backoff
                if self._stop.wait(backoff.next()):
                    return
                continue
            backoff.reset()
            self._observe(True)
            log.info("webhook configurations applied", extra={"service": self.service})

    def _observe(self, ok: bool) -> None:
        if self.metrics is not None:
            self.metrics.observe_reload("registration", ok)

"""Leader election through a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does.

Several ``trainguard serve`` replicas run side by side; the work that writes to the cluster (policy
reports, lifting resume gates) must be done by one of them at a time. Each candidate reads the
Lease; it takes it when the Lease is absent, released (empty holder) or expired, and the holder
renews it every ``renew_seconds``. Writes are compare-and-swap on ``resourceVersion``, so two
candidates can never both believe they won the same round.

Why not ``kubernetes.leaderelection``: its loop never stops (no way to leave it on shutdown), it
never releases the Lease (a standby then waits a whole lease duration), and its ``LeaseLock`` talks
through the process-global default client configuration rather than the ``ApiClient`` trainguard
builds from ``--kubeconfig``/``--in-cluster``.

Expiry is judged as client-go judges it: from the moment *this* candidate last saw the record
change, on its own monotonic clock, never from the timestamps written by another machine, so
clock skew between nodes cannot make two leaders.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

__all__ = ["LeaderElector"]

log = logging.getLogger("trainguard.leader")


@dataclass(frozen=True)
class _Record:
    holder: str
    lease_seconds: int
    acquire_time: Any
    renew_time: Any
    transitions: int


def _record(lease: Any) -> _Record:
    spec = lease.spec or client.V1LeaseSpec()
    return _Record(
        holder=spec.holder_identity or "",
        lease_seconds=int(spec.lease_duration_seconds or 0),
        acquire_time=spec.acquire_time,
        renew_time=spec.renew_time,
        transitions=int(spec.lease_transitions or 0),
    )


class LeaderElector:
    """Campaigns for one Lease in a daemon thread and calls back on winning and losing it.

    ``on_started`` runs (in the elector's thread) when this candidate becomes the leader and
    ``on_stopped`` when it stops being the leader: the Lease was lost, could not be renewed within
    the lease duration, or ``stop()`` released it. Both must return promptly; start long work in
    threads of their own.
    """

    def __init__(
        self,
        coordination_api: client.CoordinationV1Api,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: float = 15.0,
        renew_seconds: float = 5.0,
        retry_seconds: float = 2.0,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
        on_problem: Callable[[str | None], None] | None = None,
    ) -> None:
        if not renew_seconds < lease_seconds:
            raise ValueError("renew_seconds must be shorter than lease_seconds")
        self._api = coordination_api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.retry_seconds = retry_seconds
        self._on_started = on_started
        self._on_stopped = on_stopped
        self._on_problem = on_problem
        self.problem: str | None = None  # why the campaign cannot run, while it cannot
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._leader = False
        self._observed: _Record | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0

    @property
    def is_leader(self) -> bool:
        return self._leader

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"leader-{self.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Leaves the campaign; a leader releases the Lease so that a standby takes over at once."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None
        if self._leader:
            self._release()
            self._set_leader(False)

    # -- the campaign -------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                held = self._try_acquire_or_renew()
            except Exception as exc:  # an elector that dies silently would leave the work undone
                self._failed(exc)
                held = False
            else:
                self._set_problem(None)
            now = time.monotonic()
            if held:
                self._last_renew = now
                self._set_leader(True)
            elif self._leader and now - self._last_renew >= self.lease_seconds - self.retry_seconds:
                # Another candidate may take the Lease once it has expired on its clock: stop
                # leading a little before that could happen.
                log.warning("lease %s/%s could not be renewed; stepping down", self.namespace, self.name)
                self._set_leader(False)
            self._stop.wait(self.renew_seconds if self._leader else self.retry_seconds)

    def _failed(self, exc: Exception) -> None:
        """Says what went wrong once, when it first happens; the retries that follow are quiet."""
        problem = _describe(exc, self.namespace, self.name)
        if problem == self.problem:
            log.debug("leader election for lease %s/%s still failing: %s", self.namespace, self.name, problem)
            return
        if isinstance(exc, ApiException):  # the API server's answer says it all: no traceback
            log.error("%s; retrying every %s s", problem, self.retry_seconds)
        else:
            log.exception("%s; retrying every %s s", problem, self.retry_seconds)
        self._set_problem(problem)

    def _set_problem(self, problem: str | None) -> None:
        if problem == self.problem:
            return
        if problem is None:
            log.info("lease %s/%s reachable again", self.namespace, self.name)
        self.problem = problem
        if self._on_problem is not None:
            self._on_problem(problem)

    def _set_leader(self, leader: bool) -> None:
        if leader == self._leader:
            return
        self._leader = leader
        log.info(
            "%s %s lease %s/%s", self.identity, "acquired" if leader else "left", self.namespace, self.name
        )
        callback = self._on_started if leader else self._on_stopped
        try:
            callback()
        except Exception:
            log.exception("leader callback for lease %s/%s failed", self.namespace, self.name)

    def _try_acquire_or_renew(self) -> bool:
        now = datetime.now(UTC)
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                spec=self._spec(now, acquire_time=now, transitions=0),
            )
            try:
                self._api.create_namespaced_lease(self.namespace, body)
            except ApiException as create_exc:
                if create_exc.status == 409:  # another candidate created it first
                    return False
                raise
            self._observe(_record(body))
            return True

        record = _record(lease)
        if record != self._observed:
            self._observe(record)
        mine = record.holder == self.identity
        expired = time.monotonic() - self._observed_at > max(record.lease_seconds, 1)
        if record.holder and not mine and not expired:
            return False
        transitions = record.transitions if mine else record.transitions + 1
        lease.spec = self._spec(
            now, acquire_time=record.acquire_time if mine else now, transitions=transitions
        )
        try:
            replaced = self._api.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as exc:
            if exc.status == 409:  # lost the compare-and-swap: someone else wrote in between
                return False
            raise
        self._observe(_record(replaced))
        return True

    def _spec(self, now: datetime, *, acquire_time: Any, transitions: int) -> client.V1LeaseSpec:
        return client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=max(1, round(self.lease_seconds)),
            acquire_time=acquire_time,
            renew_time=now,
            lease_transitions=transitions,
        )

    def _observe(self, record: _Record) -> None:
        self._observed = record
        self._observed_at = time.monotonic()

    def _release(self) -> None:
        """Empties the holder, as client-go's ReleaseOnCancel does, if this candidate still holds it."""
        try:
            lease = self._api.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is None or _record(lease).holder != self.identity:
                return
            now = datetime.now(UTC)
            lease.spec.holder_identity = None
            lease.spec.lease_duration_seconds = 1
            lease.spec.renew_time = now
            lease.spec.acquire_time = now
            self._api.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as exc:
            log.warning("could not release lease %s/%s: %s", self.namespace, self.name, exc.reason)


def _describe(exc: Exception, namespace: str, name: str) -> str:
    if isinstance(exc, ApiException):
        if exc.status == 404 and _missing_kind(exc) == "namespaces":
            return (
                f"namespace {namespace} does not exist, so the Lease {name} cannot be created: "
                "nothing is written until it exists (create it, or choose the namespace with "
                "--webhook-namespace)"
            )
        if exc.status == 403:
            return f"not allowed to read or write the Lease {namespace}/{name}: {exc.reason} (check the RBAC)"
        if exc.status:
            return f"leader election for lease {namespace}/{name} failed: {exc.status} {exc.reason}"
        return f"leader election for lease {namespace}/{name} failed: cannot reach the API server"
    return f"leader election for lease {namespace}/{name} failed: {type(exc).__name__}: {exc}"


def _missing_kind(exc: ApiException) -> str | None:
    """The `details.kind` of a NotFound Status: "namespaces" when the namespace itself is missing."""
    try:
        details = json.loads(exc.body or "{}").get("details") or {}
    except (ValueError, AttributeError):
        return None
    kind = details.get("kind")
    return kind if isinstance(kind, str) else None

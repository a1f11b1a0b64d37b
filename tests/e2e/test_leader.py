"""Lease leader election against the real API server: one leader at a time, fast hand-over on
release, take-over after expiry when the leader vanishes without releasing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from tests.e2e.controlplane import ControlPlane
from webhook.cluster import api_client
from webhook.leader import LeaderElector


class _Candidate:
    def __init__(self, api: client.CoordinationV1Api, namespace: str, identity: str, lease: float) -> None:
        self.events: list[str] = []
        self.changed = threading.Event()
        self.elector = LeaderElector(
            api,
            namespace=namespace,
            name="e2e-leader",
            identity=identity,
            lease_seconds=lease,
            renew_seconds=0.5,
            retry_seconds=0.25,
            on_started=lambda: self._note("started"),
            on_stopped=lambda: self._note("stopped"),
        )

    def _note(self, what: str) -> None:
        self.events.append(what)
        self.changed.set()


def _wait(predicate: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture
def coordination(control_plane: ControlPlane) -> Iterator[client.CoordinationV1Api]:
    api = api_client(kubeconfig=str(control_plane.kubeconfig))
    try:
        yield client.CoordinationV1Api(api)
    finally:
        api.close()


def _holder(api: client.CoordinationV1Api, namespace: str) -> str | None:
    return api.read_namespaced_lease("e2e-leader", namespace).spec.holder_identity  # type: ignore[no-any-return]


def test_one_leader_and_release_hands_over(coordination: client.CoordinationV1Api, namespace: str) -> None:
    first = _Candidate(coordination, namespace, "replica-a", lease=4.0)
    second = _Candidate(coordination, namespace, "replica-b", lease=4.0)
    first.elector.start()
    assert _wait(lambda: first.elector.is_leader, 10), "the first candidate never took the free lease"
    second.elector.start()
    try:
        time.sleep(1.5)  # several renew rounds: the standby must keep out
        assert not second.elector.is_leader
        assert _holder(coordination, namespace) == "replica-a"

        released_at = time.monotonic()
        first.elector.stop()
        assert first.events == ["started", "stopped"]
        assert _wait(lambda: second.elector.is_leader, 5), "the standby did not take the released lease"
        # A released lease is taken at the standby's next retry, not after a lease duration.
        assert time.monotonic() - released_at < 2.0
        assert _holder(coordination, namespace) == "replica-b"
        lease = coordination.read_namespaced_lease("e2e-leader", namespace)
        assert lease.spec.lease_transitions == 1
    finally:
        first.elector.stop()
        second.elector.stop()


def test_a_vanished_leader_is_replaced_after_expiry(
    coordination: client.CoordinationV1Api, namespace: str
) -> None:
    first = _Candidate(coordination, namespace, "replica-a", lease=3.0)
    first.elector.start()
    assert _wait(lambda: first.elector.is_leader, 10)
    # Simulate a crash: the thread stops renewing and nothing releases the lease.
    first.elector._stop.set()
    second = _Candidate(coordination, namespace, "replica-b", lease=3.0)
    second.elector.start()
    try:
        time.sleep(1.0)
        assert not second.elector.is_leader, "the standby took a lease that had not expired"
        assert _wait(lambda: second.elector.is_leader, 8), "the standby never took the expired lease"
        assert _holder(coordination, namespace) == "replica-b"
    finally:
        second.elector.stop()

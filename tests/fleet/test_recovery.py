"""Real preemption on the fleet: Kueue evicts, the evicted jobs come back through trainguard's
resume gate, and the resume controller in `trainguard serve` lifts the gates per the PlatformConfig's
recovery block (tests/fleet/recovery.py). What is asserted comes from the cluster's record (pods'
gates, labels, release stamps and Ready transitions; Workloads' eviction counts); the only figure
compared with a duration is the platform's own bound (maxGated) on how long a workload is gated."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from . import recovery
from .fleet import Fleet

# The controller ticks every second and stamps releases to the second: a release at the bound is
# stamped at most this much after it.
BOUND_SLACK = 5.0


@pytest.fixture
def queues(fleet: Fleet) -> Iterator[None]:
    fleet.trainguard(on=True)
    recovery.set_up(fleet)
    try:
        yield
    finally:
        recovery.clear(fleet)


def assert_governed(outcome: recovery.Outcome, victims: set[str]) -> None:
    observer = outcome.observer
    evicted = {job for job, n in outcome.evicted.items() if n}
    assert evicted == victims, outcome.evicted
    # Every pod an evicted job got back was created behind the gate; no first start was gated.
    assert not observer.ungated_after_eviction
    came_back = {c.job for c in observer.comebacks.values()}
    assert came_back == victims, sorted(observer.comebacks)
    # Lifted per workload as a whole: one release stamp per comeback, on all of its pods.
    for comeback in observer.comebacks.values():
        assert comeback.released and set(comeback.released) == set(comeback.pods), comeback
    assert all(len(stamps) == 1 for stamps in observer.release_stamps().values()), observer.release_stamps()
    assert not observer.partial_gates
    # Never more than the per-queue limit resuming at once (released, not yet settled).
    peaks = observer.max_resuming(recovery.SETTLE)
    assert peaks and max(peaks.values()) <= recovery.MAX_RESUMING, peaks
    # None gated past maxGated.
    assert observer.longest_gated() <= recovery.MAX_GATED + BOUND_SLACK


def test_priority_preemption_comes_back_through_the_gate_one_workload_at_a_time(
    fleet: Fleet, queues: None
) -> None:
    observer = recovery.Observer(fleet, [recovery.PRIORITY_NS])
    outcome = recovery.priority_preemption(fleet, observer)

    ns = recovery.PRIORITY_NS
    assert_governed(outcome, {f"{ns}/spot-a", f"{ns}/spot-b"})
    # Both came back to one queue: the second was released only once the first had settled.
    assert len(observer.comebacks) == 2
    # Kueue admitted each before its pods existed: the gate holds pods whose quota is reserved
    # (the second one waits at least the settle time; the first may be released at once).
    assert observer.gated_while_admitted, "no job seen gated while its Workload was admitted"
    assert observer.max_resuming(recovery.SETTLE) == {f"{ns}/{recovery.LOCAL_QUEUE}": 1}


def test_a_borrower_preempted_by_the_lender_reclaiming_comes_back_through_the_gate(
    fleet: Fleet, queues: None
) -> None:
    observer = recovery.Observer(fleet, [recovery.COHORT_A_NS, recovery.COHORT_B_NS])
    outcome = recovery.cohort_reclaim(fleet, observer)

    evicted = {job for job, n in outcome.evicted.items() if n}
    assert len(evicted) == 1 and evicted <= {f"{recovery.COHORT_B_NS}/b-0", f"{recovery.COHORT_B_NS}/b-1"}
    assert_governed(outcome, evicted)

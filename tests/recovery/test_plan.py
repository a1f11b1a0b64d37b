"""Which gated workload resumes next: cooldown, whole workloads, priority order, queue room, the bound."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from webhook.recovery.plan import GATE, TierSettings, group_pods, is_resuming, plan

T0 = datetime(2026, 6, 1, 10, 0, 0, tzinfo=UTC)
SETTINGS = {
    "preemptible": TierSettings(cooldown=300, max_resuming=1, max_gated=1800, settle=60),
    "guaranteed": None,
}


def stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    name: str,
    workload: str,
    *,
    queue: str = "ml/lq",
    created: datetime = T0,
    evicted: datetime | None = T0,
    priority: int = 0,
    gated: bool = True,
    released: datetime | None = None,
    ready_since: datetime | None = None,
    phase: str = "Pending",
    expected: int = 1,
    tier: str = "preemptible",
) -> dict[str, Any]:
    annotations = {
        "trainguard.dev/resume-workload": workload,
        "trainguard.dev/resume-queue": queue,
        "trainguard.dev/resume-tier": tier,
        "trainguard.dev/resume-evicted-at": stamp(evicted) if evicted else "",
        "trainguard.dev/resume-pods": str(expected),
    }
    if released is not None:
        annotations["trainguard.dev/resume-released-at"] = stamp(released)
    status: dict[str, Any] = {"phase": phase}
    if ready_since is not None:
        status = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp(ready_since)}],
        }
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "creationTimestamp": stamp(created),
            "annotations": annotations,
        },
        "spec": {"priority": priority, "schedulingGates": [{"name": GATE}] if gated else []},
        "status": status,
    }


def decide(pods: list[dict[str, Any]], now: datetime) -> tuple[list[str], dict[str, str]]:
    p = plan(group_pods(pods), SETTINGS, now)
    return [r.workload.key for r in p.releases], dict(p.waiting)


def test_a_workload_waits_out_its_cooldown_then_is_released_whole() -> None:
    pods = [pod("a-0", "ml/Workload/a", expected=2), pod("a-1", "ml/Workload/a", expected=2)]
    released, waiting = decide(pods, T0 + timedelta(seconds=299))
    assert released == []
    assert waiting["ml/Workload/a"] == (
        "cooldown after its eviction at 2026-06-01T10:00:00Z: waits until 2026-06-01T10:05:00Z "
        "(5m for the preemptible tier)"
    )
    p = plan(group_pods(pods), SETTINGS, T0 + timedelta(seconds=300))
    assert [(r.workload.key, r.reason) for r in p.releases] == [("ml/Workload/a", "ResumeReleased")]
    assert sorted(x.name for x in p.releases[0].workload.gated) == ["a-0", "a-1"]


def test_the_cooldown_runs_from_the_gating_when_the_eviction_time_is_unknown() -> None:
    pods = [pod("a-0", "ml/PyTorchJob/a", evicted=None, created=T0 + timedelta(minutes=2))]
    assert decide(pods, T0 + timedelta(minutes=6))[0] == []
    assert decide(pods, T0 + timedelta(minutes=7))[0] == ["ml/PyTorchJob/a"]


def test_highest_priority_first_and_one_per_queue() -> None:
    pods = [
        pod("low-0", "ml/Workload/low", priority=100, evicted=T0 - timedelta(minutes=9)),
        pod("high-0", "ml/Workload/high", priority=5000),
        pod("mid-0", "ml/Workload/mid", priority=1000),
    ]
    released, waiting = decide(pods, T0 + timedelta(minutes=10))
    assert released == ["ml/Workload/high"]
    assert waiting["ml/Workload/mid"] == "queue ml/lq has 1 of 1 workloads resuming (ml/Workload/high)"
    assert set(waiting) == {"ml/Workload/mid", "ml/Workload/low"}


def test_equal_priority_goes_by_eviction_time() -> None:
    pods = [
        pod("late-0", "ml/Workload/late", evicted=T0 + timedelta(minutes=1)),
        pod("early-0", "ml/Workload/early", evicted=T0),
    ]
    assert decide(pods, T0 + timedelta(minutes=10))[0] == ["ml/Workload/early"]


def test_queues_are_independent() -> None:
    pods = [pod("a-0", "ml/Workload/a", queue="ml/lq-a"), pod("b-0", "ml/Workload/b", queue="ml/lq-b")]
    assert sorted(decide(pods, T0 + timedelta(minutes=10))[0]) == ["ml/Workload/a", "ml/Workload/b"]


@pytest.mark.parametrize(
    ("ready_since", "now_after_release", "blocks"),
    [
        pytest.param(None, 600, True, id="released-but-not-running-blocks"),
        pytest.param(30, 60, True, id="ready-for-30s-of-a-60s-settle-blocks"),
        pytest.param(0, 60, False, id="ready-for-the-whole-settle-frees-the-queue"),
        pytest.param(None, 1800, False, id="never-settling-stops-counting-after-max-gated"),
    ],
)
def test_a_resuming_workload_holds_its_queue_until_it_settles(
    ready_since: int | None, now_after_release: int, blocks: bool
) -> None:
    released_at = T0 + timedelta(minutes=10)
    ready = released_at + timedelta(seconds=ready_since) if ready_since is not None else None
    pods = [
        pod("first-0", "ml/Workload/first", gated=False, released=released_at, ready_since=ready),
        pod("second-0", "ml/Workload/second"),
    ]
    released, waiting = decide(pods, released_at + timedelta(seconds=now_after_release))
    assert (released == []) is blocks
    assert ("ml/Workload/second" in waiting) is blocks


def test_finished_pods_do_not_hold_the_queue() -> None:
    pods = [
        pod("done-0", "ml/Workload/done", gated=False, released=T0, phase="Succeeded"),
        pod("next-0", "ml/Workload/next"),
    ]
    assert decide(pods, T0 + timedelta(minutes=6))[0] == ["ml/Workload/next"]


def test_a_workload_waits_for_all_its_pods_then_the_bound_releases_it() -> None:
    pods = [pod("g-0", "ml/Workload/g", expected=3), pod("g-1", "ml/Workload/g", expected=3)]
    released, waiting = decide(pods, T0 + timedelta(minutes=10))
    assert released == []
    assert waiting["ml/Workload/g"] == "2 of its 3 pods exist: released together when all do"
    p = plan(group_pods(pods), SETTINGS, T0 + timedelta(minutes=30))
    assert [(r.workload.key, r.reason) for r in p.releases] == [("ml/Workload/g", "ResumeBoundReached")]
    assert "gated for 30m, the longest the platform allows (30m)" in p.releases[0].message


def test_the_bound_releases_even_when_the_queue_is_full() -> None:
    pods = [
        pod("busy-0", "ml/Workload/busy", gated=False, released=T0 + timedelta(minutes=29)),
        pod("old-0", "ml/Workload/old"),
    ]
    p = plan(group_pods(pods), SETTINGS, T0 + timedelta(minutes=30))
    assert [(r.workload.key, r.reason) for r in p.releases] == [("ml/Workload/old", "ResumeBoundReached")]


def test_late_pods_of_a_released_workload_follow_it() -> None:
    pods = [
        pod("w-0", "ml/Workload/w", gated=False, released=T0 + timedelta(minutes=6)),
        pod("w-1", "ml/Workload/w", created=T0 + timedelta(minutes=7)),
    ]
    p = plan(group_pods(pods), SETTINGS, T0 + timedelta(minutes=7))
    assert [(r.workload.key, r.reason) for r in p.releases] == [("ml/Workload/w", "ResumeRest")]
    assert [x.name for x in p.releases[0].workload.gated] == ["w-1"]


def test_a_tier_no_longer_governed_is_released() -> None:
    pods = [pod("g-0", "ml/Workload/g", tier="guaranteed")]
    p = plan(group_pods(pods), SETTINGS, T0)
    assert [(r.workload.key, r.reason) for r in p.releases] == [("ml/Workload/g", "ResumeUngoverned")]


def test_pods_being_deleted_and_unmarked_pods_are_ignored() -> None:
    deleting = pod("d-0", "ml/Workload/d")
    deleting["metadata"]["deletionTimestamp"] = stamp(T0)
    unmarked = pod("u-0", "ml/Workload/u")
    del unmarked["metadata"]["annotations"]["trainguard.dev/resume-workload"]
    assert group_pods([deleting, unmarked]) == []


def test_is_resuming_needs_a_release() -> None:
    (w,) = group_pods([pod("a-0", "ml/Workload/a")])
    assert not is_resuming(w, SETTINGS["preemptible"], T0)


@pytest.mark.parametrize(
    ("ready_since", "after_release", "unsettled"),
    [
        pytest.param(None, 1799, False, id="never-ready-within-the-bound"),
        pytest.param(None, 1800, True, id="never-ready-at-the-bound"),
        pytest.param(T0 + timedelta(seconds=1800), 1830, True, id="ready-but-not-for-the-settle-time"),
        pytest.param(T0 + timedelta(seconds=10), 1800, False, id="settled-long-before"),
    ],
)
def test_a_released_workload_that_never_settles_is_reported_at_the_bound(
    ready_since: datetime | None, after_release: int, unsettled: bool
) -> None:
    released = T0
    pods = [pod("a-0", "ml/Workload/a", gated=False, released=released, ready_since=ready_since)]
    p = plan(group_pods(pods), SETTINGS, released + timedelta(seconds=after_release))
    assert p.unsettled == (("ml/Workload/a",) if unsettled else ())


def test_still_gated_counts_workloads_per_tier_after_the_plan_s_releases() -> None:
    pods = [
        pod("a-0", "ml/Workload/a", evicted=T0 - timedelta(seconds=400)),  # cooled: released now
        pod("b-0", "ml/Workload/b"),  # still cooling
        pod("c-0", "ml/Workload/c", queue="ml/other"),  # still cooling
        pod("d-0", "ml/Workload/d", tier="guaranteed"),  # ungoverned: released now
        pod("e-0", "ml/Workload/e", queue="ml/third", gated=False, released=T0),  # released before
    ]
    workloads = group_pods(pods)
    p = plan(workloads, SETTINGS, T0 + timedelta(seconds=10))
    assert sorted(r.workload.key for r in p.releases) == ["ml/Workload/a", "ml/Workload/d"]
    assert p.still_gated(workloads) == {"preemptible": 2}

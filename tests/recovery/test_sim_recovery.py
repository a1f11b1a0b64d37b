"""The recovery simulation's model of Kueue and the resume gate (tests/bench/sim_recovery.py).

Kueue admits a resumed job before its pods exist, so the gate holds pods of an admitted job: its
quota is reserved while it waits, and Kueue may preempt it again there. One preemptible job fills
the pool; a guaranteed job preempts it; a second guaranteed job arrives just after the first ends.
"""

from __future__ import annotations

import pytest

from tests.bench.sim_recovery import GJob, Params, PJob, Trace, simulate

TRACE = Trace(
    guaranteed=[GJob(16, 100.0, 300.0), GJob(16, 450.0, 100.0)],
    preemptible=[PJob(0, 16, 1e9, 30.0, 600.0, 0.0)],
)


@pytest.mark.parametrize(
    ("gate", "holds_quota", "preemptions", "thrash", "gated_seconds"),
    [
        # Back at 400 (its quota free again), preempted again at 450.
        pytest.param(False, True, 2, 1, 0, id="no-gate"),
        # Admitted again at 400 and gated there, holding its GPUs: the second guaranteed job
        # preempts it while gated (no rollback: it never ran), and it is admitted and gated again
        # at 550 until its cooldown (600 s after the second eviction, at 1050) and beyond the horizon.
        pytest.param(True, True, 2, 1, 50 + 450, id="gate-holds-admitted-quota"),
        # The first model: gated outside the queue from the eviction (100) until the cooldown
        # ends (700), holding nothing, so the second guaranteed job finds free GPUs.
        pytest.param(True, False, 1, 0, 600, id="gate-outside-the-queue"),
    ],
)
def test_a_gated_job_holds_the_quota_kueue_admitted_it_with(
    gate: bool, holds_quota: bool, preemptions: int, thrash: int, gated_seconds: float
) -> None:
    p = Params(
        pool=16,
        days=1000 / 86400,
        step=10.0,
        backlog=1,
        restart=10.0,
        load=0.0,
        cooldown=600.0,
        max_gated=1800.0,
        settle=30.0,
        gate_holds_quota=holds_quota,
    )
    totals = simulate(p, TRACE, gate=gate, suggested_rate=None)
    assert (totals.preemptions, totals.thrash) == (preemptions, thrash)
    assert totals.gated_hours * 3600 == pytest.approx(gated_seconds)


def test_the_thrash_window_is_a_parameter() -> None:
    """Compressed time needs a compressed window: a re-preemption 50 s after the restart is a
    thrash within 60 s, not within 30 s."""

    def thrash(window: float) -> int:
        p = Params(
            pool=16, days=1000 / 86400, step=10.0, backlog=1, restart=10.0, load=0.0, thrash_window=window
        )
        return simulate(p, TRACE, gate=False, suggested_rate=None).thrash

    assert (thrash(60.0), thrash(30.0)) == (1, 0)


@pytest.mark.parametrize("gate", [False, True], ids=["no-gate", "gate"])
def test_waiting_jobs_are_admitted_in_priority_order_as_kueue_does(gate: bool) -> None:
    """Two jobs wait for a pool that holds one: Kueue admits the higher priority first, so nobody
    is preempted (admitting the first created would have the other preempt it at once)."""
    trace = Trace(
        guaranteed=[],
        preemptible=[
            PJob(0, 16, 1e9, 30.0, 600.0, 0.0, level=0),
            PJob(1, 16, 1e9, 30.0, 600.0, 0.0, level=2),
        ],
    )
    p = Params(pool=16, days=600 / 86400, step=10.0, backlog=2, restart=10.0, load=0.0)
    assert simulate(p, trace, gate=gate, suggested_rate=None).preemptions == 0

"""What trainguard's decisions do in a working control plane, each scenario with trainguard on and
off in the same fleet (tests/fleet/fleet.py). Figures the benchmark prints are only compared with
zero or with each other here, never with a duration."""

from __future__ import annotations

import pytest

from . import scenarios
from .fleet import Arm, Fleet, side_by_side

# Each scenario runs twice on a loaded machine: bounded by its own waits, not by the suite's 300 s.
pytestmark = pytest.mark.timeout(1800)


def test_gang_binds_nothing_until_the_whole_job_fits_and_partially_without(fleet: Fleet) -> None:
    on, off = side_by_side(fleet, "fleet-gang", lambda arm: scenarios.gang(fleet, arm))

    assert on.bound_before_fit == dict.fromkeys(on.sizes, 0), "with trainguard, Kueue held each job whole"
    assert on.bound_after == on.sizes
    assert on.partial_gpu_seconds == 0

    assert off.bound_after == off.sizes
    partial = {job: n for job, n in off.bound_before_fit.items() if 0 < n < off.sizes[job]}
    assert partial, f"without a gang some job should have bound in part: {off.bound_before_fit}"
    assert off.partial_gpu_seconds > 0


def test_topology_keeps_each_class_b_job_in_one_rack(fleet: Fleet) -> None:
    on, off = side_by_side(fleet, "fleet-topology", lambda arm: scenarios.topology(fleet, arm, jobs=6))

    assert on.same_rack_share >= 0.9, on.racks
    assert on.same_rack_share > off.same_rack_share, (on.racks, off.racks)


def test_pools_keep_training_off_the_inference_nodes(fleet: Fleet) -> None:
    on, off = side_by_side(fleet, "fleet-pools", lambda arm: scenarios.pools(fleet, arm))

    assert (on.training_on_inference, on.inference_on_training) == (0, 0)
    assert on.bound_training == len(fleet.training_nodes), "the training pool's quota is used in full"
    assert off.training_on_inference > 0, "without trainguard, tolerate-any training spills onto inference"
    assert off.inference_on_training == 0


def test_controller_pods_are_decided_as_members_of_their_workload(fleet: Fleet) -> None:
    fleet.trainguard(on=True)
    try:
        result = scenarios.members(fleet, "fleet-members")
    finally:
        fleet.clear("fleet-members")

    disagreeing = {m.pod: m.agrees for m in result.members if not all(m.agrees.values())}
    assert not disagreeing
    assert result.member_pods_agree == (6, 6)
    wrong_env = {pod: values for pod, values in result.env.items() if any(a != b for a, b in values.values())}
    assert not wrong_env, "PET_* injected by the operator vs derived by trainguard"
    assert result.operator_env_agree == (4, 4)
    assert all(values["PET_NNODES"][0] == "4" for values in result.env.values())


def test_node_agents_start_on_every_node_while_trainguard_is_stopped(fleet: Fleet) -> None:
    fleet.trainguard(on=True)
    try:
        result = scenarios.node_agents(fleet, "fleet-agents")
    finally:
        fleet.clear("fleet-agents")

    assert result.ready == result.nodes == len(fleet.nodes)
    # Meanwhile the validating webhook failed closed for a training job.
    assert "validate.trainguard.dev" in result.refused_while_stopped


@pytest.mark.parametrize(
    ("on", "premutated"),
    [(True, False), (False, False), (False, True)],
    ids=["trainguard-on", "trainguard-off", "trainguard-off-same-objects"],
)
def test_a_queued_burst_binds_every_pod(fleet: Fleet, on: bool, premutated: bool) -> None:
    fleet.trainguard(on=on)
    try:
        result = scenarios.burst(fleet, Arm(on, "fleet-burst"), jobs=4, premutated=premutated)
        classes = {
            (p["metadata"].get("labels") or {}).get(scenarios.CLASS_LABEL) for p in fleet.pods("fleet-burst")
        }
    finally:
        fleet.clear("fleet-burst")
        fleet.trainguard(on=True)

    assert result.pods == 16
    assert (result.trainguard_calls > 0) == on, result.histograms
    if on:
        assert result.trainguard_cpu_seconds > 0, "the server's CPU is read from its processes"
    # The arm without the webhook but with trainguard's objects schedules the same pods as "on".
    assert classes == ({"B"} if on or premutated else {None})

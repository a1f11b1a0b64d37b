"""The fleet's node layout and the benchmark's histogram quantile, without starting a fleet
(tests/fleet runs the fleet itself under the `fleet` marker)."""

from __future__ import annotations

import pytest

from tests.fleet.fleet import POOL_KEY, RACK_KEY, ZONE_KEY, layout
from tests.fleet.scenarios import burst_capacity, quantile


@pytest.mark.parametrize(
    ("count", "training", "inference", "racks"),
    [
        pytest.param(12, 8, 4, 3, id="smallest: two training racks, one inference rack"),
        pytest.param(20, 16, 4, 5, id="ci: four training racks, the fifth inference"),
        pytest.param(13, 12, 1, 4, id="a partial last rack is the inference pool when no fifth rack"),
        pytest.param(100, 80, 20, 25, id="every fifth rack inference"),
    ],
)
def test_layout_splits_racks_into_pools(count: int, training: int, inference: int, racks: int) -> None:
    nodes = layout(count)

    assert len(nodes) == count
    assert sum(n.pool == "training" for n in nodes) == training
    assert sum(n.pool == "inference" for n in nodes) == inference
    assert len({n.rack for n in nodes}) == racks
    assert all(len({n.pool for n in nodes if n.rack == rack}) == 1 for rack in {n.rack for n in nodes})


def test_a_node_carries_its_place_and_its_pool_taint() -> None:
    node = layout(12)[9]

    manifest = node.manifest()

    labels = manifest["metadata"]["labels"]
    assert (labels[RACK_KEY], labels[ZONE_KEY], labels[POOL_KEY]) == ("rack-002", "zone-a", "inference")
    assert manifest["spec"]["taints"] == [{"key": POOL_KEY, "value": "inference", "effect": "NoSchedule"}]
    assert manifest["status"]["allocatable"]["nvidia.com/gpu"] == "8"


def test_too_small_a_fleet_is_refused_with_the_minimum() -> None:
    with pytest.raises(ValueError, match="at least 12 nodes"):
        layout(11)


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        pytest.param(0.5, 0.01, id="p50 at a bucket's upper bound"),
        pytest.param(0.25, 0.0075, id="p25 halfway into the second bucket"),
        pytest.param(0.99, 0.025 + 0.025 * 0.9, id="p99 nine tenths into the last finite bucket"),
    ],
)
def test_quantile_interpolates_within_buckets_as_prometheus_does(q: float, expected: float) -> None:
    # 10 observations: 5 in (0.005, 0.01], 4 in (0.01, 0.025], 1 in (0.025, 0.05].
    buckets = {0.005: 0.0, 0.01: 5.0, 0.025: 9.0, 0.05: 10.0, float("inf"): 10.0}

    assert quantile(buckets, q) == pytest.approx(expected)


def test_quantile_of_no_observations_is_none() -> None:
    assert quantile({0.01: 0.0, float("inf"): 0.0}, 0.5) is None


def test_burst_capacity_counts_whole_jobs_of_four_two_gpu_pods() -> None:
    assert [burst_capacity(n) for n in (8, 16, 80)] == [8, 16, 80]

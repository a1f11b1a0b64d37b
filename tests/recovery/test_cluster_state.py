"""What the recovery caches keep of a watched object, and the patch that lifts a gate."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from webhook.config import load_config
from webhook.recovery.cluster_state import eviction_value, pod_value
from webhook.recovery.controller import release_patch, tier_settings
from webhook.recovery.plan import TierSettings


def test_a_listed_workload_without_kind_is_read_as_the_resource_says() -> None:
    value = eviction_value("kueue.x-k8s.io/v1beta1", "Workload")
    item = {"metadata": {"name": "wl", "namespace": "ml"}, "status": {"requeueState": {"count": 1}}}
    records = value(item)
    assert records is not None
    ((key, record),) = records
    assert key == "ml/Workload/wl"
    assert record["object"]["apiVersion"] == "kueue.x-k8s.io/v1beta1"


def test_objects_without_history_are_not_kept() -> None:
    value = eviction_value("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert value({"metadata": {"name": "j", "namespace": "ml"}, "status": {"restarts": 0}}) is None


def test_pods_are_trimmed_to_what_the_controller_reads() -> None:
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "ml",
            "uid": "u",
            "managedFields": [{}],
            "annotations": {"a": "b"},
        },
        "spec": {"containers": [{"name": "c"}], "schedulingGates": [{"name": "x"}], "priority": 5},
        "status": {"phase": "Pending", "hostIP": "10.0.0.1"},
    }
    assert pod_value(pod) == {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u", "annotations": {"a": "b"}},
        "spec": {"schedulingGates": [{"name": "x"}], "priority": 5},
        "status": {"phase": "Pending"},
    }


def test_the_release_patch_tests_the_gate_before_removing_it() -> None:
    assert release_patch(1, datetime(2026, 6, 1, 10, 0, tzinfo=UTC)) == [
        {"op": "test", "path": "/spec/schedulingGates/1/name", "value": "trainguard.dev/resume"},
        {"op": "remove", "path": "/spec/schedulingGates/1"},
        {"op": "add", "path": "/metadata/labels/trainguard.dev~1resume", "value": "released"},
        {
            "op": "add",
            "path": "/metadata/annotations/trainguard.dev~1resume-released-at",
            "value": "2026-06-01T10:00:00Z",
        },
    ]


def test_tier_settings_follow_the_config(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "kind: PlatformConfig\nrecovery:\n  tiers:\n    preemptible: {cooldown: 2m, settle: 30s}\n"
    )
    assert tier_settings(load_config(path)) == {
        "guaranteed": None,
        "preemptible": TierSettings(cooldown=120, max_resuming=1, max_gated=1800, settle=30),
    }
    assert tier_settings(load_config()) == {"guaranteed": None, "preemptible": None}

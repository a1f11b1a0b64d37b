"""Eviction records: what the cluster's objects say about earlier preemptions, under which names."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.context import evictions


def kueue(status: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "ml", **meta},
        "spec": {"queueName": "lq"},
        "status": status,
    }


EVICTED = {
    "type": "Evicted",
    "status": "True",
    "reason": "Preempted",
    "lastTransitionTime": "2026-06-01T10:00:00Z",
}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            kueue({"conditions": [EVICTED]}),
            {
                "ml/Workload/wl": {
                    "count": 1,
                    "lastEvictedAt": "2026-06-01T10:00:00Z",
                    "reason": "Preempted",
                    "evidence": "condition Evicted=True reason Preempted",
                    "queue": "lq",
                    "object": {
                        "apiVersion": "kueue.x-k8s.io/v1beta2",
                        "kind": "Workload",
                        "name": "wl",
                        "namespace": "ml",
                    },
                }
            },
            id="evicted-condition",
        ),
        pytest.param(
            kueue({"conditions": [{**EVICTED, "status": "False"}]}), {}, id="cleared-condition-alone"
        ),
        pytest.param(kueue({"conditions": [{"type": "Admitted", "status": "True"}]}), {}, id="first-start"),
        pytest.param(kueue({}), {}, id="no-status"),
    ],
)
def test_kueue_workload_conditions(obj: dict[str, Any], expected: dict[str, Any]) -> None:
    assert evictions([obj]) == expected


def test_requeue_state_and_eviction_counts_count_and_owners_name_it() -> None:
    obj = kueue(
        {
            "requeueState": {"count": 2},
            "schedulingStats": {"evictions": [{"reason": "Preempted", "count": 3}]},
        },
        ownerReferences=[
            {"kind": "PyTorchJob", "name": "train", "apiVersion": "kubeflow.org/v1", "uid": "u"}
        ],
    )
    found = evictions([obj])
    assert set(found) == {"ml/Workload/wl", "ml/PyTorchJob/train"}
    assert found["ml/PyTorchJob/train"]["count"] == 3
    assert found["ml/PyTorchJob/train"]["evidence"] == "status.requeueState.count = 2"
    assert found["ml/PyTorchJob/train"]["lastEvictedAt"] is None


@pytest.mark.parametrize(
    ("obj", "evidence"),
    [
        pytest.param(
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": "j", "namespace": "ml"},
                "status": {
                    "conditions": [{"type": "Restarting", "status": "True", "reason": "PyTorchJobRestarting"}]
                },
            },
            "condition Restarting reason PyTorchJobRestarting",
            id="pytorchjob-restarting",
        ),
        pytest.param(
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "j", "namespace": "ml"},
                "status": {"restarts": 2},
            },
            "status.restarts = 2",
            id="jobset-restarts",
        ),
        pytest.param(
            {
                "apiVersion": "batch.volcano.sh/v1alpha1",
                "kind": "Job",
                "metadata": {"name": "j", "namespace": "ml"},
                "status": {"retryCount": 1},
            },
            "status.retryCount = 1",
            id="volcano-retries",
        ),
    ],
)
def test_job_kinds_own_restart_records(obj: dict[str, Any], evidence: str) -> None:
    (record,) = evictions([obj]).values()
    assert record["evidence"] == evidence


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(
            {
                "apiVersion": "jobset.x-k8s.io/v1alpha2",
                "kind": "JobSet",
                "metadata": {"name": "j"},
                "status": {"restarts": 0},
            },
            id="jobset-never-restarted",
        ),
        pytest.param(
            {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "status": {"failed": 3}},
            id="batch-job-is-not-read",
        ),
        pytest.param("not an object", id="not-a-mapping"),
    ],
)
def test_no_record(obj: Any) -> None:
    assert evictions([obj]) == {}

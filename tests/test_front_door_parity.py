"""Every front door decides a preempted workload's pod alike: `check`, `review`, `trainguard test`
(a PolicyTest case) and the webhook's /mutate give the same patch, the resume gate included.

The gate is written only when the workload's eviction record reaches the engine, and each front
door learns that record its own way (documents beside the pod, a policy test's resources, the
webhook's eviction cache), so a front door that built its engine without the record would patch
differently here.
"""

from __future__ import annotations

import base64
import copy
import json
import warnings
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
import yaml
from starlette.exceptions import StarletteDeprecationWarning

from webhook.cli import main
from webhook.config import config_from_mapping, load_config
from webhook.engine import AdmissionInput, ClusterFacts, build_engine, load_policy_set
from webhook.recovery.cluster_state import eviction_value
from webhook.serve.app import ServerState, create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

NAMESPACE = "ml"
GATE = {"name": "trainguard.dev/resume"}

# The Kueue Workload of a pod group that was preempted: the cluster's eviction record.
WORKLOAD: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Workload",
    "metadata": {"name": "grp-preempted", "namespace": NAMESPACE},
    "spec": {
        "queueName": "team-lq",
        "podSets": [
            {"name": "main", "count": 2, "template": {"spec": {"containers": [{"name": "t", "image": "x"}]}}}
        ],
    },
    "status": {
        "conditions": [
            {
                "type": "Evicted",
                "status": "True",
                "reason": "Preempted",
                "message": "preempted",
                "lastTransitionTime": "2026-06-01T10:00:00Z",
            }
        ]
    },
}

# A pod of that group coming back: admissible, so every front door answers with its patch.
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "grp-preempted-0",
        "namespace": NAMESPACE,
        "labels": {"trainguard.dev/tier": "preemptible", "kueue.x-k8s.io/queue-name": "team-lq"},
        "annotations": {
            "kueue.x-k8s.io/pod-group-name": "grp-preempted",
            "kueue.x-k8s.io/pod-group-total-count": "2",
            "trainguard.dev/checkpoint-interval": "30m",
            "trainguard.dev/checkpoint-uri": "s3://bucket/run",
            "trainguard.dev/checkpoint-owner": "team-a",
        },
    },
    "spec": {"terminationGracePeriodSeconds": 120, "containers": [{"name": "t", "image": "x"}]},
}

# The platform governs the preemptible tier's resumption, so the resume gate applies.
CONFIG: dict[str, Any] = {
    "apiVersion": "trainguard.dev/v1alpha1",
    "kind": "PlatformConfig",
    "recovery": {"tiers": {"preemptible": {"cooldown": "2m", "maxResumingPerQueue": 1}}},
}


def canonical(ops: list[dict[str, Any]]) -> list[Any]:
    """A patch with its operations in path order: a CEL map's keys come in no fixed order, so two
    calls may list the same annotations' operations differently."""
    return sorted((orjson.loads(orjson.dumps(op, option=orjson.OPT_SORT_KEYS)) for op in ops), key=json.dumps)


def patched(ops: list[dict[str, Any]]) -> dict[str, Any]:
    # jsonpatch inserts op values by reference (later ops then edit them): apply a copy.
    result: dict[str, Any] = jsonpatch.apply_patch(POD, copy.deepcopy(ops))
    return result


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    manifests = tmp_path / "workloads.yaml"
    manifests.write_text(yaml.safe_dump_all([WORKLOAD, POD]))
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    return manifests, config


def through_cli(
    command: str, records: str, files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> list[dict[str, Any]]:
    """The Pod's patch in `trainguard COMMAND -o json`'s list of `records`."""
    manifests, config = files
    code = main([command, "--config", str(config), "-o", "json", str(manifests)])
    out = capsys.readouterr().out
    assert code == 0, out
    (record,) = [r for r in json.loads(out)[records] if r["kind"] == "Pod"]
    ops: list[dict[str, Any]] = record["patch"]
    return ops


def through_check(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return through_cli("check", "results", files, capsys)


def through_review(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return through_cli("review", "reviews", files, capsys)


def through_webhook(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    # The record as the webhook's eviction cache holds it (webhook.recovery.cluster_state).
    entries = eviction_value(WORKLOAD["apiVersion"], WORKLOAD["kind"])(WORKLOAD) or ()
    facts = ClusterFacts(evictions=dict(entries))
    state = ServerState()
    state.install(build_engine(load_policy_set(), load_config(str(files[1])), facts))
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "parity-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": NAMESPACE,
            "operation": "CREATE",
            "object": POD,
            "userInfo": {"username": "system:serviceaccount:kueue-system:kueue"},
        },
    }
    with TestClient(create_app(state)) as client:
        response = client.post(
            "/mutate", content=orjson.dumps(review), headers={"content-type": "application/json"}
        )
    assert response.status_code == 200, response.text
    answer = response.json()["response"]
    assert answer["allowed"] is True, answer
    ops: list[dict[str, Any]] = orjson.loads(base64.b64decode(answer["patch"]))
    return ops


FRONT_DOORS = [
    pytest.param(through_review, id="review"),
    pytest.param(through_webhook, id="webhook"),
]


def test_check_gates_the_preempted_pod(files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    pod = patched(through_check(files, capsys))
    assert GATE in pod["spec"]["schedulingGates"]
    assert pod["metadata"]["annotations"]["trainguard.dev/resume-workload"] == "ml/Workload/grp-preempted"


@pytest.mark.parametrize("front_door", FRONT_DOORS)
def test_front_door_patches_as_check_does(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str], front_door: Any
) -> None:
    expected = canonical(through_check(files, capsys))
    assert canonical(front_door(files, capsys)) == expected


# (resources of the PolicyTest, trainguard test's exit code): without the Workload among its
# resources the case's engine has no eviction record, so the pod it patches lacks the gate.
POLICY_TEST_CASES = [
    pytest.param([WORKLOAD, POD], 0, id="with-the-eviction-record"),
    pytest.param([POD], 1, id="without-the-eviction-record"),
]


@pytest.mark.parametrize(("resources", "exit_code"), POLICY_TEST_CASES)
def test_policy_test_case_expects_checks_patched_pod(
    files: tuple[Path, Path],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    resources: list[dict[str, Any]],
    exit_code: int,
) -> None:
    expected = patched(through_check(files, capsys))
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "resume.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "trainguard.dev/v1alpha1",
                "kind": "PolicyTest",
                "metadata": {"name": "resume-parity"},
                "request": {"operation": "CREATE", "namespace": NAMESPACE},
                "config": {k: v for k, v in CONFIG.items() if k not in ("apiVersion", "kind")},
                "resources": resources,
                "cases": [
                    {
                        "name": "patched-as-check-patches-it",
                        "resource": POD["metadata"]["name"],
                        "policy": "mutate-resume-gate",
                        "result": "pass",
                        "patchedResource": expected,
                    }
                ],
            }
        )
    )
    code = main(["test", str(suite)])
    out, err = capsys.readouterr()
    assert code == exit_code, out + err


def test_an_engine_keeps_the_records_it_was_built_with() -> None:
    """The webhook's eviction cache changes under a built engine; the engine decides on the facts
    it was built from until the next one is installed."""
    records = dict(eviction_value(WORKLOAD["apiVersion"], WORKLOAD["kind"])(WORKLOAD) or ())
    engine = build_engine(
        load_policy_set(),
        config_from_mapping(copy.deepcopy(CONFIG), "<test>"),
        ClusterFacts(evictions=records),
    )
    records.clear()
    decision = engine.decide(AdmissionInput(object=copy.deepcopy(POD), namespace=NAMESPACE))
    assert GATE in patched(decision.patch)["spec"]["schedulingGates"]

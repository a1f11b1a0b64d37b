"""match (which policies apply to a workload) and decide (results -> one decision), table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.config import load_config
from webhook.engine.decide import decide
from webhook.engine.match import skip_reason
from webhook.engine.model import Decision, Match, Policy, PolicyResult
from webhook.workloads import AdaptContext, Workload, build_workload


def _workload(obj: dict[str, Any], namespace: str = "ml") -> Workload:
    ctx = AdaptContext(config=load_config(), runtimes={}, priority_classes={}, namespace=namespace)
    w = build_workload(obj, ctx)
    assert w is not None
    return w


def _job(parallelism: int, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "ml", "labels": labels},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "x"}]}},
        },
    }


SINGLE, MULTI = _job(1), _job(4)


@pytest.mark.parametrize(
    ("match", "obj", "operation", "namespace", "skips"),
    [
        pytest.param(Match(), MULTI, "CREATE", "ml", False, id="empty-match-applies"),
        pytest.param(Match(kinds=("Job",)), MULTI, "CREATE", "ml", False, id="kind-matches"),
        pytest.param(Match(kinds=("batch/Job",)), MULTI, "CREATE", "ml", False, id="group-kind-matches"),
        pytest.param(Match(kinds=("PyTorchJob",)), MULTI, "CREATE", "ml", True, id="other-kind-skips"),
        pytest.param(Match(classes=("B",)), MULTI, "CREATE", "ml", False, id="class-matches"),
        pytest.param(Match(classes=("B",)), SINGLE, "CREATE", "ml", True, id="single-node-is-class-a"),
        pytest.param(
            Match(roles=("inference",)), MULTI, "CREATE", "ml", True, id="training-is-not-inference"
        ),
        pytest.param(Match(namespaces=("team-a",)), MULTI, "CREATE", "ml", True, id="namespace-not-listed"),
        pytest.param(Match(exclude_namespaces=("ml",)), MULTI, "CREATE", "ml", True, id="namespace-excluded"),
        pytest.param(Match(operations=("CREATE",)), MULTI, "UPDATE", "ml", True, id="operation-not-listed"),
        pytest.param(Match(tiers=("preemptible",)), MULTI, "CREATE", "ml", True, id="guaranteed-by-default"),
        pytest.param(
            Match(tiers=("preemptible",)),
            _job(4, **{"trainguard.dev/tier": "preemptible"}),
            "CREATE",
            "ml",
            False,
            id="tier-label-matches",
        ),
    ],
)
def test_skip_reason_says_why_a_policy_does_not_apply(
    match: Match, obj: dict[str, Any], operation: str, namespace: str, skips: bool
) -> None:
    reason = skip_reason(match, _workload(obj), operation, namespace)
    assert (reason is not None) == skips, reason
    if skips:
        assert isinstance(reason, str) and reason


def _policy(mode: str = "Enforce", failure: str = "Fail") -> Policy:
    return Policy("p", "p.yaml", "p", "", mode, failure, Match())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mode", "failure", "outcome", "allowed", "bucket", "classified"),
    [
        pytest.param("Enforce", "Fail", "fail", False, "violations", "fail", id="enforce-fail-denies"),
        pytest.param("Warn", "Fail", "fail", True, "warnings", "warn", id="warn-fail-warns"),
        pytest.param("Audit", "Fail", "fail", True, "audits", "audit", id="audit-fail-records"),
        pytest.param("Enforce", "Fail", "error", False, "violations", "error", id="error-fail-denies"),
        pytest.param("Enforce", "Ignore", "error", True, "warnings", "error", id="error-ignore-warns"),
        pytest.param("Enforce", "Fail", "exempt", True, None, "exempt", id="exempt-never-denies"),
        pytest.param("Enforce", "Fail", "skip", True, None, "skip", id="skip-allows"),
        pytest.param("Enforce", "Fail", "pass", True, None, "pass", id="pass-allows"),
    ],
)
def test_decide_applies_mode_and_failure_policy(
    mode: str, failure: str, outcome: Any, allowed: bool, bucket: str | None, classified: str
) -> None:
    result = PolicyResult("p", outcome, ("no",), ("spec.x",), reasons=("Invalid",))
    decision = decide(Decision(True), [(_policy(mode, failure), result)])
    assert decision.allowed is allowed
    assert [r.outcome for r in decision.results] == [classified]
    buckets = {"violations": decision.violations, "warnings": decision.warnings, "audits": decision.audits}
    assert {name: len(found) for name, found in buckets.items()} == {
        name: int(name == bucket) for name in buckets
    }
    if bucket is not None and outcome == "fail":
        (finding,) = buckets[bucket]
        assert (finding.message, finding.field, finding.reason) == ("no", "spec.x", "Invalid")
    if bucket is not None and outcome == "error":
        (finding,) = buckets[bucket]
        assert finding.reason == "InternalError" and "could not be evaluated (no)" in finding.message

"""The validating call's decision, made ahead (engine/ahead.py): made only where nothing the API
server sets between the two calls can reach it, used only where it is the decision the call would
make, and then the same decision."""

from __future__ import annotations

import copy
import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import corpus_files
from tests.engine.test_adaptations import as_the_api_server_sends, generated_pod, job
from webhook.config import load_config
from webhook.context import context_objects
from webhook.documents import read_manifests
from webhook.engine import (
    Adaptations,
    AdmissionInput,
    Decision,
    Engine,
    PolicySet,
    default_policies_dir,
    load_policy_set,
    parse_exception,
)
from webhook.engine.ahead import Conditions

# Long enough that no machine gives up a decision made ahead: these tests are about what is
# decided, not about time (a give-up has its own test).
PATIENT = 3600.0
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def conditions(
    tree: dict[str, Any], exceptions: list[Any] | None = None, evictions: bool = False
) -> Conditions:
    return Conditions.of(tree, exceptions or [], evictions=evictions)


@pytest.mark.parametrize(
    ("tree", "made"),
    [
        pytest.param({}, True, id="nothing-read"),
        pytest.param({"object": {"spec": {"trainer": {}}}, "workload": {"gang": {}}}, True, id="spec-only"),
        pytest.param({"object": {"metadata": {"labels": {}}}}, True, id="labels"),
        pytest.param({"object": {"metadata": {"name": {}}}}, True, id="the-name"),
        pytest.param({"object": {}}, False, id="object-whole"),
        pytest.param({"object": {"*": {}}}, False, id="object-keys"),
        pytest.param({"object": {"status": {}}}, False, id="status"),
        pytest.param({"object": {"metadata": {"uid": {}}}}, False, id="uid"),
        pytest.param({"object": {"metadata": {"creationTimestamp": {}}}}, False, id="creation-time"),
        pytest.param({"object": {"metadata": {"generation": {}}}}, False, id="generation"),
        pytest.param({"object": {"metadata": {"resourceVersion": {}}}}, False, id="resource-version"),
        pytest.param({"object": {"metadata": {"managedFields": {}}}}, False, id="managed-fields"),
        pytest.param({"object": {"metadata": {}}}, False, id="metadata-whole"),
        pytest.param({"object": {"metadata": {"": {}}}}, False, id="metadata-sized"),
    ],
)
def test_made_only_where_no_policy_reads_what_the_api_server_sets(tree: dict[str, Any], made: bool) -> None:
    assert conditions(tree).made is made


@pytest.mark.parametrize(
    ("tree", "exceptions", "evictions", "blind"),
    [
        pytest.param({"object": {"spec": {}}, "workload": {"gang": {}}}, [], False, True, id="blind"),
        pytest.param({"request": {"name": {}}}, [], False, False, id="request-name"),
        pytest.param({"request": {}}, [], False, False, id="request-whole"),
        pytest.param({"request": {"operation": {}}}, [], False, True, id="request-operation"),
        pytest.param({"workload": {"name": {}}}, [], False, False, id="workload-name"),
        pytest.param({"workload": {}}, [], False, False, id="workload-whole"),
        pytest.param({"object": {"metadata": {"name": {}}}}, [], False, False, id="object-name"),
        pytest.param({"cluster": {"evictions": {}}}, [], True, False, id="evictions-looked-up-by-name"),
        pytest.param({"cluster": {"evictions": {}}}, [], False, True, id="no-eviction-records"),
        pytest.param({}, ["named"], False, False, id="exception-naming-workloads"),
        pytest.param({}, ["namespace"], False, True, id="exception-by-namespace"),
    ],
)
def test_a_name_matters_where_anything_in_the_phase_can_see_it(
    tree: dict[str, Any], exceptions: list[str], evictions: bool, blind: bool
) -> None:
    made = [waiver(kind) for kind in exceptions]
    assert conditions(tree, made, evictions).name_blind is blind


def test_an_exception_of_unknown_expiry_makes_nothing_ahead() -> None:
    class Exempts:
        def exempts(self, policy: str, workload: Any, namespace: str | None, now: datetime) -> str | None:
            return None

    assert not conditions({}, [Exempts()]).made


def waiver(kind: str, expires: datetime = NOW + timedelta(days=30), policy: str = "gang-required") -> Any:
    """A PolicyException exempting `policy`: by namespace, or naming a workload (`named`)."""
    match: dict[str, Any] = {"namespaces": ["ml"]}
    if kind == "named":
        match = {"workloads": [{"namespace": "ml", "name": "train"}]}
    return parse_exception(
        {
            "apiVersion": "trainguard.dev/v1alpha1",
            "kind": "PolicyException",
            "metadata": {"name": f"waiver-{kind}"},
            "spec": {
                "policies": [policy],
                "match": match,
                "justification": "single-node smoke tests",
                "owner": "platform",
                "expiresAt": expires.isoformat().replace("+00:00", "Z"),
            },
        },
        "waiver.yaml",
    )


# -- through the engine: /mutate, the store settles, /validate on what the API server sends back ---


@pytest.fixture(scope="module")
def policies() -> PolicySet:
    return load_policy_set([default_policies_dir()], "cel-expr-python")


def engine(policies: PolicySet, store: Adaptations | None = None, **facts: Any) -> Engine:
    return Engine(policies, load_config(), adaptations=store, **facts)


def patient() -> Adaptations:
    return Adaptations(ahead_seconds=PATIENT)


def unpatched_gang_job() -> dict[str, Any]:
    """A 2-node torchrun Job that gang-required denies (no queue: the mutations add none here)."""
    return job()


def pair(
    decider: Engine, obj: dict[str, Any], *, user: str = "alice", seed: int = 0, now: datetime | None = None
) -> tuple[Decision, dict[str, Any]]:
    """The validating decision of `obj` after its mutating call, and the object it decided."""
    user_info = {"username": user, "groups": ["system:authenticated"]}
    mutating = decider.decide(AdmissionInput(object=obj, namespace="ml", user_info=user_info), validate=False)
    assert mutating.mutated is not None
    arrived = as_the_api_server_sends(mutating.mutated, seed)
    validating = AdmissionInput(object=arrived, namespace="ml", user_info=user_info)
    return decider.decide(validating, mutate=False, now=now), arrived


def alone(policies: PolicySet, arrived: dict[str, Any], **facts: Any) -> Decision:
    """The validating decision of a server that keeps nothing."""
    user_info = {"username": "alice", "groups": ["system:authenticated"]}
    inp = AdmissionInput(object=copy.deepcopy(arrived), namespace="ml", user_info=user_info)
    return engine(policies, **facts).decide(inp, mutate=False)


def same(a: Decision, b: Decision) -> bool:
    """The same decision, whatever the way it was made."""
    return (a.allowed, a.violations, a.warnings, a.audits, a.results, a.workload) == (
        b.allowed,
        b.violations,
        b.warnings,
        b.audits,
        b.results,
        b.workload,
    )


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param(job(), id="a-job"),
        pytest.param(generated_pod(), id="a-pod-named-by-the-api-server"),
    ],
)
def test_the_validating_call_answers_with_the_decision_made_ahead(
    policies: PolicySet, obj: dict[str, Any]
) -> None:
    decided, arrived = pair(engine(policies, patient()), obj)
    assert decided.made_ahead
    assert same(decided, alone(policies, arrived))
    assert decided.mutated is arrived  # the call's own object, and its name
    assert decided.workload is not None and decided.workload.name == arrived["metadata"]["name"]


def test_a_decision_made_ahead_is_used_once(policies: PolicySet) -> None:
    decider = engine(policies, patient())
    first, arrived = pair(decider, job())
    again = decider.decide(AdmissionInput(object=copy.deepcopy(arrived), namespace="ml"), mutate=False)
    assert first.made_ahead and not again.made_ahead
    assert same(again, alone(policies, arrived))


def test_another_engine_decides_for_itself(policies: PolicySet) -> None:
    """A reload or a changed fact builds another engine, which shares the store."""
    store = patient()
    before = engine(policies, store)
    mutating = before.decide(AdmissionInput(object=job(), namespace="ml"), validate=False)
    assert mutating.mutated is not None
    arrived = as_the_api_server_sends(mutating.mutated)
    after = engine(policies, store)
    decided = after.decide(AdmissionInput(object=arrived, namespace="ml"), mutate=False)
    assert not decided.made_ahead
    assert same(decided, alone(policies, arrived))


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"user_info": {"username": "mallory"}}, id="another-user"),
        pytest.param({"dry_run": True}, id="dry-run"),
        pytest.param({"namespace": "other"}, id="another-namespace"),
    ],
)
def test_a_request_that_differs_decides_for_itself(policies: PolicySet, change: dict[str, Any]) -> None:
    decider = engine(policies, patient())
    mutating = decider.decide(AdmissionInput(object=generated_pod(), namespace="ml"), validate=False)
    assert mutating.mutated is not None
    arrived = as_the_api_server_sends(mutating.mutated)
    if "namespace" in change:
        del arrived["metadata"]["namespace"]
    inp = dataclasses.replace(AdmissionInput(object=arrived, namespace="ml"), **change)
    assert not decider.decide(inp, mutate=False).made_ahead


def test_an_update_is_never_decided_ahead(policies: PolicySet) -> None:
    decider = engine(policies, patient())
    old = job()
    mutating = decider.decide(
        AdmissionInput(object=job(), operation="UPDATE", old_object=old), validate=False
    )
    assert mutating.mutated is not None
    arrived = as_the_api_server_sends(mutating.mutated)
    inp = AdmissionInput(object=arrived, operation="UPDATE", old_object=old)
    assert not decider.decide(inp, mutate=False).made_ahead


def test_an_exception_that_expires_between_the_calls_is_seen(policies: PolicySet) -> None:
    """gang-required denies the Job; a waiver lifts it until it expires. Made ahead while the waiver
    held, the decision is not used once it has expired: the call denies, as one made then would."""
    expires = datetime.now(UTC) + timedelta(hours=1)
    exceptions = [waiver("namespace", expires)]
    decider = engine(policies, patient(), exceptions=exceptions)
    held, _ = pair(decider, unpatched_gang_job())
    assert held.made_ahead and held.allowed
    lapsed, arrived = pair(decider, unpatched_gang_job(), seed=1, now=expires + timedelta(seconds=1))
    assert not lapsed.made_ahead and not lapsed.allowed
    assert {f.policy for f in lapsed.violations} == {"gang-required"}


def test_a_policy_that_reads_the_name_is_decided_when_the_name_is_known(
    policies: PolicySet, tmp_path: Path
) -> None:
    """A policy reading request.name: a name the API server generates is not known ahead."""
    reads_name = {
        "apiVersion": "trainguard.dev/v1alpha1",
        "kind": "TrainingPolicy",
        "metadata": {"name": "name-length"},
        "spec": {
            "mode": "Warn",
            "match": {"operations": ["CREATE"]},
            "validations": [
                {"expression": "request.name == null || size(request.name) < 20", "message": "long"}
            ],
        },
    }
    (tmp_path / "name-length.yaml").write_text(yaml.safe_dump(reads_name))
    own = load_policy_set([default_policies_dir(), tmp_path], "cel-expr-python")
    decider = engine(own, patient())
    generated, arrived = pair(decider, generated_pod("a-rather-long-generated-name-"))
    assert not generated.made_ahead
    assert {f.policy for f in generated.warnings} >= {"name-length"}
    assert same(generated, alone(own, arrived))
    named, _ = pair(decider, job())
    assert named.made_ahead


def test_a_decision_that_takes_too_long_ahead_is_made_by_its_call(policies: PolicySet) -> None:
    store = Adaptations(ahead_seconds=-1.0)  # gives up before it starts
    decided, arrived = pair(engine(policies, store), job())
    assert not decided.made_ahead
    assert same(decided, alone(policies, arrived))


@pytest.mark.skipif(not corpus_files(), reason="the shared corpus is not beside this checkout")
@pytest.mark.parametrize(
    "path", [pytest.param(p, id=str(p.relative_to(p.parents[1]))) for p in corpus_files()]
)
def test_the_corpus_is_decided_ahead_as_its_calls_would_decide_it(path: Path, policies: PolicySet) -> None:
    docs = read_manifests([str(path)])
    runtimes, priority_classes = context_objects(d.data for d in docs)
    facts: dict[str, Any] = {"runtimes": runtimes, "priority_classes": priority_classes}
    decider = engine(policies, patient(), **facts)
    for doc in docs:
        mutating = decider.decide(AdmissionInput(object=doc.data, namespace="ml"), validate=False)
        if mutating.skipped_reason is not None:
            continue
        assert mutating.mutated is not None
        arrived = as_the_api_server_sends(mutating.mutated)
        decided = decider.decide(AdmissionInput(object=arrived, namespace="ml"), mutate=False)
        assert decided.made_ahead, doc.source
        inp = AdmissionInput(object=copy.deepcopy(arrived), namespace="ml")
        assert same(decided, engine(policies, **facts).decide(inp, mutate=False)), doc.source


def test_a_call_that_times_its_policies_evaluates_them(policies: PolicySet) -> None:
    """The server times 1 in N calls' policies (their metric): such a call does not take the
    decision made ahead, whose policies were not timed."""
    decider = engine(policies, patient())
    mutating = decider.decide(AdmissionInput(object=job(), namespace="ml"), validate=False)
    assert mutating.mutated is not None
    arrived = as_the_api_server_sends(mutating.mutated)
    timings: dict[str, float] = {}
    decided = decider.decide(AdmissionInput(object=arrived, namespace="ml"), mutate=False, timings=timings)
    assert not decided.made_ahead
    assert "gang-required" in timings
    assert same(decided, alone(policies, arrived))


def test_pods_of_one_template_created_at_once_each_find_their_decision(policies: PolicySet) -> None:
    """A Job's pods are one object until the API server names them: their mutating calls come
    before their validating calls, which each take a decision made for their own request."""
    decider = engine(policies, patient())
    users = ["alice", "bob", "alice"]
    arrived = []
    for seed, user in enumerate(users):
        inp = AdmissionInput(object=generated_pod(), namespace="ml", user_info={"username": user})
        mutating = decider.decide(inp, validate=False)
        assert mutating.mutated is not None
        arrived.append(as_the_api_server_sends(mutating.mutated, seed))
    for obj, user in reversed(list(zip(arrived, users, strict=True))):
        inp = AdmissionInput(object=obj, namespace="ml", user_info={"username": user})
        decided = decider.decide(inp, mutate=False)
        assert decided.made_ahead, user
        assert decided.workload is not None and decided.workload.name == obj["metadata"]["name"]
    once_more = AdmissionInput(object=arrived[0], namespace="ml", user_info={"username": "alice"})
    assert not decider.decide(once_more, mutate=False).made_ahead

"""The engine end to end: modes, failurePolicy, skips, and idempotent mutation over the real corpus."""

from __future__ import annotations

import copy
import dataclasses
import time
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.conftest import BACKENDS, corpus_files
from webhook.config import PlatformConfig, load_config
from webhook.context import context_objects
from webhook.documents import read_manifests
from webhook.engine.compile import PolicySet, load_policy_set
from webhook.engine.joined import Joined
from webhook.engine.pipeline import AdmissionInput, Engine
from webhook.workloads import Deferred

NO_GANG_JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "j", "namespace": "ml"},
    "spec": {
        "parallelism": 4,
        "completions": 4,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "x"}]}},
    },
}


def _policy_dir(tmp_path: Path, *, mode: str = "Enforce", failure: str = "Fail", expression: str) -> Path:
    (tmp_path / "p.yaml").write_text(
        "apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\nmetadata:\n  name: rule\n"
        f"spec:\n  mode: {mode}\n  failurePolicy: {failure}\n  validations:\n"
        f"    - expression: '{expression}'\n      message: rule says no\n"
    )
    return tmp_path


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("mode", "failure", "expression", "allowed", "where"),
    [
        pytest.param("Enforce", "Fail", "false", False, "violations", id="enforce-denies"),
        pytest.param("Warn", "Fail", "false", True, "warnings", id="warn-allows-with-warning"),
        pytest.param("Audit", "Fail", "false", True, "audits", id="audit-records-only"),
        pytest.param(
            "Enforce", "Fail", "object.spec.nothere > 1", False, "violations", id="error-with-fail-denies"
        ),
        pytest.param(
            "Enforce", "Ignore", "object.spec.nothere > 1", True, "warnings", id="error-with-ignore-warns"
        ),
        pytest.param("Enforce", "Fail", "true", True, None, id="pass-allows"),
    ],
)
def test_mode_and_failure_policy_shape_the_decision(
    tmp_path: Path, backend: str, mode: str, failure: str, expression: str, allowed: bool, where: str | None
) -> None:
    engine = Engine(
        load_policy_set([_policy_dir(tmp_path, mode=mode, failure=failure, expression=expression)], backend),
        load_config(),
    )
    decision = engine.decide(AdmissionInput(object=NO_GANG_JOB))
    assert decision.allowed is allowed
    buckets = {"violations": decision.violations, "warnings": decision.warnings, "audits": decision.audits}
    for name, findings in buckets.items():
        assert (len(findings) == 1) == (name == where), name
    if where and "nothere" in expression:
        assert "could not be evaluated" in buckets[where][0].message


@pytest.mark.parametrize(
    ("failure", "allowed", "where"),
    [
        pytest.param("Fail", False, "violations", id="fail-denies-naming-the-budget"),
        pytest.param("Ignore", True, "warnings", id="ignore-allows-with-a-warning"),
    ],
)
def test_a_deadline_already_past_gives_each_policy_its_failure_policy_outcome(
    tmp_path: Path, failure: str, allowed: bool, where: str
) -> None:
    engine = Engine(
        load_policy_set([_policy_dir(tmp_path, failure=failure, expression="true")]), load_config()
    )
    decision = engine.decide(AdmissionInput(object=NO_GANG_JOB, deadline=time.monotonic() - 1))
    assert decision.allowed is allowed
    findings = decision.violations if where == "violations" else decision.warnings
    assert [f.policy for f in findings] == ["rule"]
    assert "time budget exceeded" in findings[0].message
    assert [r.outcome for r in decision.results] == ["error"]


def test_a_deadline_in_the_future_changes_nothing(tmp_path: Path) -> None:
    engine = Engine(load_policy_set([_policy_dir(tmp_path, expression="false")]), load_config())
    decision = engine.decide(AdmissionInput(object=NO_GANG_JOB, deadline=time.monotonic() + 60))
    assert [f.message for f in decision.violations] == ["rule says no"]


def _script_job(script: str) -> dict[str, Any]:
    job = copy.deepcopy(NO_GANG_JOB)
    job["spec"]["template"]["spec"]["containers"][0]["command"] = ["sh", "-c", script]
    return job


@pytest.mark.parametrize(
    ("obj", "yield_in", "deferred"),
    [
        pytest.param(NO_GANG_JOB, 60.0, False, id="time-left-decides-the-same"),
        pytest.param(NO_GANG_JOB, -1.0, True, id="instant-past-defers"),
        pytest.param(
            _script_job("torchrun --nnodes=4 t.py"), 60.0, False, id="short-launch-line-decides-the-same"
        ),
        pytest.param(
            _script_job("A=1; echo $A; " * 2000 + "torchrun --nnodes=4 t.py"),
            60.0,
            True,
            id="long-launch-line-defers",
        ),
    ],
)
def test_a_yielding_review_gives_the_same_decision_or_defers(
    policy_set: PolicySet, config: PlatformConfig, obj: dict[str, Any], yield_in: float, deferred: bool
) -> None:
    """A review with `yield_at` either decides as one without, or raises Deferred: never a third
    answer (no launch-limits warning, no failurePolicy outcome) for having been asked to yield."""
    engine = Engine(policy_set, config)
    plain = engine.decide(AdmissionInput(object=obj, namespace="ml"))
    yielding = AdmissionInput(object=obj, namespace="ml", yield_at=time.monotonic() + yield_in)
    if deferred:
        with pytest.raises(Deferred):
            engine.decide(yielding)
    else:
        again = engine.decide(yielding)
        assert (again.allowed, again.violations, again.warnings, again.patch) == (
            plain.allowed,
            plain.violations,
            plain.warnings,
            plain.patch,
        )
    assert "launch-limits" not in [f.policy for f in plain.warnings]


def test_only_the_bounded_runtime_promises_bounded_steps(
    policy_set: PolicySet, config: PlatformConfig
) -> None:
    assert Engine(policy_set, config).steps_bounded is (policy_set.backend.name == "cel-expr-python")


@pytest.mark.parametrize("backend", BACKENDS)
def test_engines_rebuilt_on_one_policy_set_keep_their_own_params(tmp_path: Path, backend: str) -> None:
    # The webhook builds a new Engine on every cluster change: what it derives from the policies
    # alone is made once per set, what it takes from the config stays its own.
    policies = load_policy_set(
        [_policy_dir(tmp_path, expression="object.spec.parallelism <= params.restarts.max")], backend
    )
    (tmp_path / "strict.yaml").write_text("restarts:\n  max: 3\n")
    (tmp_path / "loose.yaml").write_text("restarts:\n  max: 8\n")
    strict = Engine(policies, load_config(tmp_path / "strict.yaml"))
    loose = Engine(policies, load_config(tmp_path / "loose.yaml"))
    assert not strict.decide(AdmissionInput(object=NO_GANG_JOB)).allowed  # parallelism 4
    assert loose.decide(AdmissionInput(object=NO_GANG_JOB)).allowed
    assert strict._validation.tree is loose._validation.tree  # derived once, from the set


def test_without_remember_each_call_adapts_afresh(tmp_path: Path) -> None:
    engine = Engine(load_policy_set([_policy_dir(tmp_path, expression="true")]), load_config())
    first = engine.decide(AdmissionInput(object=NO_GANG_JOB))
    assert engine.decide(AdmissionInput(object=NO_GANG_JOB)).workload is not first.workload


@pytest.mark.parametrize(
    ("inp", "reason"),
    [
        pytest.param(
            AdmissionInput(object=NO_GANG_JOB, operation="DELETE"),
            "operation DELETE",
            id="delete-always-allowed",
        ),
        pytest.param(
            AdmissionInput(object=NO_GANG_JOB, operation="CONNECT"),
            "operation CONNECT",
            id="connect-always-allowed",
        ),
        pytest.param(
            AdmissionInput(object={**NO_GANG_JOB, "metadata": {"name": "j", "namespace": "kube-system"}}),
            "namespace kube-system is excluded",
            id="excluded-namespace",
        ),
        pytest.param(
            AdmissionInput(object={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}),
            "not a workload",
            id="not-a-workload-kind",
        ),
    ],
)
def test_objects_trainguard_does_not_decide_are_allowed_untouched(
    policy_set: PolicySet, config: PlatformConfig, inp: AdmissionInput, reason: str
) -> None:
    decision = Engine(policy_set, config).decide(inp)
    assert decision.allowed
    assert decision.patch == []
    assert decision.skipped_reason is not None and reason in decision.skipped_reason


def test_decision_is_taken_on_the_mutated_object(policy_set: PolicySet, config: PlatformConfig) -> None:
    gpu_gang = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "g", "namespace": "ml", "labels": {"kueue.x-k8s.io/queue-name": "q"}},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 8}}}
                    ],
                }
            },
        },
    }
    engine = Engine(policy_set, config)
    assert engine.decide(AdmissionInput(object=gpu_gang)).allowed, (
        "the topology mutation satisfies topology-slo"
    )
    unmutated = engine.decide(AdmissionInput(object=gpu_gang), mutate=False)
    assert not unmutated.allowed
    assert [f.policy for f in unmutated.violations] == ["topology-slo"]


def _corpus_docs() -> list[Any]:
    return [pytest.param(path, id=str(path.relative_to(path.parents[1]))) for path in corpus_files()]


@pytest.mark.skipif(not corpus_files(), reason="the shared corpus is not beside this checkout")
@pytest.mark.parametrize("path", _corpus_docs())
def test_corpus_manifest_is_decided_and_mutations_are_idempotent(
    path: Path, policy_set: PolicySet, config: PlatformConfig
) -> None:
    docs = read_manifests([str(path)])
    runtimes, priority_classes = context_objects(d.data for d in docs)
    engine = Engine(policy_set, config, runtimes=runtimes, priority_classes=priority_classes)
    for doc in docs:
        decision = engine.decide(AdmissionInput(object=doc.data, namespace="default"))
        assert not [r for r in decision.results if r.outcome == "error"], doc.source
        assert decision.mutated is not None
        assert jsonpatch.apply_patch(doc.data, decision.patch) == decision.mutated
        again = engine.decide(AdmissionInput(object=decision.mutated, namespace="default"))
        assert again.patch == [], f"{doc.source}: second pass patched {again.patch}"
        assert again.allowed == decision.allowed
        for r in decision.results:
            if r.patch:  # each mutation on its own is idempotent too
                assert not [x for x in again.results if x.policy == r.policy and x.patch]


def generic_only(policy_set: PolicySet) -> PolicySet:
    """The same policies with no phase program: every policy takes the generic path."""
    return dataclasses.replace(
        policy_set,
        mutating_joined=Joined(None, ("generic-only",) * len(policy_set.mutating)),
        validating_joined=Joined(None, ("generic-only",) * len(policy_set.validating)),
    )


@pytest.mark.skipif(not corpus_files(), reason="the shared corpus is not beside this checkout")
def test_every_way_of_evaluating_decides_the_corpus_identically(config: PlatformConfig) -> None:
    # The C++ runtime's phase programs, the same runtime expression by expression (the generic
    # path), and cel-python (always generic): every policy's result, the patch and the messages.
    policies = Path(__file__).resolve().parents[2] / "policies"
    joined = load_policy_set([policies], "cel-expr-python")
    assert joined.validating_joined.program is not None and joined.mutating_joined.program is not None
    sets = {
        "joined": joined,
        "generic": generic_only(joined),
        "cel-python": load_policy_set([policies], "cel-python"),
    }
    for path in corpus_files():
        docs = read_manifests([str(path)])
        runtimes, priority_classes = context_objects(d.data for d in docs)
        engines = {
            name: Engine(ps, config, runtimes=runtimes, priority_classes=priority_classes)
            for name, ps in sets.items()
        }
        for doc in docs:
            inp = AdmissionInput(object=doc.data, namespace="default")
            fast, generic, slow = (engine.decide(inp) for engine in engines.values())
            assert (fast.results, fast.patch) == (generic.results, generic.patch), doc.source
            assert (
                fast.allowed,
                fast.patch,
                [(f.policy, f.message) for f in fast.violations + fast.warnings],
            ) == (
                slow.allowed,
                slow.patch,
                [(f.policy, f.message) for f in slow.violations + slow.warnings],
            ), doc.source
        assert engines["joined"].fallbacks.counts() == {}, path
        assert set(engines["generic"].fallbacks.counts()) <= {
            ("mutating", "generic-only"),
            ("validating", "generic-only"),
        }


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("validate", [True, False], ids=["mutate-and-validate", "mutate-only"])
def test_each_phase_sees_what_its_own_policies_read(tmp_path: Path, backend: str, validate: bool) -> None:
    # CEL is handed, per phase, only what that phase's policies read: the mutation here reads
    # `workload.kind` and the job's parallelism, the validation `workload.totalPods` and the
    # pool parameter; neither may miss what it reads because the other phase does not read it.
    (tmp_path / "m.yaml").write_text(
        "apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\nmetadata:\n  name: label\nspec:\n"
        "  mode: Enforce\n  mutations:\n    - name: kind\n      patchExpression: >-\n"
        '        [{"op": "set", "path": "/metadata/labels/seen", "value": workload.kind + "-" +\n'
        "          string(object.spec.parallelism)}]\n"
    )
    (tmp_path / "v.yaml").write_text(
        "apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\nmetadata:\n  name: size\nspec:\n"
        "  mode: Enforce\n  validations:\n    - expression: workload.totalPods < 4\n"
        "      messageExpression: \"string(workload.totalPods) + ' pods in pool ' + params.pools.training\"\n"
    )
    engine = Engine(load_policy_set([tmp_path], backend), load_config())
    decision = engine.decide(AdmissionInput(object=NO_GANG_JOB), validate=validate)
    assert decision.patch == [{"op": "add", "path": "/metadata/labels", "value": {"seen": "Job-4"}}]
    expected = ["4 pods in pool training"] if validate else []
    assert [f.message for f in decision.violations] == expected


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("validate", [True, False], ids=["validation", "mutation"])
def test_list_elements_carry_every_field_a_policy_reads_through_macros_and_variables(
    tmp_path: Path, backend: str, validate: bool
) -> None:
    # CEL is handed, of each group and container, only the fields some macro or variable reads:
    # each one read here must arrive (a missing one would fail the policy with "no such key").
    (tmp_path / "m.yaml").write_text(
        "apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\nmetadata:\n  name: label\nspec:\n"
        "  mode: Enforce\n  variables:\n"
        "    - name: wide\n      expression: workload.groups.filter(g, g.replicas > 1)\n"
        "  mutations:\n    - name: names\n      patchExpression: >-\n"
        '        [{"op": "set", "path": "/metadata/labels/seen", "value":\n'
        "          variables.wide.map(g, g.containers.map(c, c.name + '-' + string(c.gpus)).join('.')).join('_')\n"
        "          + '-' + variables.wide[0].fieldPrefix}]\n"
    )
    (tmp_path / "v.yaml").write_text(
        "apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\nmetadata:\n  name: names\nspec:\n"
        "  mode: Enforce\n  variables:\n"
        "    - name: wide\n      expression: >-\n"
        "        workload.kind == 'Pod' ? [] : workload.groups.filter(g, g.replicas > 1)\n"
        "  validations:\n    - expression: variables.wide.size() == 0\n"
        "      messageExpression: >-\n"
        "        variables.wide.map(g, g.name + ' runs ' + string(g.replicas) + ' pods of ' +\n"
        "          g.containers.map(c, c.name).join(', ')).join('; ')\n"
        "      fieldExpression: variables.wide[0].fieldPrefix + 'spec.containers'\n"
    )
    engine = Engine(load_policy_set([tmp_path], backend), load_config())
    decision = engine.decide(AdmissionInput(object=NO_GANG_JOB), validate=validate)
    assert decision.patch == [
        {"op": "add", "path": "/metadata/labels", "value": {"seen": "t-0-spec.template."}}
    ]
    if validate:
        assert [(f.message, f.field) for f in decision.violations] == [
            ("main runs 4 pods of t", "spec.template.spec.containers")
        ]


def _policies(tmp_path: Path, rules: dict[str, str], *, mutations: dict[str, str] | None = None) -> Path:
    """One validating policy per rule (name: expression), one mutating policy per mutation."""
    for name, expression in rules.items():
        (tmp_path / f"{name}.yaml").write_text(
            "apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\n"
            f"metadata:\n  name: {name}\nspec:\n  mode: Enforce\n  failurePolicy: Ignore\n"
            f"  validations:\n    - expression: '{expression}'\n      message: {name} says no\n"
        )
    for name, edits in (mutations or {}).items():
        (tmp_path / f"{name}.yaml").write_text(
            "apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\n"
            f"metadata:\n  name: {name}\nspec:\n  mode: Enforce\n  failurePolicy: Ignore\n"
            f"  mutations:\n    - name: m\n      patchExpression: '{edits}'\n"
        )
    return tmp_path


def _label(key: str, value: str) -> str:
    return f'[{{"op": "merge", "path": "/metadata/labels", "value": {{"{key}": {value}}}}}]'


@pytest.mark.parametrize(
    ("rules", "mutations", "outcomes"),
    [
        pytest.param(
            {"a": "true", "b": "false", "c": "object.spec.parallelism == 4"},
            {},
            {"a": "pass", "b": "fail", "c": "pass"},
            id="each-its-own-result",
        ),
        pytest.param(
            {"a": "false", "b": "object.spec.nothere > 1", "c": "1 / (object.spec.parallelism - 4) > 0"},
            {},
            {"a": "fail", "b": "error", "c": "error"},
            id="errors-stay-with-their-policies",
        ),
        pytest.param(
            {"a": "object.spec.parallelism > 1", "b": "true"},
            {
                "m1": _label("x", '"1"'),
                "m2": "object.spec.nothere > 1 ? [] : " + _label("y", '"2"'),
                "m3": _label("z", '"3"'),
            },
            {"a": "pass", "b": "pass", "m1": "pass", "m2": "error", "m3": "pass"},
            id="a-failing-mutation-leaves-the-others",
        ),
    ],
)
@pytest.mark.parametrize("backend", BACKENDS)
def test_policies_evaluated_together_decide_as_one_by_one(
    tmp_path: Path, backend: str, rules: dict[str, str], mutations: dict[str, str], outcomes: dict[str, str]
) -> None:
    # One evaluation serves a phase's policies; a request whose policy times are wanted takes them
    # one by one: both must give every policy its own result and the same patch.
    engine = Engine(
        load_policy_set([_policies(tmp_path, rules, mutations=mutations)], backend), load_config()
    )
    # the C++ runtime's phases each have one program here (cel-python evaluates one by one)
    assert (engine.policies.validating_joined.program is not None) is (backend == "cel-expr-python")
    together = engine.decide(AdmissionInput(object=NO_GANG_JOB))
    timings: dict[str, float] = {}
    alone = engine.decide(AdmissionInput(object=NO_GANG_JOB), timings=timings)
    assert {r.policy: r.outcome for r in together.results} == outcomes
    assert together.results == alone.results
    assert together.patch == alone.patch
    assert [f.message for f in together.warnings] == [f.message for f in alone.warnings]
    assert sorted(timings) == sorted(outcomes)


def test_skipped_policies_are_not_remembered_across_kinds(tmp_path: Path) -> None:
    (tmp_path / "jobs.yaml").write_text(
        "apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\nmetadata:\n  name: jobs\n"
        "spec:\n  mode: Enforce\n  match:\n    kinds: [Job]\n  validations:\n"
        "    - expression: 'false'\n      message: no jobs\n"
    )
    _policies(tmp_path, {"any": "true"})
    engine = Engine(load_policy_set([tmp_path]), load_config())
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": [{"name": "t", "image": "x"}]},
    }
    outcomes = [
        {r.policy: r.outcome for r in engine.decide(AdmissionInput(object=obj)).results}
        for obj in (NO_GANG_JOB, pod, NO_GANG_JOB)
    ]
    job, skipped = {"jobs": "fail", "any": "pass"}, {"jobs": "skip", "any": "pass"}
    assert outcomes == [job, skipped, job]


_TWO_CONTAINER_POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p", "namespace": "ml"},
    "spec": {
        "containers": [
            {
                "name": "trainer",
                "command": ["torchrun", "--nnodes=2", "--nproc-per-node=8", "train.py"],
                "resources": {"limits": {"nvidia.com/gpu": 8}},
            },
            {"name": "sidecar", "command": ["sh", "-c", "sleep infinity"]},
        ]
    },
}


def _env_policy(tmp_path: Path, container: int) -> Path:
    (tmp_path / "env.yaml").write_text(
        "apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\nmetadata:\n  name: env\n"
        "spec:\n  mode: Enforce\n  mutations:\n    - name: env\n      patchExpression: >-\n"
        f'        [{{"op": "upsert", "path": "/spec/containers/{container}/env", "key": "name",\n'
        '          "value": {"name": "ADDED", "value": "1"}}]\n'
    )
    return tmp_path


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("mutate", "validate", "reads"),
    [
        # 2 containers adapted, then the mutated object: only the container the mutation changed.
        pytest.param(True, True, 3, id="mutate-then-validate-rereads-only-the-changed-container"),
        pytest.param(True, False, 2, id="mutate-only-adapts-once"),
        pytest.param(False, True, 2, id="validate-only-adapts-once"),
    ],
)
def test_a_review_reads_again_only_the_containers_its_mutations_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, mutate: bool, validate: bool, reads: int
) -> None:
    from webhook.workloads import podtemplate

    read = podtemplate._container
    calls: list[str] = []

    def counting(c: Any, *args: Any) -> Any:
        calls.append(c["name"])
        return read(c, *args)

    monkeypatch.setattr(podtemplate, "_container", counting)
    engine = Engine(load_policy_set([_env_policy(tmp_path, 1)], backend), load_config())
    decision = engine.decide(AdmissionInput(object=_TWO_CONTAINER_POD), mutate=mutate, validate=validate)
    assert len(calls) == reads
    assert decision.workload is not None
    trainer, sidecar = decision.workload.groups[0].containers
    if mutate and validate:  # the validated workload is the mutated object's, read where it changed
        assert calls[2:] == ["sidecar"]
        assert sidecar.env == {"ADDED": "1"}
    else:
        assert sidecar.env == {}
    assert trainer.env == {} and trainer.torchrun is not None and trainer.torchrun.nnodes is not None


@pytest.mark.parametrize(
    ("spent_between", "reads"),
    [
        pytest.param(0, 1, id="budget-where-it-stood-reuses"),
        pytest.param(1, 2, id="budget-elsewhere-reads-again"),
    ],
)
def test_a_remembered_container_is_reused_only_with_the_budget_where_it_stood(
    spent_between: int, reads: int
) -> None:
    from webhook.accelerators import accelerators_of
    from webhook.config import load_config
    from webhook.workloads import podtemplate
    from webhook.workloads.torchrun import WorkloadBudget

    gpu = accelerators_of(load_config())
    memo: dict[tuple[Any, ...], Any] = {}
    c = _TWO_CONTAINER_POD["spec"]["containers"][0]
    first_budget, second_budget = WorkloadBudget(), WorkloadBudget()
    first = podtemplate.remembered_container(
        memo, c, "/spec/containers/0", None, "", 0, None, first_budget, gpu
    )
    second_budget.remaining -= spent_between
    before = second_budget.remaining
    second = podtemplate.remembered_container(
        memo, c, "/spec/containers/0", None, "", 0, None, second_budget, gpu
    )
    assert len(memo) == reads
    assert second == first
    # A reuse charges what the first reading spent, as reading again would.
    assert before - second_budget.remaining == WorkloadBudget().remaining - first_budget.remaining

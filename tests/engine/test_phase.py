"""phase: one seam evaluates a phase, by its one program where that serves and by the generic
path where it does not; the fallback is counted, and both paths decide alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BACKENDS
from webhook.config import load_config
from webhook.engine.compile import PolicySet, load_policy_set
from webhook.engine.joined import DOES_NOT_COMPILE, NO_JOINING_RUNTIME, VARIABLE_NAME, Joined
from webhook.engine.model import Decision
from webhook.engine.phase import EVALUATION_FAILED
from webhook.engine.pipeline import AdmissionInput, Engine

JOB: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "j", "namespace": "ml", "labels": {"a": "1"}},
    "spec": {
        "n": 3,
        "parallelism": 1,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "t", "image": "x"}]}},
    },
}


def _policies(tmp_path: Path, *specs: str) -> Path:
    for i, spec in enumerate(specs):
        (tmp_path / f"p{i}.yaml").write_text(
            f"apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\nmetadata:\n  name: p{i}\n"
            "spec:\n  mode: Enforce\n" + spec
        )
    return tmp_path


def generic_only(policy_set: PolicySet) -> PolicySet:
    """The same policies with no phase program: every policy takes the generic path."""
    return dataclasses.replace(
        policy_set,
        mutating_joined=Joined(None, ("generic-only",) * len(policy_set.mutating)),
        validating_joined=Joined(None, ("generic-only",) * len(policy_set.validating)),
    )


def _seen(decision: Decision) -> tuple[Any, ...]:
    return (
        decision.allowed,
        decision.results,
        decision.patch,
        [(f.policy, f.message, f.field) for f in decision.violations + decision.warnings],
    )


# A policy is evaluated in its phase's program where the runtime can join it (conditions,
# variables and expressions together) and expression by expression otherwise; both must conclude
# the same, down to which expression an error names.
JOINABLE = [
    pytest.param("  validations:\n    - expression: object.spec.n == 3\n      message: m\n", id="passes"),
    pytest.param(
        "  validations:\n    - expression: object.spec.n == 4\n      message: fixed\n"
        "      reason: Invalid\n    - expression: 'true'\n      message: never\n",
        id="fails-with-its-message-and-reason",
    ),
    pytest.param(
        "  matchConditions:\n    - name: big\n      expression: object.spec.n > 10\n"
        "  validations:\n    - expression: 'false'\n      message: m\n",
        id="unmet-condition-skips",
    ),
    pytest.param(
        "  matchConditions:\n    - name: first\n      expression: object.spec.missing == 1\n"
        "    - name: second\n      expression: 'false'\n"
        "  validations:\n    - expression: 'false'\n      message: m\n",
        id="condition-error-before-a-false-condition-is-an-error",
    ),
    pytest.param(
        "  matchConditions:\n    - name: first\n      expression: 'false'\n"
        "    - name: second\n      expression: object.spec.missing == 1\n"
        "  validations:\n    - expression: 'false'\n      message: m\n",
        id="condition-after-a-false-one-is-not-evaluated",
    ),
    pytest.param(
        "  matchConditions:\n    - name: number\n      expression: object.spec.n\n"
        "  validations:\n    - expression: 'false'\n      message: m\n",
        id="condition-not-a-bool",
    ),
    pytest.param(
        "  matchConditions:\n    - name: no-variables-here\n      expression: variables.n == 3\n"
        "  variables:\n    - name: n\n      expression: object.spec.n\n"
        "  validations:\n    - expression: 'false'\n      message: m\n",
        id="conditions-do-not-see-variables",
    ),
    pytest.param(
        "  variables:\n    - name: unused\n      expression: object.spec.missing\n"
        "  validations:\n    - expression: 'true'\n      message: m\n",
        id="a-failing-variable-fails-the-policy-though-unused",
    ),
    pytest.param(
        "  variables:\n    - name: n\n      expression: object.spec.n\n"
        "    - name: double\n      expression: variables.n * 2\n"
        "  validations:\n    - expression: variables.double == 6\n      message: m\n"
        "    - expression: variables.double == 7\n"
        "      messageExpression: \"'double is ' + string(variables.double)\"\n"
        "      fieldExpression: \"'spec.n'\"\n",
        id="variables-in-expressions-messages-and-fields",
    ),
    pytest.param(
        "  validations:\n    - expression: 'false'\n      message: static\n"
        "      messageExpression: \"'  '\"\n      field: spec.a\n      fieldExpression: \"''\"\n",
        id="empty-message-and-field-expressions-fall-back",
    ),
    pytest.param(
        "  validations:\n    - expression: 'false'\n      messageExpression: object.spec.missing\n"
        "    - expression: object.spec.missing\n      message: m\n",
        id="message-error-is-named-before-a-later-check-error",
    ),
    pytest.param(
        "  validations:\n    - expression: 'true'\n      messageExpression: object.spec.missing\n",
        id="message-of-a-passing-check-is-not-evaluated",
    ),
    pytest.param(
        "  validations:\n    - expression: object.spec.n\n      message: m\n", id="check-not-a-bool"
    ),
    pytest.param(
        "  matchConditions:\n    - name: small\n      expression: object.spec.n < 10\n"
        "  variables:\n    - name: v\n      expression: '\"2\"'\n"
        "  mutations:\n    - name: label\n"
        '      patchExpression: \'[{"op": "set", "path": "/metadata/labels/b", "value": variables.v}]\'\n',
        id="mutation",
    ),
    pytest.param(
        "  matchConditions:\n    - name: big\n      expression: object.spec.n > 10\n"
        "  mutations:\n    - name: label\n"
        '      patchExpression: \'[{"op": "set", "path": "/metadata/labels/b", "value": "2"}]\'\n',
        id="mutation-unmet-condition",
    ),
    pytest.param(
        "  mutations:\n    - name: label\n      patchExpression: object.spec.missing\n",
        id="mutation-error",
    ),
]


@pytest.mark.parametrize("spec", JOINABLE)
def test_the_phase_program_and_the_generic_path_agree(tmp_path: Path, spec: str) -> None:
    policy_set = load_policy_set([_policies(tmp_path, spec)], "cel-expr-python")
    joined = policy_set.mutating_joined if policy_set.mutating else policy_set.validating_joined
    assert joined.refusals == (None,)  # the C++ runtime joins every policy here
    fast = Engine(policy_set, load_config())
    generic = Engine(generic_only(policy_set), load_config())
    assert _seen(fast.decide(AdmissionInput(object=JOB))) == _seen(generic.decide(AdmissionInput(object=JOB)))
    assert set(generic.fallbacks.counts().values()) == {1}


# Nested lists count against the runtime parser's 32 levels: this one compiles on its own, but
# not inside the phase's program, which nests every policy a few levels deeper.
_DEEP = "[" * 29 + "3" + "]" * 29
_PASSES = "  validations:\n    - expression: object.spec.n == 3\n      message: m\n"
_FAILS_TO_EVALUATE = "  validations:\n    - expression: object.spec.missing == 1\n      message: m\n"
_TOO_DEEP = f"  validations:\n    - expression: '{_DEEP}.size() == 2'\n      message: not two\n"
# A comprehension that stops early (`exists` finding its element) before the variables are
# bound, in the policy's own condition or in another policy of the same program
_EXISTS_FIRST = (
    '  matchConditions:\n    - name: any\n      expression: \'[{"n": 1}, {"n": 2}].exists(t, t.n == 1)\'\n'
    "  variables:\n    - name: n\n      expression: object.spec.n\n"
    "  validations:\n    - expression: variables.n == 3\n      message: m\n"
)
_EXISTS_ONLY = "  validations:\n    - expression: '[1, 2].exists(t, t == 1)'\n      message: m\n"
_VARIABLE_AFTER = (
    "  variables:\n    - name: n\n      expression: object.spec.n\n"
    "  validations:\n    - expression: variables.n == 3\n      message: m\n"
)
_NOT_AN_IDENTIFIER = (
    "  variables:\n    - name: my-n\n      expression: object.spec.n\n"
    "  validations:\n    - expression: object.spec.n == 3\n      message: m\n"
)
_LABEL = (
    "  mutations:\n    - name: label\n"
    '      patchExpression: \'[{"op": "set", "path": "/metadata/labels/b", "value": "2"}]\'\n'
)


@pytest.mark.parametrize(
    ("backend", "specs", "fallbacks", "outcomes"),
    [
        pytest.param(
            "cel-expr-python",
            (_PASSES, _LABEL),
            {},
            {"p0": "pass", "p1": "pass"},
            id="served-by-the-program-no-fallback",
        ),
        pytest.param(
            "cel-expr-python",
            (_EXISTS_FIRST, _EXISTS_ONLY, _VARIABLE_AFTER),
            {},
            {"p0": "pass", "p1": "pass", "p2": "pass"},
            id="variables-bound-after-a-comprehension-that-stopped-early",
        ),
        pytest.param(
            "cel-expr-python",
            (_PASSES, _FAILS_TO_EVALUATE, _LABEL),
            # the program fails as a whole: each validating policy's error must be its own
            {("validating", EVALUATION_FAILED): 2},
            {"p0": "pass", "p1": "error", "p2": "pass"},
            id="evaluation-error-falls-back-for-the-phase",
        ),
        pytest.param(
            "cel-expr-python",
            (_PASSES, _TOO_DEEP, _LABEL),
            {("validating", DOES_NOT_COMPILE): 1},
            {"p0": "pass", "p1": "fail", "p2": "pass"},
            id="too-deep-to-join-falls-back-alone",
        ),
        pytest.param(
            "cel-expr-python",
            (_NOT_AN_IDENTIFIER, _LABEL),
            {("validating", VARIABLE_NAME): 1},
            {"p0": "pass", "p1": "pass"},
            id="variable-name-the-program-cannot-bind-falls-back-alone",
        ),
        pytest.param(
            "cel-python",
            (_PASSES, _LABEL),
            {("validating", NO_JOINING_RUNTIME): 1, ("mutating", NO_JOINING_RUNTIME): 1},
            {"p0": "pass", "p1": "pass"},
            id="runtime-without-programs-falls-back-always",
        ),
    ],
)
def test_a_policy_the_program_cannot_serve_is_decided_by_the_generic_path_and_counted(
    tmp_path: Path,
    backend: str,
    specs: tuple[str, ...],
    fallbacks: dict[tuple[str, str], int],
    outcomes: dict[str, str],
) -> None:
    policy_set = load_policy_set([_policies(tmp_path, *specs)], backend)
    engine = Engine(policy_set, load_config())
    decision = engine.decide(AdmissionInput(object=JOB))
    assert {r.policy: r.outcome for r in decision.results} == outcomes
    assert engine.fallbacks.counts() == fallbacks
    reference = Engine(generic_only(policy_set), load_config()).decide(AdmissionInput(object=JOB))
    assert _seen(decision) == _seen(reference)
    engine.decide(AdmissionInput(object=JOB))
    assert engine.fallbacks.counts() == {key: 2 * n for key, n in fallbacks.items()}  # per request


def test_the_runtime_says_why_a_policy_does_not_join(tmp_path: Path) -> None:
    policy_set = load_policy_set([_policies(tmp_path, _PASSES, _TOO_DEEP)], "cel-expr-python")
    joined = policy_set.validating_joined
    assert joined.refusals == (None, DOES_NOT_COMPILE)
    assert joined.details[1] is not None and "recursion" in joined.details[1]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("match", "obj", "outcome"),
    [
        pytest.param("  match:\n    kinds: [Job]\n", JOB, "pass", id="matched-kind-applies"),
        pytest.param("  match:\n    kinds: [PyTorchJob]\n", JOB, "skip", id="other-kind-skips"),
        pytest.param("  match:\n    excludeNamespaces: [ml]\n", JOB, "skip", id="excluded-namespace-skips"),
        pytest.param("  match:\n    operations: [UPDATE]\n", JOB, "skip", id="other-operation-skips"),
    ],
)
def test_both_paths_skip_the_same_policies(
    tmp_path: Path, backend: str, match: str, obj: dict[str, Any], outcome: str
) -> None:
    # Applicability is decided once, before either path evaluates anything.
    policy_set = load_policy_set([_policies(tmp_path, match + _LABEL, match + _PASSES)], backend)
    for ps in (policy_set, generic_only(policy_set)):
        decision = Engine(ps, load_config()).decide(AdmissionInput(object=obj))
        assert [r.outcome for r in decision.results] == [outcome, outcome]
        assert bool(decision.patch) is (outcome == "pass")


@pytest.mark.parametrize(
    ("specs", "fallbacks"),
    [
        pytest.param((_PASSES, _EXISTS_ONLY, _LABEL), {}, id="all-served"),
        pytest.param(
            (_PASSES, _FAILS_TO_EVALUATE, _LABEL),
            {("validating", EVALUATION_FAILED): 1},
            id="only-the-failing-policy-falls-back",
        ),
    ],
)
def test_timed_policies_are_evaluated_one_by_one_and_decide_alike(
    tmp_path: Path, specs: tuple[str, ...], fallbacks: dict[tuple[str, str], int]
) -> None:
    # A request whose policy times are wanted (the webhook samples some) evaluates each policy in
    # an evaluation of its own: a failing one falls back alone, the others keep the program.
    policy_set = load_policy_set([_policies(tmp_path, *specs)], "cel-expr-python")
    engine = Engine(policy_set, load_config())
    timings: dict[str, float] = {}
    timed = engine.decide(AdmissionInput(object=JOB), timings=timings)
    assert engine.fallbacks.counts() == fallbacks
    assert sorted(timings) == [f"p{i}" for i in range(len(specs))]
    assert _seen(timed) == _seen(Engine(policy_set, load_config()).decide(AdmissionInput(object=JOB)))

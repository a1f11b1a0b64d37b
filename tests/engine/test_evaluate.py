"""evaluate: one compiled policy against one request's bindings, on both CEL backends."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BACKENDS
from webhook.engine.bindings import Bindings
from webhook.engine.compile import load_policy_set
from webhook.engine.evaluate import mutate, validate
from webhook.engine.mutate import Patcher

OBJECT: dict[str, Any] = {
    "metadata": {"name": "j", "labels": {"a": "1"}},
    "spec": {"n": 3, "containers": [{"name": "c"}]},
}


def _compiled(tmp_path: Path, backend: str, spec: str) -> Any:
    (tmp_path / "p.yaml").write_text(
        "apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\nmetadata:\n  name: p\nspec:\n" + spec
    )
    ps = load_policy_set([tmp_path], backend)
    return ps.policies[0], Bindings(ps.backend, {"object": OBJECT, "variables": {}})


VALIDATIONS = [
    pytest.param("    - expression: object.spec.n == 3\n      message: m\n", "pass", (), (), id="passes"),
    pytest.param(
        "    - expression: object.spec.n == 4\n      message: fixed\n",
        "fail",
        ("fixed",),
        ("",),
        id="message",
    ),
    pytest.param(
        "    - expression: 'false'\n      message: fallback\n      messageExpression: \"''\"\n",
        "fail",
        ("fallback",),
        ("",),
        id="empty-message-expression-falls-back",
    ),
    pytest.param(
        "    - expression: 'false'\n      messageExpression: \"'n is ' + string(object.spec.n)\"\n"
        "      fieldExpression: \"'spec.n'\"\n",
        "fail",
        ("n is 3",),
        ("spec.n",),
        id="message-and-field-expressions",
    ),
    pytest.param(
        "    - expression: object.spec.n\n      message: m\n",
        "error",
        ("validations[0].expression: must be a bool, got 3",),
        (),
        id="not-a-bool-is-an-error-naming-where",
    ),
    pytest.param(
        "    - expression: object.spec.missing == 1\n      message: m\n",
        "error",
        None,
        (),
        id="evaluation-error-is-data",
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("validations", "outcome", "messages", "fields"), VALIDATIONS)
def test_validate(
    tmp_path: Path, backend: str, validations: str, outcome: str, messages: Any, fields: tuple[str, ...]
) -> None:
    cp, bindings = _compiled(tmp_path, backend, "  validations:\n" + validations)
    result = validate(cp, bindings)
    assert result.outcome == outcome
    if messages is not None:
        assert result.messages == messages
    else:
        assert result.messages[0].startswith("validations[0].expression: ")
    assert result.fields == fields


@pytest.mark.parametrize("backend", BACKENDS)
def test_variables_see_the_ones_before_them(tmp_path: Path, backend: str) -> None:
    spec = (
        "  variables:\n    - name: n\n      expression: object.spec.n\n"
        "    - name: double\n      expression: variables.n * 2\n"
        "  validations:\n    - expression: variables.double == 7\n"
        "      messageExpression: \"'double is ' + string(variables.double)\"\n"
    )
    cp, bindings = _compiled(tmp_path, backend, spec)
    assert validate(cp, bindings).messages == ("double is 6",)


@pytest.mark.parametrize("backend", BACKENDS)
def test_unmet_match_condition_skips(tmp_path: Path, backend: str) -> None:
    spec = (
        "  matchConditions:\n    - name: big\n      expression: object.spec.n > 10\n"
        "  validations:\n    - expression: 'false'\n      message: m\n"
    )
    cp, bindings = _compiled(tmp_path, backend, spec)
    result = validate(cp, bindings)
    assert (result.outcome, result.messages) == ("skip", ("matchConditions not met",))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("edits", "outcome", "labels"),
    [
        pytest.param(
            '[{"op": "set", "path": "/metadata/labels/b", "value": "2"}]',
            "pass",
            {"a": "1", "b": "2"},
            id="applies",
        ),
        pytest.param(
            '[{"op": "set", "path": "/metadata/labels/b", "value": "2"},'
            ' {"op": "set", "path": "/metadata/name/x", "value": "y"}]',
            "error",
            {"a": "1"},
            id="a-failing-edit-rolls-the-policy-back",
        ),
        pytest.param(
            '[{"op": "set", "path": "/metadata/labels/b", "value": "2"},'
            ' {"op": "set", "path": "/spec/containers/3/name", "value": "y"}]',
            "error",
            {"a": "1"},
            id="writing-below-a-missing-list-element-is-the-policys-error",
        ),
    ],
)
def test_mutate_lands_whole_or_not_at_all(
    tmp_path: Path, backend: str, edits: str, outcome: str, labels: dict[str, str]
) -> None:
    cp, bindings = _compiled(
        tmp_path, backend, f"  mutations:\n    - name: m\n      patchExpression: '{edits}'\n"
    )
    patcher = Patcher(OBJECT)
    result = mutate(cp, bindings, patcher)
    assert result.outcome == outcome
    assert patcher.doc["metadata"]["labels"] == labels
    assert OBJECT["metadata"]["labels"] == {"a": "1"}  # the input is never changed in place

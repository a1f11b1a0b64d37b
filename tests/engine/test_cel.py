"""The two CEL backends behind one interface: same values, same errors, no reference leaks."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from webhook.engine.cel import CelCompileError, CelEvalError, make_backend

BACKENDS = ("cel-expr-python", "cel-python")
DATA: dict[str, Any] = {
    "workload": {
        "elastic": None,
        "gang": {"min": 3, "mechanisms": ["kueue"]},
        "name": "j",
        "groups": [{"n": 1}, {"n": 2}],
    },
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("expression", "value"),
    [
        pytest.param("workload.elastic == null", True, id="null-equals-null"),
        pytest.param("workload.gang != null", True, id="map-not-null"),
        pytest.param("workload.gang.min != null", True, id="int-not-null"),
        pytest.param("workload.gang.mechanisms != null", True, id="list-not-null"),
        pytest.param('workload["name"] + "-x"', "j-x", id="string-concat"),
        pytest.param('workload.gang.mechanisms.join(", ")', "kueue", id="join"),
        pytest.param("workload.groups.map(g, g.n * 2)", [2, 4], id="map-macro"),
        pytest.param("workload.groups.filter(g, g.n > 1).size()", 1, id="filter-size"),
        pytest.param(
            '[{"op": "set", "value": 1}, {"op": "merge", "value": "x"}]',
            [{"op": "set", "value": 1}, {"op": "merge", "value": "x"}],
            id="heterogeneous-maps",
        ),
    ],
)
def test_backends_agree_on_the_subset_policies_use(backend: str, expression: str, value: Any) -> None:
    be = make_backend(backend)
    assert be.compile(expression).evaluate(be.activation(DATA)) == value


@pytest.mark.parametrize("backend", BACKENDS)
def test_compile_error_carries_a_position(backend: str) -> None:
    with pytest.raises(CelCompileError) as info:
        make_backend(backend).compile("workload.gang.min >")
    assert info.value.position is not None and info.value.position.startswith("line 1, column")


@pytest.mark.parametrize("backend", BACKENDS)
def test_missing_key_is_an_evaluation_error(backend: str) -> None:
    be = make_backend(backend)
    with pytest.raises(CelEvalError):
        be.compile("workload.nothere > 1").evaluate(be.activation(DATA))


@pytest.mark.parametrize(
    "expression",
    [
        pytest.param("[null, workload.elastic, {'a': null}]", id="list-and-map"),
        pytest.param("{1: null, 2: [null]}", id="keys-json-cannot-name"),
        pytest.param("[duration('1s'), null]", id="a-value-json-cannot-write"),
        pytest.param("[b'x', [[null]], 'null']", id="bytes-and-a-null-string"),
        pytest.param("null", id="bare"),
    ],
)
def test_returned_nulls_do_not_drain_references_to_none(expression: str) -> None:
    # cel-expr-python 0.1.3 returns CEL null without a reference to None; on Python < 3.12 the
    # interpreter aborts once None's count reaches zero. The backend must give them back.
    be = make_backend("cel-expr-python")
    program = be.compile(expression)
    activation = be.activation(DATA)
    for _ in range(100):
        program.evaluate(activation)
    before = sys.getrefcount(None)
    for _ in range(10_000):
        program.evaluate(activation)
    assert sys.getrefcount(None) >= before - 50

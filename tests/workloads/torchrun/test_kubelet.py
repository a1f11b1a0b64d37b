"""The kubelet's $(VAR) expansion of command and args."""

from __future__ import annotations

import pytest

from webhook.workloads.torchrun.kubelet import expand
from webhook.workloads.torchrun.limits import Meter
from webhook.workloads.torchrun.unknown import UNK

ENV: dict[str, str | None] = {"N": "2", "SECRET": None, "EMPTY": ""}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("--nnodes=$(N)", "--nnodes=2", id="defined-variable"),
        pytest.param("$(N)$(N)", "22", id="adjacent-references"),
        pytest.param("$$(N)", "$(N)", id="escaped-dollar"),
        pytest.param("$$$(N)", "$2", id="escaped-dollar-then-reference"),
        pytest.param("$(SECRET)", UNK, id="value-from-is-unknown"),
        pytest.param("$(UNDEFINED)", UNK, id="undefined-may-come-from-envfrom"),
        pytest.param("$(EMPTY)x", "x", id="empty-value"),
        pytest.param("$((1+2))", "$((1+2))", id="arithmetic-left-to-the-shell"),
        pytest.param("a $( b", "a $( b", id="incomplete-reference-kept"),
        pytest.param("$($($(", "$($($(", id="run-without-close"),
        pytest.param("$($(N)", "$($(N)", id="name-with-dollar-paren-is-not-a-name"),
        pytest.param("$N ${N}", "$N ${N}", id="shell-syntax-untouched"),
        pytest.param("trailing$", "trailing$", id="trailing-dollar"),
        pytest.param("no dollars", "no dollars", id="nothing-to-do"),
    ],
)
def test_expand(text: str, expected: str) -> None:
    assert expand(text, ENV, Meter()) == expected


def test_a_run_of_dollar_parens_is_read_once() -> None:
    meter = Meter()
    text = "$(" * 100_000
    assert expand(text, ENV, meter) == text
    assert meter.work == len(text)

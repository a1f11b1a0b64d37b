"""The environment a command starts with: its shell's exported variables plus its own edits."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from webhook.workloads.torchrun.environ import Environ
from webhook.workloads.torchrun.limits import Meter

BASE: dict[str, str | None] = {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "8", "LOCAL": "x", "HOME": "/h"}
EXPORTED = {"PET_NNODES", "PET_NPROC_PER_NODE", "HOME"}


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        pytest.param(lambda e: None, {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "8"}, id="exported-only"),
        pytest.param(
            lambda e: e.set("PET_NNODES", "4"), {"PET_NNODES": "4", "PET_NPROC_PER_NODE": "8"}, id="set-overrides"
        ),
        pytest.param(lambda e: e.unset("PET_NNODES"), {"PET_NPROC_PER_NODE": "8"}, id="unset-hides"),
        pytest.param(lambda e: (e.clear(), e.set("PET_MAX_RESTARTS", "1")), {"PET_MAX_RESTARTS": "1"}, id="clear-then-set"),
        pytest.param(lambda e: (e.unset("PET_NNODES"), e.set("PET_NNODES", None)), {"PET_NNODES": None, "PET_NPROC_PER_NODE": "8"}, id="unknown-value"),
    ],
)  # fmt: skip
def test_pet(edit: Callable[[Environ], object], expected: dict[str, str | None]) -> None:
    env = Environ(BASE, EXPORTED)
    edit(env)
    assert env.pet(Meter()) == expected


def test_edits_never_touch_the_shells_variables() -> None:
    env = Environ(BASE, EXPORTED)
    env.clear()
    env.set("HOME", "/other")
    assert BASE["HOME"] == "/h" and env.materialize(Meter()) == {"HOME": "/other"}

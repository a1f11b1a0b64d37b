"""_fast_init writes __init__ only for what it can fill through slot descriptors, and says so."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from webhook.workloads.model import _fast_init


@dataclass(frozen=True, slots=True)
class _Filled:
    a: int
    b: tuple[int, ...] = ()


@dataclass(frozen=True)
class _NoSlots:
    a: int


@dataclass(slots=True)
class _NotFrozen:
    a: int


class _NotADataclass:
    a: int = 0


@pytest.mark.parametrize(
    "cls",
    [
        pytest.param(_NoSlots, id="frozen-without-slots"),
        pytest.param(_NotFrozen, id="slots-not-frozen"),
        pytest.param(_NotADataclass, id="not-a-dataclass"),
    ],
)
def test_what_it_cannot_fill_is_refused_by_name(cls: type) -> None:
    with pytest.raises(TypeError, match=f"frozen dataclass with slots, not {cls.__qualname__}"):
        _fast_init(cls)


def test_a_frozen_slotted_dataclass_keeps_its_signature_and_stays_frozen() -> None:
    filled = _fast_init(_Filled)
    value = filled(1)
    assert (value.a, value.b) == (1, ())
    assert filled(a=2, b=(3,)) == _Filled(2, (3,))
    with pytest.raises(AttributeError):
        value.a = 5  # type: ignore[misc]

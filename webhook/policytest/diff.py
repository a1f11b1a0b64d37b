"""Where an expected object and an actual one differ, as JSON pointers, for a failed case's message."""

from __future__ import annotations

from typing import Any

from webhook.fields import escape


def differences(expected: Any, actual: Any, pointer: str = "", limit: int = 5) -> list[str]:
    """Where two JSON-like values differ, as 'at /path: expected X, got Y' (at most `limit`)."""
    out: list[str] = []
    _diff(expected, actual, pointer, out, limit)
    return out


_ABSENT = object()


def _diff(expected: Any, actual: Any, pointer: str, out: list[str], limit: int) -> None:
    if len(out) >= limit:
        return
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in list(dict.fromkeys([*expected, *actual])):
            child = f"{pointer}/{escape(str(key))}"
            _diff(expected.get(key, _ABSENT), actual.get(key, _ABSENT), child, out, limit)
        return
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            _diff(e, a, f"{pointer}/{i}", out, limit)
        return
    if expected != actual or type(expected) is not type(actual):
        out.append(f"at {pointer or '/'}: expected {_show(expected)}, got {_show(actual)}")


def _show(value: Any) -> str:
    if value is _ABSENT:
        return "nothing"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."

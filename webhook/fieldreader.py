"""Strict, typed reading of the YAML documents trainguard defines (policies, exceptions, tests).

A typo (`validation:` for `validations:`) must be an error naming the file and the field, never a
document that silently means less. Each document kind subclasses FieldReader and says, in
fail(), which error to raise and how to locate it.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any


def type_name(value: Any) -> str:
    """How an error message names the type of a value a user wrote."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return type(value).__name__


# RFC 3339 date-time with a time zone (a trailing Z or an offset); a space may stand for the T.
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})$")


def rfc3339(value: Any) -> datetime | None:
    """An aware datetime from an RFC 3339 string or a YAML timestamp with a zone; None otherwise."""
    if isinstance(value, datetime):  # an unquoted YAML timestamp
        return value if value.tzinfo is not None else None
    if not isinstance(value, str) or not _RFC3339.match(value.strip()):
        return None
    text = value.strip().upper().replace(" ", "T").replace("Z", "+00:00")
    try:
        return datetime.fromisoformat(text)
    except ValueError:  # a day or hour out of range
        return None


class FieldReader:
    def fail(self, message: str, field: str) -> Exception:
        raise NotImplementedError

    def document_kind(self, doc: dict[str, Any], api_version: str, kind: str, field: str) -> None:
        """Refuse a document of another apiVersion or kind, naming both as written."""
        if doc.get("apiVersion") != api_version or doc.get("kind") != kind:
            raise self.fail(
                f"expected apiVersion {api_version} and kind {kind}, "
                f"got {doc.get('apiVersion')!r} / {doc.get('kind')!r}",
                field,
            )

    def mapping(
        self, value: Any, field: str, allowed: set[str] | None = None, *, required: bool = False
    ) -> dict[str, Any]:
        if value is None:
            if required:
                raise self.fail("is required", field)
            return {}
        if not isinstance(value, dict):
            raise self.fail(f"must be a mapping, got {type_name(value)}", field)
        if allowed is not None:
            unknown = sorted(str(k) for k in set(value) - allowed)
            if unknown:
                raise self.fail(f"unknown field {unknown[0]!r} (known: {', '.join(sorted(allowed))})", field)
        return value

    def string(self, value: Any, field: str, *, required: bool = False) -> str | None:
        if value is None:
            if required:
                raise self.fail("is required", field)
            return None
        if not isinstance(value, str) or not value.strip():
            raise self.fail("must be a non-empty string", field)
        return value

    def items(self, value: Any, field: str, *, required: bool = False) -> list[Any]:
        if value is None:
            if required:
                raise self.fail("is required (a non-empty list)", field)
            return []
        if not isinstance(value, list) or (required and not value):
            raise self.fail("must be a non-empty list" if required else "must be a list", field)
        return value

    def strings(
        self, value: Any, field: str, allowed: set[str] | None = None, *, required: bool = False
    ) -> tuple[str, ...]:
        items = self.items(value, field, required=required)
        if not all(isinstance(v, str) and v.strip() for v in items):
            raise self.fail("must be a list of non-empty strings", field)
        if allowed is not None:
            bad = [v for v in items if v not in allowed]
            if bad:
                raise self.fail(f"{bad[0]!r} is not one of {', '.join(sorted(allowed))}", field)
        return tuple(items)

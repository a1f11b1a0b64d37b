"""Finding PolicyTest files and reading them strictly: errors name the file and the field (a
PolicyTest file holds one document; a resource file's errors name the document too)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date, datetime
from pathlib import Path
from typing import Any

from webhook.config import PlatformConfig, config_from_mapping, load_config
from webhook.documents import load_yaml_documents, read_manifests
from webhook.engine import (
    PolicyException,
    load_exceptions,
    parse_exception,
)
from webhook.errors import ConfigError, InputError, PolicyError
from webhook.fieldreader import FieldReader, rfc3339
from webhook.policytest.model import (
    _CASE_FIELDS,
    _REQUEST_FIELDS,
    _TOP_FIELDS,
    API_VERSION,
    KIND,
    OPERATIONS,
    OUTCOMES,
    SUFFIXES,
    PolicyTestCase,
    PolicyTestFile,
    Resource,
)


def discover(paths: Iterable[str | Path]) -> list[Path]:
    """Every *.yaml/*.yml under `paths` (or named) whose first document is a PolicyTest, sorted."""
    out: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            candidates = sorted(c for c in path.rglob("*") if c.is_file() and c.suffix in SUFFIXES)
            out.extend(c for c in candidates if _is_test_file(c))
        elif path.is_file():
            out.append(path)
        else:
            raise InputError("no such file or directory", source=str(path))
    return out


def _is_test_file(path: Path) -> bool:
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    # Only the kind matters here: a cheap look, the full load comes later (and reports errors).
    return re.search(r"^kind:\s*['\"]?PolicyTest['\"]?\s*$", text, re.MULTILINE) is not None


class _Reader(FieldReader):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.base = path.parent

    def fail(self, message: str, field: str | None = None) -> InputError:
        return InputError(message, source=str(self.path), field=field)

    def file(self, value: str, field: str) -> Path:
        path = (self.base / value).resolve() if not Path(value).is_absolute() else Path(value)
        if not path.exists():
            raise self.fail(f"{value!r} does not exist (paths are relative to the test file)", field)
        return path


def load_test_file(path: str | Path) -> PolicyTestFile:
    """Parse one PolicyTest file; InputError names file and field for anything malformed."""
    path = Path(path)
    r = _Reader(path)
    try:
        docs = load_yaml_documents(path.read_text("utf-8"), str(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise r.fail(f"cannot read: {exc}") from None
    if len(docs) != 1:
        raise r.fail(f"a PolicyTest file holds exactly one document, found {len(docs)}")
    doc = r.mapping(docs[0].data, "(document)", _TOP_FIELDS)
    r.document_kind(doc, API_VERSION, KIND, "kind")
    meta = r.mapping(doc.get("metadata"), "metadata", {"name", "labels", "annotations"})
    name = r.string(meta.get("name"), "metadata.name") or path.stem
    request = r.mapping(doc.get("request"), "request", _REQUEST_FIELDS)
    operation = r.string(request.get("operation"), "request.operation") or "CREATE"
    if operation not in OPERATIONS:
        raise r.fail(f"must be one of {', '.join(OPERATIONS)}, got {operation!r}", "request.operation")
    namespace = r.string(request.get("namespace"), "request.namespace") or "default"
    user_info = r.mapping(request.get("userInfo"), "request.userInfo")
    resources = _resources(r, doc.get("resources"), "resources", namespace, required=True)
    old = _resources(r, doc.get("oldResources"), "oldResources", namespace, required=False)
    policies = tuple(
        r.file(r.string(p, f"policies[{i}]", required=True) or "", f"policies[{i}]")
        for i, p in enumerate(r.items(doc.get("policies"), "policies"))
    )  # none: load_policy_set's default, the shipped set
    cases = _cases(r, doc.get("cases"), resources, old, operation)
    return PolicyTestFile(
        path=path,
        name=name,
        policies=policies,
        config=_config(r, doc.get("config")),
        operation=operation,
        namespace=namespace,
        user_info=dict(user_info),
        exceptions=_exceptions(r, doc.get("exceptions")),
        resources=resources,
        cases=cases,
        now=_now(r, doc.get("now")),
    )


def _config(r: _Reader, value: Any) -> PlatformConfig:
    if value is None:
        return load_config(None)
    try:
        if isinstance(value, str):
            return load_config(r.file(value, "config"))
        if isinstance(value, dict):
            return config_from_mapping(value, f"{r.path} (config)")
    except ConfigError as exc:
        raise r.fail(str(exc), "config") from None
    raise r.fail("must be a file path or an inline PlatformConfig mapping", "config")


def _exceptions(r: _Reader, value: Any) -> tuple[PolicyException, ...]:
    out: list[PolicyException] = []
    for i, item in enumerate(r.items(value, "exceptions")):
        where = f"exceptions[{i}]"
        try:
            if isinstance(item, str):
                out.extend(load_exceptions([r.file(item, where)]))
            elif isinstance(item, dict):
                out.append(parse_exception(item, f"{r.path} ({where})"))
            else:
                raise r.fail("must be a file path or an inline PolicyException", where)
        except PolicyError as exc:
            raise r.fail(str(exc), where) from None
    return tuple(out)


def _resources(r: _Reader, value: Any, where: str, namespace: str, *, required: bool) -> tuple[Resource, ...]:
    out: list[Resource] = []
    for i, item in enumerate(r.items(value, where, required=required)):
        field = f"{where}[{i}]"
        if isinstance(item, str):
            for doc in read_manifests([str(r.file(item, field))]):
                out.append(_resource(r, doc.data, f"{item}#{doc.index}", namespace, field))
        elif isinstance(item, dict):
            out.append(_resource(r, item, field, namespace, field))
        else:
            raise r.fail("must be a file path or an inline object", field)
    return tuple(out)


def _resource(r: _Reader, obj: Any, origin: str, namespace: str, field: str) -> Resource:
    if not isinstance(obj, dict):
        raise r.fail("must be a Kubernetes object (a mapping)", field)
    for key in ("apiVersion", "kind"):
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise r.fail(f"{origin}: missing or empty {key}", field)
    meta = obj.get("metadata")
    ns = meta.get("namespace") if isinstance(meta, dict) else None
    return Resource(obj, origin, ns if isinstance(ns, str) and ns else namespace)


def _cases(
    r: _Reader, value: Any, resources: tuple[Resource, ...], old: tuple[Resource, ...], operation: str
) -> tuple[PolicyTestCase, ...]:
    out: list[PolicyTestCase] = []
    seen: set[str] = set()
    for i, item in enumerate(r.items(value, "cases", required=True)):
        where = f"cases[{i}]"
        c = r.mapping(item, where, _CASE_FIELDS)
        name = r.string(c.get("name"), f"{where}.name", required=True) or ""
        if name in seen:
            raise r.fail(f"duplicate case name {name!r}", f"{where}.name")
        seen.add(name)
        selector = r.string(c.get("resource"), f"{where}.resource", required=True) or ""
        target = _select(r, resources, selector, f"{where}.resource")
        previous = _old_for(target, old)
        if operation == "UPDATE" and previous is None:
            raise r.fail(
                f"request.operation is UPDATE but oldResources has no {target.ident}", f"{where}.resource"
            )
        result = c.get("result")
        if result not in OUTCOMES:
            raise r.fail(f"must be one of {', '.join(OUTCOMES)}, got {result!r}", f"{where}.result")
        out.append(
            PolicyTestCase(
                name=name,
                resource=target,
                old=previous,
                policy=r.string(c.get("policy"), f"{where}.policy", required=True) or "",
                result=result,
                message=_regex(r, c.get("message"), f"{where}.message"),
                patched_resource=_patched(r, c.get("patchedResource"), f"{where}.patchedResource"),
                skip=r.string(c.get("skip"), f"{where}.skip"),
                index=i,
            )
        )
    return tuple(out)


def _select(r: _Reader, resources: tuple[Resource, ...], selector: str, field: str) -> Resource:
    parts = selector.split("/")
    if len(parts) == 1:
        hits = [x for x in resources if x.name == parts[0]]
    elif len(parts) == 2:
        a, b = parts
        hits = [x for x in resources if x.name == b and (x.kind == a or x.namespace == a)]
    elif len(parts) == 3:
        hits = [x for x in resources if (x.kind, x.namespace, x.name) == tuple(parts)]
    else:
        raise r.fail(f"{selector!r} is not name, Kind/name, namespace/name or Kind/namespace/name", field)
    if not hits:
        have = ", ".join(x.ident for x in resources)
        raise r.fail(f"{selector!r} matches no resource (resources: {have})", field)
    if len(hits) > 1:
        which = ", ".join(x.ident for x in hits)
        raise r.fail(
            f"{selector!r} matches {len(hits)} resources ({which}): write Kind/namespace/name", field
        )
    return hits[0]


def _old_for(target: Resource, old: tuple[Resource, ...]) -> Resource | None:
    key = (target.obj.get("apiVersion"), target.kind, target.namespace, target.name)
    return next((o for o in old if (o.obj.get("apiVersion"), o.kind, o.namespace, o.name) == key), None)


def _regex(r: _Reader, value: Any, field: str) -> re.Pattern[str] | None:
    text = r.string(value, field)
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as exc:
        raise r.fail(f"not a valid regular expression: {exc}", field) from None


def _patched(r: _Reader, value: Any, field: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if isinstance(value, str):
        docs = read_manifests([str(r.file(value, field))])
        if len(docs) != 1:
            raise r.fail(f"{value!r} must hold exactly one object, found {len(docs)}", field)
        value = docs[0].data
    if not isinstance(value, dict):
        raise r.fail("must be an object (a mapping) or a file path", field)
    return value


def _now(r: _Reader, value: Any) -> datetime | None:
    if value is None:
        return None
    parsed = rfc3339(value)
    if parsed is not None:
        return parsed
    shown = value.isoformat() if isinstance(value, date) else repr(value)
    raise r.fail(
        f'must be an RFC 3339 timestamp with a time zone, e.g. "2026-01-01T00:00:00Z", got {shown}', "now"
    )

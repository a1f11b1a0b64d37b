"""Declarative policy tests: `PolicyTest` files, run on the webhook's engine (Kyverno-test style).

    apiVersion: trainguard.dev/v1alpha1
    kind: PolicyTest
    metadata: {name: gang-required}
    policies: [../../policies/gang-required.yaml]   # relative to this file; omitted: the shipped set
    config: platform.yaml                            # or an inline PlatformConfig mapping; optional
    request: {operation: CREATE, namespace: team-a}   # defaults: CREATE, default
    exceptions: [exceptions.yaml]                    # files and/or inline PolicyExceptions; optional
    now: "2026-06-01T00:00:00Z"                       # the clock exceptions expire by; optional
    resources: [resources/job.yaml, {apiVersion: v1, kind: Pod, ...}]
    oldResources: [...]                              # UPDATE: matched by apiVersion/kind/namespace/name
    cases:
      - name: multi-node-without-gang-is-denied
        resource: no-gang             # name, Kind/name, namespace/name or Kind/namespace/name
        policy: gang-required
        result: fail                  # pass | fail | warn | audit | skip | error | exempt
        message: "no gang mechanism"  # optional regex, searched in the joined messages
        patchedResource: {...}        # optional: the whole object after the whole set's patch
        skip: "reason"                # optional: report the case as skipped

`result` is the policy's PolicyResult outcome as the engine reports it: a mutation policy that
matched is `pass` whether or not it changed anything (idempotent mutations change nothing the
second time), so what a mutation did is asserted with `patchedResource`. A case whose object the
engine does not decide at all (not a workload, excluded namespace) is `skip`. A malformed file
raises InputError naming file and field (the CLI exits 2).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import Any, Literal

from webhook.config import PlatformConfig, config_from_mapping, load_config
from webhook.context import context_objects, evictions
from webhook.documents import load_yaml_documents, read_manifests
from webhook.engine import (
    AdmissionInput,
    Engine,
    Outcome,
    PolicyException,
    PolicySet,
    default_policies_dir,
    load_exceptions,
    load_policy_set,
    parse_exception,
)
from webhook.errors import ConfigError, InputError, PolicyError
from webhook.fieldreader import FieldReader

API_VERSION = "trainguard.dev/v1alpha1"
KIND = "PolicyTest"
SUFFIXES = (".yaml", ".yml")
OUTCOMES: tuple[Outcome, ...] = ("pass", "fail", "warn", "audit", "skip", "error", "exempt")
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


_TOP_FIELDS = {
    "apiVersion", "kind", "metadata", "policies", "config", "request", "exceptions", "now",
    "resources", "oldResources", "cases",
}  # fmt: skip
_CASE_FIELDS = {"name", "resource", "policy", "result", "message", "patchedResource", "skip"}
_REQUEST_FIELDS = {"operation", "namespace", "userInfo"}
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})$")

Status = Literal["passed", "failed", "skipped"]


@dataclass(frozen=True, slots=True)
class Resource:
    obj: dict[str, Any]
    origin: str  # "resources/job.yaml#1" or "resources[2]"
    namespace: str  # metadata.namespace, else the request's namespace

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind"))

    @property
    def name(self) -> str:
        meta = self.obj.get("metadata")
        return str((meta.get("name") or meta.get("generateName") or "") if isinstance(meta, dict) else "")

    @property
    def ident(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PolicyTestCase:
    name: str
    resource: Resource
    old: Resource | None
    policy: str
    result: Outcome
    message: re.Pattern[str] | None = None
    patched_resource: dict[str, Any] | None = None
    skip: str | None = None
    index: int = 0


@dataclass(frozen=True, slots=True)
class PolicyTestFile:
    path: Path
    name: str
    policies: tuple[Path, ...]  # files or directories; the shipped directory when the file names none
    config: PlatformConfig
    operation: str
    namespace: str
    user_info: dict[str, Any]
    exceptions: tuple[PolicyException, ...]
    resources: tuple[Resource, ...]
    old_resources: tuple[Resource, ...]
    cases: tuple[PolicyTestCase, ...]
    now: datetime | None = None

    @property
    def display(self) -> str:
        return display_path(self.path)

    def case_id(self, case: PolicyTestCase) -> str:
        return f"{self.display}::{case.name}"


@dataclass(frozen=True, slots=True)
class CaseResult:
    test: PolicyTestFile
    case: PolicyTestCase
    status: Status
    reason: str | None = None
    outcome: str | None = None  # what the engine concluded

    @property
    def id(self) -> str:
        return self.test.case_id(self.case)


def display_path(path: Path) -> str:
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()


# --------------------------------------------------------------------------------------------
# Discovery and loading


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
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise r.fail(
            f"expected apiVersion {API_VERSION} and kind {KIND}, "
            f"got {doc.get('apiVersion')!r} / {doc.get('kind')!r}",
            "kind",
        )
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
    ) or (default_policies_dir(),)
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
        old_resources=old,
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
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value
    if isinstance(value, str) and _RFC3339.match(value):
        return datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    shown = value.isoformat() if isinstance(value, date) else repr(value)
    raise r.fail(
        f'must be an RFC 3339 timestamp with a time zone, e.g. "2026-01-01T00:00:00Z", got {shown}', "now"
    )


# --------------------------------------------------------------------------------------------
# Running


@dataclass
class Runner:
    """Runs cases, compiling each policy set once per backend and building each file's engine once."""

    backend: str | None = None
    _sets: dict[tuple[str, ...], PolicySet] = field(default_factory=dict)
    _engines: dict[Path, Engine] = field(default_factory=dict)

    def policy_set(self, test: PolicyTestFile) -> PolicySet:
        key = tuple(str(p) for p in test.policies)
        if key not in self._sets:
            self._sets[key] = load_policy_set(list(test.policies), self.backend)
        return self._sets[key]

    def engine(self, test: PolicyTestFile) -> Engine:
        if test.path not in self._engines:
            policies = self.policy_set(test)
            check_policy_names(test, policies)
            runtimes, priority_classes = context_objects(r.obj for r in test.resources)
            self._engines[test.path] = Engine(
                policies,
                test.config,
                runtimes=runtimes,
                priority_classes=priority_classes,
                exceptions=test.exceptions,
                cluster={"evictions": evictions(r.obj for r in test.resources)},
            )
        return self._engines[test.path]

    def run(self, test: PolicyTestFile, case: PolicyTestCase) -> CaseResult:
        if case.skip is not None:
            return CaseResult(test, case, "skipped", case.skip)
        engine = self.engine(test)
        decision = engine.review(
            AdmissionInput(
                object=copy.deepcopy(case.resource.obj),
                operation=test.operation,
                old_object=copy.deepcopy(case.old.obj) if case.old else None,
                namespace=test.namespace,
                user_info=test.user_info,
            ),
            now=test.now,
        )
        result = next((x for x in decision.results if x.policy == case.policy), None)
        messages: tuple[str, ...]
        if result is None:
            outcome, messages = "skip", (decision.skipped_reason or "policy not evaluated",)
        else:
            outcome, messages = result.outcome, result.messages
        joined = "\n".join(messages)
        if outcome != case.result:
            detail = f": {'; '.join(messages)}" if messages else ""
            return CaseResult(test, case, "failed", f"expected {case.result}, got {outcome}{detail}", outcome)
        if case.message is not None and not case.message.search(joined):
            return CaseResult(
                test, case, "failed", f"message /{case.message.pattern}/ not found in {joined!r}", outcome
            )
        if case.patched_resource is not None:
            diffs = differences(case.patched_resource, decision.mutated)
            if diffs:
                return CaseResult(
                    test, case, "failed", f"patchedResource differs: {'; '.join(diffs)}", outcome
                )
        return CaseResult(test, case, "passed", None, outcome)


def run_case(
    test: PolicyTestFile, case: PolicyTestCase, *, backend: str | None = None, runner: Runner | None = None
) -> CaseResult:
    """Run one case (for pytest parametrization); pass a shared Runner to compile policies once."""
    return (runner or Runner(backend)).run(test, case)


def run_file(test: PolicyTestFile, runner: Runner) -> Iterator[CaseResult]:
    for case in test.cases:
        yield runner.run(test, case)


def check_policy_names(test: PolicyTestFile, policies: PolicySet) -> None:
    names = set(policies.names())
    for case in test.cases:
        if case.policy not in names:
            raise InputError(
                f"policy {case.policy!r} is not in the tested policy set ({', '.join(sorted(names))})",
                source=str(test.path),
                field=f"cases[{case.index}].policy",
            )


def untested_policies(tests: Iterable[PolicyTestFile], runner: Runner) -> list[tuple[str, str]]:
    """(policy, file) for every policy of the tested sets that no case names."""
    named: set[str] = set()
    available: dict[str, str] = {}
    for test in tests:
        named.update(c.policy for c in test.cases)
        for cp in runner.policy_set(test).policies:
            available.setdefault(cp.name, display_path(Path(cp.policy.path)))
    return sorted((name, path) for name, path in available.items() if name not in named)


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
            child = f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}"
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

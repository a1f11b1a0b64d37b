"""PolicyExceptions: a named, owned, expiring waiver of some policies for some workloads.

    apiVersion: trainguard.dev/v1alpha1
    kind: PolicyException
    metadata: {name: legacy-no-gang, namespace: team-a}
    spec:
      policies: [gang-required]
      match: {workloads: [...], selector: {...}, namespaces: [...]}
      justification: "..."
      owner: team-a@example.com
      expiresAt: "2026-12-31T00:00:00Z"

The same document is a file for `check`/`review`/`test` and a cluster resource for the webhook
(deploy/crds/trainguard.dev_policyexceptions.yaml). `load_exceptions()` checks every field and
names file and field on error; `PolicyException.exempts()` is the engine's Exemption protocol.

Matching: the exception names policies and selects workloads by name (`match.workloads`, which
also covers the pods a named workload's controller creates) or by label (`match.selector`); the
two are ORed. `match.namespaces`, and the exception's own `metadata.namespace`, narrow what they
select; `namespaces` alone selects every workload in them. An exception exempts nothing from
`expiresAt` on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from webhook.documents import load_yaml_documents
from webhook.errors import InputError, PolicyError
from webhook.fieldreader import FieldReader, rfc3339, type_name
from webhook.workloads import Workload

API_VERSION = "trainguard.dev/v1alpha1"
KIND = "PolicyException"
SUFFIXES = (".yaml", ".yml")

_TOP_FIELDS = {"apiVersion", "kind", "metadata", "spec"}
_META_FIELDS = {"name", "namespace", "labels", "annotations"}
_SPEC_FIELDS = {"policies", "match", "justification", "owner", "expiresAt"}
_MATCH_FIELDS = {"workloads", "selector", "namespaces"}
_REF_FIELDS = {"namespace", "name", "kind"}
_SELECTOR_FIELDS = {"matchLabels", "matchExpressions"}
_EXPRESSION_FIELDS = {"key", "operator", "values"}
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# RFC 3339 date-time: a full date, a time and an offset (Z or ±hh:mm); fractions allowed.


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    namespace: str
    name: str
    kind: str | None = None  # "PyTorchJob" or "kubeflow.org/PyTorchJob"; None: any kind

    def matches(self, workload: Workload, namespace: str | None) -> bool:
        if (workload.namespace or namespace) != self.namespace:
            return False
        if workload.name == self.name and self._kind_matches(workload.kind, workload.api_version):
            return True
        # The pods a named workload's controller creates are that workload too.
        owner = workload.owner
        return owner is not None and owner.name == self.name and self._kind_matches(owner.kind, None)

    def _kind_matches(self, kind: str, api_version: str | None) -> bool:
        if self.kind is None:
            return True
        group, _, name = self.kind.rpartition("/")
        if name != kind:
            return False
        return not group or api_version is None or api_version.rpartition("/")[0] == group


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        if self.operator == "In":
            return self.key in labels and labels[self.key] in self.values
        return self.key not in labels or labels[self.key] not in self.values  # NotIn


@dataclass(frozen=True, slots=True)
class LabelSelector:
    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match_labels) and all(
            r.matches(labels) for r in self.match_expressions
        )


@dataclass(frozen=True, slots=True)
class PolicyException:
    name: str
    namespace: str | None  # metadata.namespace: when set, only workloads in it are exempted
    policies: tuple[str, ...]
    workloads: tuple[WorkloadRef, ...]
    selector: LabelSelector | None
    namespaces: tuple[str, ...]
    justification: str
    owner: str
    expires_at: datetime
    path: str = ""  # the file it came from ("" for a cluster object)

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def expired(self, now: datetime) -> bool:
        return now >= self.expires_at

    def selects(self, workload: Workload, namespace: str | None) -> bool:
        """Whether the match selects `workload` (ignoring policies and expiry)."""
        ns = workload.namespace or namespace
        if self.namespace is not None and ns != self.namespace:
            return False
        if self.namespaces and ns not in self.namespaces:
            return False
        if not self.workloads and self.selector is None:
            return True  # namespaces alone
        if any(ref.matches(workload, namespace) for ref in self.workloads):
            return True
        return self.selector is not None and self.selector.matches(workload.labels)

    def exempts(self, policy: str, workload: Workload, namespace: str | None, now: datetime) -> str | None:
        """The justification when this exception exempts `workload` from `policy` at `now`."""
        if policy not in self.policies or self.expired(now):
            return None
        return self.justification if self.selects(workload, namespace) else None


def exemption_for(
    exceptions: Iterable[PolicyException],
    policy: str,
    workload: Workload,
    namespace: str | None,
    now: datetime,
) -> PolicyException | None:
    """The first exception that exempts `workload` from `policy` at `now` (the one the engine used)."""
    for exc in exceptions:
        if exc.exempts(policy, workload, namespace, now) is not None:
            return exc
    return None


# --------------------------------------------------------------------------------------------
# Loading


class _Reader(FieldReader):
    """Typed access to one PolicyException document, with errors that name file and field."""

    def __init__(self, path: str, where: str) -> None:
        self.path = path
        self.where = where  # "PolicyException team-a/legacy" or "document 2"

    def fail(self, message: str, field: str) -> PolicyError:
        return PolicyError(message, path=self.path, position=f"{self.where}, field {field}")


def parse_exception(doc: Any, path: str, index: int = 1) -> PolicyException:
    """One PolicyException document -> PolicyException; PolicyError names file and field."""
    if not isinstance(doc, dict):
        raise PolicyError(f"document {index} is not a mapping", path=path)
    meta_raw = doc.get("metadata")
    name = meta_raw.get("name") if isinstance(meta_raw, dict) else None
    r = _Reader(path, f"PolicyException {name}" if isinstance(name, str) else f"document {index}")
    r.mapping(doc, "(document)", _TOP_FIELDS)
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise r.fail(
            f"expected apiVersion {API_VERSION} and kind {KIND}, got "
            f"{doc.get('apiVersion')!r} / {doc.get('kind')!r}",
            "apiVersion",
        )
    meta = r.mapping(meta_raw, "metadata", _META_FIELDS, required=True)
    exc_name = r.string(meta.get("name"), "metadata.name", required=True) or ""
    namespace = r.string(meta.get("namespace"), "metadata.namespace")
    spec = r.mapping(doc.get("spec"), "spec", _SPEC_FIELDS, required=True)
    policies = r.strings(spec.get("policies"), "spec.policies", required=True)
    workloads, selector, namespaces = _match(r, spec.get("match"), namespace)
    return PolicyException(
        name=exc_name,
        namespace=namespace,
        policies=policies,
        workloads=workloads,
        selector=selector,
        namespaces=namespaces,
        justification=(
            r.string(spec.get("justification"), "spec.justification", required=True) or ""
        ).strip(),
        owner=(r.string(spec.get("owner"), "spec.owner", required=True) or "").strip(),
        expires_at=_timestamp(r, spec.get("expiresAt"), "spec.expiresAt"),
        path=path,
    )


def _match(
    r: _Reader, raw: Any, namespace: str | None
) -> tuple[tuple[WorkloadRef, ...], LabelSelector | None, tuple[str, ...]]:
    m = r.mapping(raw, "spec.match", _MATCH_FIELDS, required=True)
    if not any(m.get(k) is not None for k in _MATCH_FIELDS):
        raise r.fail("needs at least one of workloads, selector, namespaces", "spec.match")
    namespaces = r.strings(m.get("namespaces"), "spec.match.namespaces")
    if m.get("namespaces") is not None and not namespaces:
        raise r.fail("must not be empty", "spec.match.namespaces")
    for i, ns in enumerate(namespaces):
        if namespace is not None and ns != namespace:
            raise r.fail(
                f"{ns!r} is outside the exception's own namespace {namespace!r}",
                f"spec.match.namespaces[{i}]",
            )
    workloads = _workload_refs(r, m.get("workloads"), namespace)
    selector = _selector(r, m.get("selector")) if m.get("selector") is not None else None
    return workloads, selector, namespaces


def _workload_refs(r: _Reader, raw: Any, namespace: str | None) -> tuple[WorkloadRef, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        raise r.fail("must be a non-empty list", "spec.match.workloads")
    refs = []
    for i, item in enumerate(raw):
        field = f"spec.match.workloads[{i}]"
        ref = r.mapping(item, field, _REF_FIELDS)
        name = r.string(ref.get("name"), f"{field}.name", required=True) or ""
        ns = r.string(ref.get("namespace"), f"{field}.namespace") or namespace
        if ns is None:
            raise r.fail("is required (or set metadata.namespace)", f"{field}.namespace")
        if namespace is not None and ns != namespace:
            raise r.fail(
                f"{ns!r} is outside the exception's own namespace {namespace!r}", f"{field}.namespace"
            )
        refs.append(WorkloadRef(ns, name, r.string(ref.get("kind"), f"{field}.kind")))
    return tuple(refs)


def _selector(r: _Reader, raw: Any) -> LabelSelector:
    field = "spec.match.selector"
    sel = r.mapping(raw, field, _SELECTOR_FIELDS)
    labels = sel.get("matchLabels") or {}
    if not isinstance(labels, dict):
        raise r.fail(f"must be a mapping, got {type_name(labels)}", f"{field}.matchLabels")
    for key, value in labels.items():
        if not isinstance(value, str):
            raise r.fail(
                f"label {key!r} must map to a string, got {type_name(value)}", f"{field}.matchLabels"
            )
    expressions = []
    raw_exprs = sel.get("matchExpressions")
    if raw_exprs is not None and not isinstance(raw_exprs, list):
        raise r.fail("must be a list", f"{field}.matchExpressions")
    for i, item in enumerate(raw_exprs or ()):
        where = f"{field}.matchExpressions[{i}]"
        e = r.mapping(item, where, _EXPRESSION_FIELDS)
        key = r.string(e.get("key"), f"{where}.key", required=True) or ""
        op = e.get("operator")
        if op not in _OPERATORS:
            raise r.fail(f"must be one of {', '.join(_OPERATORS)}, got {op!r}", f"{where}.operator")
        values = r.strings(e.get("values"), f"{where}.values")
        if op in ("In", "NotIn") and not values:
            raise r.fail(f"must be a non-empty list for operator {op}", f"{where}.values")
        if op in ("Exists", "DoesNotExist") and values:
            raise r.fail(f"must be empty for operator {op}", f"{where}.values")
        expressions.append(Requirement(key, str(op), values))
    if not labels and not expressions:
        # An empty selector selects everything: say so with `namespaces`, not by accident.
        raise r.fail(
            "needs matchLabels or matchExpressions (an empty selector would select everything)", field
        )
    return LabelSelector(tuple((str(k), str(v)) for k, v in labels.items()), tuple(expressions))


def _timestamp(r: _Reader, value: Any, field: str) -> datetime:
    hint = 'an RFC 3339 timestamp with a time zone, e.g. "2026-12-31T00:00:00Z"'
    if value is None:
        raise r.fail(f"is required ({hint})", field)
    if isinstance(value, datetime) and value.tzinfo is None:  # no offset written: whose midnight?
        raise r.fail(f"must be {hint}, got {value.isoformat(sep=' ')!r} (no time zone)", field)
    parsed = rfc3339(value)
    if parsed is None:
        raise r.fail(f"must be {hint}, got {value!r}", field)
    return parsed


def exception_files(paths: Iterable[str | Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            files.extend(sorted(c for c in path.rglob("*") if c.is_file() and c.suffix in SUFFIXES))
        elif path.is_file():
            files.append(path)
        else:
            raise PolicyError("no such file or directory", path=str(path))
    return files


def load_exceptions(paths: Iterable[str | Path]) -> list[PolicyException]:
    """Every PolicyException in the given files and directories; PolicyError on the first problem."""
    out: list[PolicyException] = []
    seen: dict[str, str] = {}
    for path in exception_files(paths):
        try:
            text = path.read_text("utf-8")
            docs = load_yaml_documents(text, str(path))
        except (OSError, UnicodeDecodeError) as exc:
            raise PolicyError(f"cannot read: {exc}", path=str(path)) from None
        except InputError as exc:
            raise PolicyError(exc.message, path=str(path), position=_where(exc)) from None
        for doc in docs:
            exc_ = parse_exception(doc.data, str(path), doc.index)
            if exc_.id in seen:
                raise PolicyError(
                    f"duplicate PolicyException {exc_.id} (also defined in {seen[exc_.id]})",
                    path=str(path),
                    position="metadata.name",
                )
            seen[exc_.id] = str(path)
            out.append(exc_)
    return out


def _where(exc: InputError) -> str | None:
    parts = [f"document {exc.document}" if exc.document else None, f"line {exc.line}" if exc.line else None]
    return ", ".join(p for p in parts if p) or None


def unknown_policies(exceptions: Iterable[PolicyException], known: Iterable[str]) -> list[str]:
    """'file: exception names policy X, which is not loaded' for every dangling policy name."""
    names = set(known)
    return [
        f"{e.path or 'cluster'}: PolicyException {e.id} names policy {p!r}, which is not in the policy set"
        for e in exceptions
        for p in e.policies
        if p not in names
    ]

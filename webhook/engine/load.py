"""Policy files -> Policy records: the first step of the engine.

A policy file holds one or more TrainingPolicy documents. Every field is checked here, so that
a typo (`validation:` for `validations:`) is an error naming file, policy and field, never a
policy that silently checks nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from webhook.documents import load_yaml_documents
from webhook.engine.model import (
    FAILURE_POLICIES,
    MODES,
    REVIEW_QUESTION_ANNOTATION,
    REVIEW_QUESTIONS,
    Expression,
    Match,
    Mutation,
    NamedExpression,
    Policy,
    Validation,
)
from webhook.errors import InputError, PolicyError
from webhook.fieldreader import FieldReader

API_VERSION = "trainguard.dev/v1alpha1"
KIND = "TrainingPolicy"
POLICY_SUFFIXES = (".yaml", ".yml")

_SPEC_FIELDS = {"mode", "failurePolicy", "match", "matchConditions", "variables", "validations", "mutations"}
_MATCH_FIELDS = {
    "kinds",
    "roles",
    "classes",
    "tiers",
    "namespaces",
    "excludeNamespaces",
    "operations",
    "memberPods",
    "kueueManagedPods",
}
_VALIDATION_FIELDS = {"expression", "message", "messageExpression", "reason", "field", "fieldExpression"}
_ROLES = {"training", "inference"}
_CLASSES = {"A", "B", "C"}
_TIERS = {"guaranteed", "preemptible"}
_OPERATIONS = {"CREATE", "UPDATE"}
_MEMBER_PODS = {"Exclude", "Include", "Only"}
_KUEUE_MANAGED_PODS = {"Exclude", "Include"}


def default_policies_dir() -> Path:
    """The shipped policies: packaged in the wheel, or the repository's policies/ in a checkout."""
    packaged = resources.files("webhook") / "_data" / "policies"
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "policies"


def policy_files(paths: Iterable[str | Path]) -> list[Path]:
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_dir():
            # A ConfigMap volume holds each file twice: as a link at the top and inside the hidden
            # `..<timestamp>` directory that `..data` points at. Hidden entries are never policies.
            files.extend(
                sorted(
                    c
                    for c in path.rglob("*")
                    if c.is_file()
                    and c.suffix in POLICY_SUFFIXES
                    and not any(part.startswith(".") for part in c.relative_to(path).parts)
                )
            )
        elif path.is_file():
            files.append(path)
        else:
            raise PolicyError("no such file or directory", path=str(path))
    return files


class _Reader(FieldReader):
    """Typed access to one policy document's fields, with errors that say where."""

    def __init__(self, path: str, policy: str) -> None:
        self.path = path
        self.policy = policy

    def fail(self, message: str, field: str) -> PolicyError:
        return PolicyError(message, path=self.path, policy=self.policy, position=field)

    def expression(self, value: Any, where: str) -> Expression:
        return Expression(self.string(value, where, required=True) or "", where)

    def entries(self, value: Any, where: str, fields: set[str]) -> list[tuple[str, dict[str, Any]]]:
        """A list field's entries, each a mapping of `fields` with the field path it stands at;
        none where the list is absent."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.fail("must be a list", where)
        return [
            (f"{where}[{i}]", self.mapping(item, f"{where}[{i}]", fields)) for i, item in enumerate(value)
        ]

    def named_list(self, value: Any, where: str) -> tuple[NamedExpression, ...]:
        out = []
        seen: set[str] = set()
        for at, item in self.entries(value, where, {"name", "expression"}):
            name = self.string(item.get("name"), f"{at}.name", required=True) or ""
            if name in seen:
                raise self.fail(f"duplicate name {name!r}", f"{at}.name")
            seen.add(name)
            out.append(NamedExpression(name, self.expression(item.get("expression"), f"{at}.expression")))
        return tuple(out)


def _match(r: _Reader, raw: Any) -> Match:
    m = r.mapping(raw, "spec.match", _MATCH_FIELDS)
    member_pods = m.get("memberPods", "Exclude")
    if member_pods not in _MEMBER_PODS:
        raise r.fail(f"must be one of {', '.join(sorted(_MEMBER_PODS))}", "spec.match.memberPods")
    kueue_managed = m.get("kueueManagedPods", "Exclude")
    if kueue_managed not in _KUEUE_MANAGED_PODS:
        raise r.fail(
            f"must be one of {', '.join(sorted(_KUEUE_MANAGED_PODS))}", "spec.match.kueueManagedPods"
        )
    return Match(
        kinds=r.strings(m.get("kinds"), "spec.match.kinds"),
        roles=r.strings(m.get("roles"), "spec.match.roles", _ROLES),
        classes=r.strings(m.get("classes"), "spec.match.classes", _CLASSES),
        tiers=r.strings(m.get("tiers"), "spec.match.tiers", _TIERS),
        namespaces=r.strings(m.get("namespaces"), "spec.match.namespaces"),
        exclude_namespaces=r.strings(m.get("excludeNamespaces"), "spec.match.excludeNamespaces"),
        operations=r.strings(m.get("operations"), "spec.match.operations", _OPERATIONS)
        or ("CREATE", "UPDATE"),
        member_pods=member_pods,
        kueue_managed_pods=kueue_managed,
    )


def _validations(r: _Reader, raw: Any) -> tuple[Validation, ...]:
    out = []
    for where, v in r.entries(raw, "spec.validations", _VALIDATION_FIELDS):
        message_expr = v.get("messageExpression")
        field_expr = v.get("fieldExpression")
        out.append(
            Validation(
                expression=r.expression(v.get("expression"), f"{where}.expression"),
                message=r.string(v.get("message"), f"{where}.message"),
                message_expression=r.expression(message_expr, f"{where}.messageExpression")
                if message_expr is not None
                else None,
                reason=r.string(v.get("reason"), f"{where}.reason") or "Forbidden",
                field=r.string(v.get("field"), f"{where}.field"),
                field_expression=r.expression(field_expr, f"{where}.fieldExpression")
                if field_expr is not None
                else None,
            )
        )
    return tuple(out)


def _mutations(r: _Reader, raw: Any) -> tuple[Mutation, ...]:
    out = []
    for where, m in r.entries(raw, "spec.mutations", {"name", "patchExpression"}):
        out.append(
            Mutation(
                name=r.string(m.get("name"), f"{where}.name", required=True) or "",
                patch_expression=r.expression(m.get("patchExpression"), f"{where}.patchExpression"),
            )
        )
    return tuple(out)


def parse_policy(doc: Any, path: str, index: int) -> Policy:
    """One TrainingPolicy document -> Policy; PolicyError names the field that is wrong."""
    if not isinstance(doc, dict):
        raise PolicyError(f"document {index} is not a mapping", path=path)
    name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
    r = _Reader(path, name if isinstance(name, str) else f"<document {index}>")
    r.mapping(doc, "", {"apiVersion", "kind", "metadata", "spec"})
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise r.fail(
            f"expected apiVersion {API_VERSION} and kind {KIND}, got "
            f"{doc.get('apiVersion')!r} / {doc.get('kind')!r}",
            "apiVersion",
        )
    meta = r.mapping(doc.get("metadata"), "metadata", {"name", "annotations", "labels"})
    policy_name = r.string(meta.get("name"), "metadata.name", required=True) or ""
    annotations = meta.get("annotations") or {}
    spec = r.mapping(doc.get("spec"), "spec", _SPEC_FIELDS)
    mode = spec.get("mode", "Enforce")
    if mode not in MODES:
        raise r.fail(f"must be one of {', '.join(MODES)}, got {mode!r}", "spec.mode")
    failure_policy = spec.get("failurePolicy", "Fail")
    if failure_policy not in FAILURE_POLICIES:
        raise r.fail(f"must be Fail or Ignore, got {failure_policy!r}", "spec.failurePolicy")
    validations = _validations(r, spec.get("validations"))
    mutations = _mutations(r, spec.get("mutations"))
    if not validations and not mutations:
        raise r.fail("a policy needs validations or mutations", "spec")
    if validations and mutations:
        raise r.fail("a policy either validates or mutates; split it in two", "spec")
    for i, v in enumerate(validations):
        if v.message is None and v.message_expression is None:
            raise r.fail("message or messageExpression is required", f"spec.validations[{i}]")
    question = annotations.get(REVIEW_QUESTION_ANNOTATION)
    if question is not None and question not in REVIEW_QUESTIONS:
        raise r.fail(
            f"must be one of {', '.join(REVIEW_QUESTIONS)}, got {question!r}",
            f"metadata.annotations[{REVIEW_QUESTION_ANNOTATION}]",
        )
    return Policy(
        name=policy_name,
        path=path,
        title=str(annotations.get("trainguard.dev/title") or policy_name),
        description=str(annotations.get("trainguard.dev/description") or "").strip(),
        mode=mode,
        failure_policy=failure_policy,
        match=_match(r, spec.get("match")),
        match_conditions=r.named_list(spec.get("matchConditions"), "spec.matchConditions"),
        variables=r.named_list(spec.get("variables"), "spec.variables"),
        validations=validations,
        mutations=mutations,
        review_question=question,
    )


def load_policy_file(path: Path) -> list[Policy]:
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyError(f"cannot read: {exc}", path=str(path)) from None
    try:
        docs = load_yaml_documents(text, str(path))
    except InputError as exc:
        raise PolicyError(exc.message, path=str(path), position=_where(exc)) from None
    return [parse_policy(d.data, str(path), d.index) for d in docs]


def _where(exc: InputError) -> str | None:
    parts = [f"document {exc.document}" if exc.document else None, f"line {exc.line}" if exc.line else None]
    return ", ".join(p for p in parts if p) or None


def load_policies(paths: Iterable[str | Path]) -> tuple[list[Policy], str]:
    """Every policy under the given files/directories, sorted by name, and a content hash."""
    digest = hashlib.sha256()
    policies: list[Policy] = []
    seen: dict[str, str] = {}
    paths = list(paths)
    files = policy_files(paths)
    for path in files:
        # The digest is of names and contents, not absolute paths: the same set mounted
        # elsewhere (or re-linked by a ConfigMap update) is the same set.
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
        for policy in load_policy_file(path):
            if policy.name in seen:
                raise PolicyError(
                    f"duplicate policy name (also defined in {seen[policy.name]})",
                    path=str(path),
                    policy=policy.name,
                )
            seen[policy.name] = str(path)
            policies.append(policy)
    if not policies:
        # An emptied ConfigMap or a wrong path must never mean "allow everything": every front
        # door (serve, its reload, check, review) refuses an empty set.
        where = ", ".join(str(p) for p in paths) or "(no path given)"
        found = "policy files hold no TrainingPolicy" if files else "no policy files (*.yaml, *.yml)"
        raise PolicyError(f"{found}: an empty policy set would allow everything", path=where)
    policies.sort(key=lambda p: p.name)
    return policies, digest.hexdigest()

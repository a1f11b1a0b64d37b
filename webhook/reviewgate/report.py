"""Manifest documents -> a Report: per workload its decision, the five answers, findings and patch.

The renderers (markdown, sarif, junit, and record's JSON) all read one Report, so the
formats cannot disagree. Every finding carries the line of the field it names, found in the
document as written (a field that only the mutation adds points at its nearest existing parent).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from webhook import fields
from webhook.documents import Document
from webhook.engine import (
    AdmissionInput,
    Decision,
    Engine,
    Finding,
    PolicyException,
    PolicyResult,
    PolicySet,
    exemption_for,
)
from webhook.errors import InputError
from webhook.reviewgate.questions import Answer, Facts, answer_all
from webhook.workloads import Workload

Level = Literal["deny", "warn", "audit", "exempt"]


@dataclass(frozen=True, slots=True)
class Location:
    path: str  # the file, as given on the command line
    line: int


@dataclass(frozen=True, slots=True)
class FindingRecord:
    level: Level
    policy: str
    message: str  # "" for an exemption of a policy that had nothing to report
    field: str | None  # rendered dotted path
    location: Location
    reason: str = "Forbidden"
    justification: str | None = None
    exception: PolicyException | None = None


@dataclass(frozen=True, slots=True)
class MutationRecord:
    policy: str
    paths: tuple[str, ...]  # rendered dotted paths the patch writes, in order, once each
    operations: int


@dataclass(slots=True)
class WorkloadReview:
    doc: Document
    decision: Decision
    workload: Workload
    answers: tuple[Answer, ...]
    findings: tuple[FindingRecord, ...]
    mutations: tuple[MutationRecord, ...]

    @property
    def namespace(self) -> str:
        return self.workload.namespace or "default"

    @property
    def ident(self) -> str:
        """Kind/namespace/name."""
        return f"{self.workload.kind}/{self.namespace}/{self.workload.name}"

    @property
    def outcome(self) -> str:
        if not self.decision.allowed:
            return "denied"
        return "warnings" if self.decision.warnings else "admitted"

    def results(self, policies: PolicySet, *, validating: bool = True) -> list[PolicyResult]:
        names = {p.name for p in (policies.validating if validating else policies.mutating)}
        return [r for r in self.decision.results if r.policy in names]


@dataclass(slots=True)
class Report:
    reviews: list[WorkloadReview]
    not_reviewed: list[tuple[Document, str]]  # documents trainguard does not decide, and why
    policies: PolicySet
    exceptions: Sequence[PolicyException] = ()
    files: list[str] = field(default_factory=list)

    @property
    def denied(self) -> int:
        return sum(1 for r in self.reviews if not r.decision.allowed)

    @property
    def warned(self) -> int:
        return sum(1 for r in self.reviews if r.decision.allowed and r.decision.warnings)

    def findings(self, *levels: Level) -> list[FindingRecord]:
        return [f for r in self.reviews for f in r.findings if not levels or f.level in levels]


def build_report(
    engine: Engine,
    docs: list[Document],
    *,
    namespace: str = "default",
    exceptions: Sequence[PolicyException] = (),
    now: datetime | None = None,
) -> Report:
    """Decide every document on `engine` and answer the review questions for each workload."""
    now = now or datetime.now(UTC)
    report = Report([], [], engine.policies, exceptions, list(dict.fromkeys(d.path for d in docs)))
    for doc in docs:
        decision = _decide(engine, doc, namespace, now)
        if decision.workload is None:
            report.not_reviewed.append((doc, decision.skipped_reason or "not decided"))
            continue
        report.reviews.append(review_document(engine, doc, docs, decision, exceptions, namespace, now))
    return report


def _decide(engine: Engine, doc: Document, namespace: str, now: datetime) -> Decision:
    try:
        return engine.decide(AdmissionInput(object=doc.data, namespace=namespace), now=now)
    except InputError as exc:
        if exc.source is not None:
            raise
        line = doc.line_of(fields.pointer(fields.parse(exc.field), doc.data)) if exc.field else doc.line
        raise InputError(
            exc.message, source=doc.path, document=doc.index, line=line, field=exc.field
        ) from None


def review_document(
    engine: Engine,
    doc: Document,
    docs: list[Document],
    decision: Decision,
    exceptions: Sequence[PolicyException],
    namespace: str,
    now: datetime,
) -> WorkloadReview:
    workload = decision.workload
    assert workload is not None and decision.mutated is not None, "review_document takes decided workloads"
    mutating = {p.name for p in engine.policies.mutating}
    facts = Facts(
        workload=workload,
        obj=decision.mutated,
        original=doc.data,
        mutations=tuple(r for r in decision.results if r.policy in mutating and r.patch),
        results={r.policy: r for r in decision.results},
        config=engine.config,
        priority_values=engine.priority_values,
        questions={
            cp.name: cp.policy.review_question
            for cp in engine.policies.validating
            if cp.policy.review_question is not None
        },
    )
    locate = _Locator(doc, docs)
    findings: list[FindingRecord] = []
    for level, items in (
        ("deny", decision.violations),
        ("warn", decision.warnings),
        ("audit", decision.audits),
    ):
        findings.extend(_finding(level, f, locate) for f in items)
    for r in decision.results:
        if r.outcome == "exempt":
            exc = exemption_for(exceptions, r.policy, workload, workload.namespace or namespace, now)
            pairs = [(m, r.fields[i] if i < len(r.fields) else "") for i, m in enumerate(r.messages)] or [
                ("", "")
            ]
            for message, fld in pairs:
                findings.append(
                    FindingRecord(
                        "exempt",
                        r.policy,
                        message,
                        fields.normalise(fld) if fld else None,
                        locate(fld or None),
                        justification=r.exemption,
                        exception=exc,
                    )
                )
    return WorkloadReview(
        doc, decision, workload, answer_all(facts), tuple(findings), _mutations(facts.mutations)
    )


def _finding(level: Any, f: Finding, locate: _Locator) -> FindingRecord:
    return FindingRecord(
        level, f.policy, f.message, fields.normalise(f.field) if f.field else None, locate(f.field), f.reason
    )


def _mutations(results: tuple[PolicyResult, ...]) -> tuple[MutationRecord, ...]:
    out = []
    for r in results:
        paths = tuple(
            dict.fromkeys(fields.from_pointer(_list_parent(str(op.get("path", "")))) for op in r.patch)
        )
        out.append(MutationRecord(r.policy, paths, len(r.patch)))
    return tuple(out)


def _list_parent(ptr: str) -> str:
    return ptr[:-2] if ptr.endswith("/-") else ptr


class _Locator:
    """Dotted field -> (file, line) in the document as written, or in the other object it names."""

    def __init__(self, doc: Document, docs: list[Document]) -> None:
        self.doc = doc
        self.docs = docs

    def __call__(self, field: str | None) -> Location:
        doc = self.doc
        if not field:
            return Location(doc.path, doc.line)
        path = fields.parse(field)
        if path.object is not None:
            other = self._object(path.object)
            if other is None:
                return Location(doc.path, doc.line)
            doc = other
        return Location(doc.path, doc.line_of(fields.pointer(path, doc.data)))

    def _object(self, ident: str) -> Document | None:
        kind, _, name = ident.partition("/")
        namespace = self.doc.data.get("metadata", {}).get("namespace")
        for d in self.docs:
            meta = d.data.get("metadata") if isinstance(d.data.get("metadata"), dict) else {}
            same = d.data.get("kind") == kind and meta.get("name") == name
            if same and (kind != "TrainingRuntime" or meta.get("namespace") in (None, namespace)):
                return d
        return None

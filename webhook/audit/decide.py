"""One stored object -> ObjectAudit: what the admission engine says about it as it is now.

Validations run on the stored object (not on what the mutations would make of it): the question is
whether what runs complies. Mutations run separately; what they would change is reported as
"would patch" and nothing is written. Exceptions are the engine's, so they are honoured exactly as
at admission. Outcomes map to policy-report results:

    pass                        pass
    fail (Enforce or Audit)     fail     an Audit-mode policy is how a platform previews Enforce
    warn (Warn mode)            warn
    error                       error    the policy could not be evaluated
    exempt                      skip     with the exception's justification
    skip (does not apply)       -        not listed, as policy engines report only what applies
    mutation with a patch       warn     category "mutation", "would patch …"; without one: not listed

Mutation rows are shown by `trainguard audit` and never count towards a verdict; policy reports
carry the validation rows only (an object created before trainguard was installed lacks the
labels trainguard stamps at admission: that is no finding, and it would drown the real ones).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from webhook.engine import AdmissionInput, Engine, Policy, PolicyResult
from webhook.errors import TrainguardError

Result = Literal["pass", "fail", "warn", "error", "skip"]
Severity = Literal["critical", "high", "medium", "low", "info"]

RESULTS: tuple[Result, ...] = ("pass", "fail", "warn", "error", "skip")
# Policies carry a mode, not a severity: the mode says how much the platform cares.
SEVERITY_BY_MODE: dict[str, Severity] = {
    "Enforce": "high",
    "Audit": "medium",
    "Warn": "low",
    "Mutate": "info",
}
ENGINE_POLICY = "trainguard"  # the name findings carry when the object itself could not be read


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Which stored object an audit is about (what a report's `resources` entry holds)."""

    api_version: str
    kind: str
    namespace: str | None
    name: str
    uid: str

    @property
    def ident(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"


@dataclass(frozen=True, slots=True)
class Row:
    """One policy's result for one object."""

    policy: str
    result: Result
    message: str = ""
    mode: str = "Enforce"  # Enforce | Warn | Audit | Mutate
    severity: Severity = "high"
    category: str = "validation"  # validation | mutation
    patch: tuple[dict[str, Any], ...] = ()
    exemption: str | None = None
    fields: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ObjectAudit:
    ref: ObjectRef
    rows: tuple[Row, ...]
    role: str | None = None
    klass: str | None = None
    tier: str | None = None
    decided_at: datetime = field(default_factory=lambda: datetime.now(UTC), compare=False)

    @property
    def verdict(self) -> Result:
        """The worst validation result: fail, error, warn, else pass."""
        results = {r.result for r in self.rows if r.category == "validation"}
        for worst in ("fail", "error", "warn"):
            if worst in results:
                return worst  # type: ignore[return-value,unused-ignore]
        return "pass"

    @property
    def patch(self) -> tuple[dict[str, Any], ...]:
        return tuple(op for r in self.rows for op in r.patch)

    def failing(self, level: Result = "fail") -> tuple[Row, ...]:
        wanted = {"fail", "error"} | ({"warn"} if level == "warn" else set())
        return tuple(r for r in self.rows if r.category == "validation" and r.result in wanted)


def object_ref(obj: Mapping[str, Any]) -> ObjectRef:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    return ObjectRef(
        api_version=str(obj.get("apiVersion") or ""),
        kind=str(obj.get("kind") or ""),
        namespace=meta.get("namespace") or None,
        name=str(meta.get("name") or meta.get("generateName") or ""),
        uid=str(meta.get("uid") or ""),
    )


class Auditor:
    """Decides stored objects with one Engine; `policy(name)` gives the Policy behind a result."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._policies: dict[str, Policy] = {cp.policy.name: cp.policy for cp in engine.policies.policies}

    def policy(self, name: str) -> Policy | None:
        return self._policies.get(name)

    def audit(self, obj: Mapping[str, Any], *, now: datetime | None = None) -> ObjectAudit | None:
        """The audit of one stored object; None when trainguard does not decide it.

        Not decided: objects that are no workload, objects in excluded namespaces, and pods a
        workload owns (their owner is audited; the engine recognises them by labels or owner).
        """
        now = now or datetime.now(UTC)
        ref = object_ref(obj)
        doc = dict(obj)
        try:
            validated = self.engine.decide(
                AdmissionInput(object=doc, operation="CREATE"), mutate=False, now=now
            )
            if validated.workload is None or validated.workload.member:
                return None
            mutated = self.engine.decide(
                AdmissionInput(object=doc, operation="CREATE"), validate=False, now=now
            )
        except TrainguardError as exc:
            # A stored object trainguard cannot read is a finding, not a crash of the whole audit.
            row = Row(ENGINE_POLICY, "error", f"cannot decide this object: {exc}", severity="high")
            return ObjectAudit(ref, (row,), decided_at=now)
        rows = [self._row(r) for r in validated.results] + [self._row(r) for r in mutated.results]
        w = validated.workload
        return ObjectAudit(
            ref,
            tuple(
                sorted(
                    (r for r in rows if r is not None), key=lambda r: (r.category != "validation", r.policy)
                )
            ),
            role=w.role,
            klass=w.klass,
            tier=w.tier,
            decided_at=now,
        )

    def _row(self, result: PolicyResult) -> Row | None:
        policy = self.policy(result.policy)
        mutating = policy is not None and policy.mutating
        mode = "Mutate" if mutating else (policy.mode if policy is not None else "Enforce")
        severity = SEVERITY_BY_MODE.get(mode, "high")
        category = "mutation" if mutating else "validation"
        message = "; ".join(result.messages)
        base: dict[str, Any] = {
            "mode": mode,
            "severity": severity,
            "category": category,
            "fields": result.fields,
        }
        outcome = result.outcome
        if outcome == "skip":
            return None
        if outcome == "exempt":
            what = f" ({message})" if message else ""
            return Row(
                result.policy,
                "skip",
                f"exempted: {result.exemption}{what}",
                exemption=result.exemption,
                **base,
            )
        if outcome == "error":
            return Row(result.policy, "error", f"policy could not be evaluated ({message})", **base)
        if mutating:
            if result.patch:
                paths = ", ".join(sorted({str(op.get("path")) for op in result.patch}))
                return Row(result.policy, "warn", f"would patch {paths}", patch=result.patch, **base)
            return None
        if outcome in ("fail", "audit"):
            return Row(result.policy, "fail", message, **base)
        if outcome == "warn":
            return Row(result.policy, "warn", message, **base)
        return Row(result.policy, "pass", **base)

"""Policy records parsed from policy files, and the decisions the engine returns.

Frozen values only: load.py builds Policies, compile.py turns them into CompiledPolicies, the
pipeline returns a Decision. Nothing here evaluates anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from webhook.workloads import Workload

Mode = Literal["Enforce", "Warn", "Audit"]
FailurePolicy = Literal["Fail", "Ignore"]
MemberPods = Literal["Exclude", "Include", "Only"]
Outcome = Literal["pass", "fail", "warn", "audit", "skip", "error", "exempt"]

MODES: tuple[Mode, ...] = ("Enforce", "Warn", "Audit")
# The platform review question a policy answers (`trainguard review` reads its verdicts from them).
REVIEW_QUESTION_ANNOTATION = "trainguard.dev/review-question"
REVIEW_QUESTIONS = ("gang", "topology", "preemption", "recovery", "pool")
FAILURE_POLICIES: tuple[FailurePolicy, ...] = ("Fail", "Ignore")


@dataclass(frozen=True, slots=True)
class Match:
    kinds: tuple[str, ...] = ()  # "PyTorchJob" or "kubeflow.org/PyTorchJob"; empty: any
    roles: tuple[str, ...] = ()
    classes: tuple[str, ...] = ()
    tiers: tuple[str, ...] = ()
    namespaces: tuple[str, ...] = ()
    exclude_namespaces: tuple[str, ...] = ()
    operations: tuple[str, ...] = ("CREATE", "UPDATE")
    member_pods: MemberPods = "Exclude"
    # Mutations skip pods Kueue manages (its pod webhook refuses relabelling); a mutation that only
    # adds what Kueue never reads (the resume gate) opts in with "Include".
    kueue_managed_pods: Literal["Exclude", "Include"] = "Exclude"


@dataclass(frozen=True, slots=True)
class Expression:
    """A CEL source and where it sits in its policy, for error messages."""

    source: str
    where: str  # "validations[0].expression"


@dataclass(frozen=True, slots=True)
class NamedExpression:
    name: str
    expression: Expression


@dataclass(frozen=True, slots=True)
class Validation:
    expression: Expression
    message: str | None = None
    message_expression: Expression | None = None
    reason: str = "Forbidden"
    field: str | None = None  # dotted path of the field to fix, for reports
    field_expression: Expression | None = None


@dataclass(frozen=True, slots=True)
class Mutation:
    name: str
    patch_expression: Expression  # evaluates to a list of edits (engine/mutate.py)


@dataclass(frozen=True, slots=True)
class Policy:
    name: str
    path: str  # file it came from
    title: str
    description: str
    mode: Mode
    failure_policy: FailurePolicy
    match: Match
    match_conditions: tuple[NamedExpression, ...] = ()
    variables: tuple[NamedExpression, ...] = ()
    validations: tuple[Validation, ...] = ()
    mutations: tuple[Mutation, ...] = ()
    review_question: str | None = None  # one of REVIEW_QUESTIONS

    @property
    def mutating(self) -> bool:
        return bool(self.mutations)


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """What one policy concluded about one object."""

    policy: str
    outcome: Outcome
    messages: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()  # dotted paths of the fields the messages point at
    patch: tuple[dict[str, Any], ...] = ()  # ops this mutation produced
    exemption: str | None = None  # justification of the exception that exempted it
    reasons: tuple[str, ...] = ()  # each failed validation's `reason` (Forbidden when absent)


@dataclass(frozen=True, slots=True)
class Finding:
    policy: str
    message: str
    field: str | None = None
    reason: str = "Forbidden"


@dataclass(slots=True)
class Decision:
    """The engine's answer for one object: the same value behind every front door."""

    allowed: bool
    violations: list[Finding] = field(default_factory=list)  # Enforce failures and Fail errors
    warnings: list[Finding] = field(default_factory=list)  # Warn failures and Ignore errors
    audits: list[Finding] = field(default_factory=list)  # Audit failures
    patch: list[dict[str, Any]] = field(default_factory=list)  # RFC 6902 ops, in order
    results: list[PolicyResult] = field(default_factory=list)
    workload: Workload | None = None  # the Workload after mutation, None for objects we do not decide
    mutated: dict[str, Any] | None = None  # the object after the patch (the original when it is empty)
    skipped_reason: str | None = None  # why nothing was decided (excluded namespace, not a workload)
    made_ahead: bool = False  # a validating decision made before its call came (engine/ahead.py)

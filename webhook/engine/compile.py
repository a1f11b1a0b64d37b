"""Policy -> CompiledPolicy: every CEL expression compiled once, at load time, and each phase's
policies written as one program where the runtime can (joined.py).

A policy set either compiles whole or not at all: a compile error names the file, the policy and
the expression's position, and the caller keeps serving its last good set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.engine.cel import Backend, CelCompileError, Program, make_backend
from webhook.engine.joined import Joined, join
from webhook.engine.load import default_policies_dir, load_policies
from webhook.engine.model import Expression, Policy, PolicyResult
from webhook.errors import PolicyError


@dataclass(frozen=True, slots=True)
class CompiledValidation:
    check: Program
    message: str | None
    message_program: Program | None
    reason: str
    field: str | None
    field_program: Program | None

    def message_for(self, value: Any) -> str:
        """The message of a failed check whose messageExpression gave `value`: VAP semantics,
        an empty (or non-string) value falls back to `message`."""
        static = self.message or ""
        if self.message_program is None:
            return static
        return value if isinstance(value, str) and value.strip() else static

    def field_for(self, value: Any) -> str | None:
        """The field of a failed check whose fieldExpression gave `value` (else `field`)."""
        if self.field_program is None:
            return self.field
        return value if isinstance(value, str) and value else self.field


@dataclass(frozen=True, slots=True)
class CompiledPolicy:
    policy: Policy
    conditions: tuple[tuple[str, Program], ...]
    variables: tuple[tuple[str, Program], ...]
    validations: tuple[CompiledValidation, ...]
    mutations: tuple[tuple[str, Program], ...]
    # The results most requests conclude, made once: PolicyResults are immutable.
    passed: PolicyResult = field(init=False, repr=False, compare=False)
    unmet: PolicyResult = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        name = self.policy.name
        object.__setattr__(self, "passed", PolicyResult(name, "pass"))
        object.__setattr__(self, "unmet", PolicyResult(name, "skip", ("matchConditions not met",)))

    @property
    def name(self) -> str:
        return self.policy.name


@dataclass(frozen=True, slots=True)
class PolicySet:
    """An immutable, compiled set of policies; the server swaps whole sets atomically."""

    policies: tuple[CompiledPolicy, ...]
    digest: str
    backend: Backend
    sources: tuple[str, ...] = ()
    # What each phase's policies read (bindings.ReadPlan, by phase name: two at most), made on
    # first use and kept for the set's life: the webhook builds a new Engine on every cluster
    # change, the set only when its files change.
    read_plans: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # Each phase's policies (in the order of `mutating` / `validating`) as one program, with
    # why any policy is not in it (engine/joined.py)
    mutating_joined: Joined = field(default=Joined(None, ()), compare=False, repr=False)
    validating_joined: Joined = field(default=Joined(None, ()), compare=False, repr=False)

    @property
    def mutating(self) -> tuple[CompiledPolicy, ...]:
        return tuple(p for p in self.policies if p.policy.mutating)

    @property
    def validating(self) -> tuple[CompiledPolicy, ...]:
        return tuple(p for p in self.policies if not p.policy.mutating)

    def names(self) -> list[str]:
        return [p.name for p in self.policies]


def _compile(backend: Backend, policy: Policy, expr: Expression) -> Program:
    try:
        return backend.compile(expr.source)
    except CelCompileError as exc:
        position = expr.where + (f" ({exc.position})" if exc.position else "")
        raise PolicyError(
            f"CEL does not compile: {exc.message}", path=policy.path, policy=policy.name, position=position
        ) from None


def compile_policy(backend: Backend, policy: Policy) -> CompiledPolicy:
    def c(expression: Expression) -> Program:
        return _compile(backend, policy, expression)

    return CompiledPolicy(
        policy=policy,
        conditions=tuple((m.name, c(m.expression)) for m in policy.match_conditions),
        variables=tuple((v.name, c(v.expression)) for v in policy.variables),
        validations=tuple(
            CompiledValidation(
                check=c(v.expression),
                message=v.message,
                message_program=c(v.message_expression) if v.message_expression else None,
                reason=v.reason,
                field=v.field,
                field_program=c(v.field_expression) if v.field_expression else None,
            )
            for v in policy.validations
        ),
        mutations=tuple((m.name, c(m.patch_expression)) for m in policy.mutations),
    )


def compile_policies(
    policies: list[Policy], digest: str, backend: Backend, sources: tuple[str, ...] = ()
) -> PolicySet:
    compiled = tuple(compile_policy(backend, p) for p in policies)
    return PolicySet(
        compiled,
        digest,
        backend,
        sources,
        mutating_joined=join(backend, [p for p in policies if p.mutating], mutating=True),
        validating_joined=join(backend, [p for p in policies if not p.mutating], mutating=False),
    )


def load_policy_set(paths: Sequence[str | Path] = (), backend: Backend | str | None = None) -> PolicySet:
    """Load and compile every policy under `paths`, the shipped set when none are given (the one
    place that default is written); raises PolicyError on the first problem."""
    paths = paths or [default_policies_dir()]
    be = backend if backend is not None and not isinstance(backend, str) else make_backend(backend)
    policies, digest = load_policies(paths)
    return compile_policies(policies, digest, be, tuple(str(p) for p in paths))

"""Policy -> CompiledPolicy: every CEL expression compiled once, at load time.

A policy set either compiles whole or not at all: a compile error names the file, the policy and
the expression's position, and the caller keeps serving its last good set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.engine.cel import Backend, CelCompileError, Program, make_backend
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


@dataclass(frozen=True, slots=True)
class Folded:
    """A policy's whole evaluation as one program per phase (see CppBackend.compile_folded).

    Each returns [] when a matchCondition is false, else [n, values] with one value per
    validation (`[]` where it holds; `[message, field]` where it fails, each the value of its
    messageExpression / fieldExpression, "" where there is none) or per mutation (its edits).
    """

    validations: Program | None
    mutations: Program | None
    # their sources, for a program of several policies (PolicySet.programs)
    validations_source: str | None = None
    mutations_source: str | None = None


def _fold(policy: Policy, backend: Backend) -> Folded | None:
    """The policy's folded programs, None when the backend cannot fold (or this policy)."""
    folded_source = getattr(backend, "folded_source", None)
    compile_folded = getattr(backend, "compile_folded", None)
    if folded_source is None or compile_folded is None:
        return None
    conditions = [m.expression.source for m in policy.match_conditions]
    variables = [(v.name, v.expression.source) for v in policy.variables]

    def folded(body: str) -> tuple[Program, str | None]:
        source: str | None = folded_source(conditions, variables, body)
        if source is None:
            raise _NoFastPath
        # Compiled as the item it is in a phase's program (_phase_program), so that compiling
        # here tells whether it fits there: the runtime's parser limits the nesting depth.
        program: Program | None = compile_folded(f"[true ? (\n{source}\n) : []]")
        if program is not None:
            return _Single(program), source
        program = compile_folded(source)  # too deep to join a phase's program: evaluated alone
        if program is None:
            raise _NoFastPath
        return program, None

    def optional(expression: Expression | None) -> str:
        # "" where there is no expression: read as its absence (evaluate._folded_result), and,
        # unlike null, no reference to None that the C++ runtime's results would have to restore
        return f"(\n{expression.source}\n)" if expression is not None else '""'

    try:
        validations = mutations = None
        if policy.validations:
            validations = folded(
                "["
                + ", ".join(
                    f"(\n{v.expression.source}\n) ? [] : "
                    f"[{optional(v.message_expression)}, {optional(v.field_expression)}]"
                    for v in policy.validations
                )
                + "]"
            )
        if policy.mutations:
            mutations = folded(
                "[" + ", ".join(f"(\n{m.patch_expression.source}\n)" for m in policy.mutations) + "]"
            )
        return Folded(
            validations=validations[0] if validations else None,
            mutations=mutations[0] if mutations else None,
            validations_source=validations[1] if validations else None,
            mutations_source=mutations[1] if mutations else None,
        )
    except Exception:  # _NoFastPath, or anything the rewriting trips on: the generic path serves
        return None


class _NoFastPath(Exception):
    pass


class _Single:
    """A program written as a one-item phase program (`[true ? (folded) : []]`): its item."""

    __slots__ = ("_program",)

    def __init__(self, program: Program) -> None:
        self._program = program

    def evaluate(self, activation: Any) -> Any:
        return self._program.evaluate(activation)[0]


@dataclass(frozen=True, slots=True)
class CompiledPolicy:
    policy: Policy
    conditions: tuple[tuple[str, Program], ...]
    variables: tuple[tuple[str, Program], ...]
    validations: tuple[CompiledValidation, ...]
    mutations: tuple[tuple[str, Program], ...]
    folded: Folded | None = None  # the fast path: one evaluation per policy (see Folded)
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
    # What the engine derives from the policies alone (pipeline.py: the paths each phase reads and
    # the view builders made from them), made on first use and kept for the set's life: the
    # webhook builds a new Engine on every cluster change, the set only when its files change.
    derived: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # Each phase's policies (in the order of `mutating` / `validating`) as one program
    # (CppBackend.compile_selected); None where the backend or a policy cannot fold.
    mutating_program: Program | None = field(default=None, compare=False, repr=False)
    validating_program: Program | None = field(default=None, compare=False, repr=False)

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
        folded=_fold(policy, backend),
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
        mutating_program=_phase_program(backend, [p for p in compiled if p.policy.mutating], mutating=True),
        validating_program=_phase_program(
            backend, [p for p in compiled if not p.policy.mutating], mutating=False
        ),
    )


def phase_source(cp: CompiledPolicy, *, mutating: bool) -> str | None:
    """The policy's item in its phase's program (_phase_program); None: it is evaluated on its
    own (it does not fold, or folded it is too deep to join)."""
    folded = cp.folded
    if folded is None:
        return None
    return folded.mutations_source if mutating else folded.validations_source


def _phase_program(backend: Backend, policies: Sequence[CompiledPolicy], *, mutating: bool) -> Program | None:
    """One program for the policies of a phase that fold (the others' items are always []), None
    when the backend cannot fold or fewer than two policies would share it."""
    compile_selected = getattr(backend, "compile_selected", None)
    sources = [phase_source(p, mutating=mutating) for p in policies]
    if compile_selected is None or sum(s is not None for s in sources) < 2:
        return None
    program: Program | None = compile_selected(sources)
    return program


def load_policy_set(paths: Sequence[str | Path] = (), backend: Backend | str | None = None) -> PolicySet:
    """Load and compile every policy under `paths`, the shipped set when none are given (the one
    place that default is written); raises PolicyError on the first problem."""
    paths = paths or [default_policies_dir()]
    be = backend if backend is not None and not isinstance(backend, str) else make_backend(backend)
    policies, digest = load_policies(paths)
    return compile_policies(policies, digest, be, tuple(str(p) for p in paths))

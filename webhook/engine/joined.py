"""The fast strategy: all of a phase's policies as one CEL program, evaluated once per request.

Each policy's matchConditions, variables and validations (or mutations) are written as one item
of the phase's program (CppBackend.joined_source); the request selects the items of the policies
that apply, and one evaluation gives each its value. What cannot be written so is said as data,
per policy (Joined.refusals): the backend has no such programs (cel-python), a variable's name
cel.bind cannot bind, or an item the runtime's parser refuses (too deeply nested). Those policies
take the generic path (evaluate.py), as every policy does when the program fails: the phase
(phase.py) decides that, and counts it.

Reading an item's value (validation_result, mutation_values) refuses a value of any other shape
(None): the generic path then decides that policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from webhook.engine.cel import Backend, CelCompileError, Program
from webhook.engine.model import Expression, Policy, PolicyResult

if TYPE_CHECKING:  # compile.py builds the phases' programs with join()
    from webhook.engine.compile import CompiledPolicy

# Refusals (Joined.refusals): short, fixed words, so that a metric label can carry them
NO_JOINING_RUNTIME = "runtime-cannot-join"
VARIABLE_NAME = "variable-name-not-an-identifier"
DOES_NOT_COMPILE = "does-not-compile-joined"


@dataclass(frozen=True, slots=True)
class Joined:
    """A phase's program, and for each of the phase's policies (in order) why it is not in it
    (None where it is). `program` is None when no policy is."""

    program: Program | None
    refusals: tuple[str | None, ...]
    # The runtime's words for each refusal of DOES_NOT_COMPILE (None elsewhere), for a reader
    details: tuple[str | None, ...] = ()


def join(backend: Backend, policies: Sequence[CompiledPolicy], *, mutating: bool) -> Joined:
    """The phase's program over `policies` (all mutating or all validating)."""
    joined_source = getattr(backend, "joined_source", None)
    compile_selected = getattr(backend, "compile_selected", None)
    if joined_source is None or compile_selected is None:
        return Joined(None, (NO_JOINING_RUNTIME,) * len(policies))
    sources: list[str | None] = []
    refusals: list[str | None] = []
    details: list[str | None] = []
    for cp in policies:
        policy = cp.policy
        source = joined_source(
            [m.expression.source for m in policy.match_conditions],
            [(v.name, v.expression.source) for v in policy.variables],
            _mutations_body(policy) if mutating else _validations_body(policy),
        )
        detail = None
        if source is None:
            refusal: str | None = VARIABLE_NAME
        else:
            try:  # alone, as deep as it is in the phase's program: whether it fits there
                compile_selected([source])
                refusal = None
            except CelCompileError as exc:
                source, refusal, detail = None, DOES_NOT_COMPILE, str(exc)
        sources.append(source)
        refusals.append(refusal)
        details.append(detail)
    if all(source is None for source in sources):
        return Joined(None, tuple(refusals), tuple(details))
    program: Program = compile_selected(sources)
    return Joined(program, tuple(refusals), tuple(details))


def _optional(expression: Expression | None) -> str:
    # "" where there is no expression: read as its absence (validation_result), and, unlike null,
    # no reference to None that the C++ runtime's results would have to restore
    return f"(\n{expression.source}\n)" if expression is not None else '""'


def _validations_body(policy: Policy) -> str:
    """One value per validation: [] where it holds, [message, field] where it fails (each the
    value of its messageExpression / fieldExpression, "" where there is none)."""
    return (
        "["
        + ", ".join(
            f"(\n{v.expression.source}\n) ? [] : "
            f"[{_optional(v.message_expression)}, {_optional(v.field_expression)}]"
            for v in policy.validations
        )
        + "]"
    )


def _mutations_body(policy: Policy) -> str:
    """One value per mutation: its edits."""
    return "[" + ", ".join(f"(\n{m.patch_expression.source}\n)" for m in policy.mutations) + "]"


def values_of(result: Any, count: int) -> list[Any] | None:
    """An item's values: [] when a condition is false, else one value per validation or mutation
    (`count` of them, at least one: a policy without any would be its conditions' [] too); None
    for a value of any other shape."""
    if type(result) is not list or (result and len(result) != count) or not count:
        return None
    return result


def validation_result(cp: CompiledPolicy, verdicts: list[Any]) -> PolicyResult | None:
    """The PolicyResult of a validating policy's values (values_of): what the generic path
    concludes from the same values; None for a verdict of another shape."""
    if not verdicts:
        return cp.unmet
    if not any(verdicts):  # every check holds
        return cp.passed
    messages: list[str] = []
    fields: list[str] = []
    reasons: list[str] = []
    for v, verdict in zip(cp.validations, verdicts, strict=True):
        if not verdict:
            continue
        if type(verdict) is not list or len(verdict) != 2:
            return None
        message, field = verdict
        messages.append(v.message_for(message))
        fields.append(v.field_for(field) or "")
        reasons.append(v.reason)
    return PolicyResult(cp.name, "fail", tuple(messages), tuple(fields), reasons=tuple(reasons))

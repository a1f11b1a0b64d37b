"""The fast strategy: all of a phase's policies as one CEL program, evaluated once per request.

Each policy's matchConditions, variables and validations (or mutations) are written as one item
of the phase's program (CppBackend.joined_source); the request selects the items of the policies
that apply, and one evaluation gives each its value (or, where each policy's time is wanted, one
evaluation of each item alone: Joined.items). What cannot be written so is said as data, per
policy (Joined.refusals): the backend has no such programs (cel-python), a variable's name is not
an identifier, or the runtime refuses the item (nested too deeply for its parser). Those policies
take the generic path (evaluate.py), as every policy does when the program fails: the phase
(phase.py) evaluates the program, reads each item's value, decides any fallback and counts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from webhook.engine.cel import Backend, CelCompileError, Program
from webhook.engine.model import Expression, Policy

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
    # Each policy's item alone, at its own index (None where refused): compiled anyway to learn
    # whether the item fits, and evaluated in place of the whole program where each policy's
    # time is wanted, on the same activation (so nothing is converted twice)
    items: tuple[Program | None, ...] = ()


def join(backend: Backend, policies: Sequence[Policy], *, mutating: bool) -> Joined:
    """The phase's program over `policies` (all mutating or all validating, each compiled
    already: compile.py calls this once per phase)."""
    joined_source = getattr(backend, "joined_source", None)
    compile_selected = getattr(backend, "compile_selected", None)
    if joined_source is None or compile_selected is None:
        return Joined(None, (NO_JOINING_RUNTIME,) * len(policies))
    sources: list[str | None] = []
    refusals: list[str | None] = []
    details: list[str | None] = []
    items: list[Program | None] = []
    for i, policy in enumerate(policies):
        source = joined_source(
            [m.expression.source for m in policy.match_conditions],
            [(v.name, v.expression.source) for v in policy.variables],
            _mutations_body(policy) if mutating else _validations_body(policy),
        )
        detail = item = None
        if source is None:
            refusal: str | None = VARIABLE_NAME
        else:
            try:  # alone, as deep as it is in the phase's program: whether it fits there
                item = compile_selected([None] * i + [source])
                refusal = None
            except CelCompileError as exc:
                source, refusal, detail = None, DOES_NOT_COMPILE, str(exc)
        sources.append(source)
        refusals.append(refusal)
        details.append(detail)
        items.append(item)
    if all(source is None for source in sources):
        return Joined(None, tuple(refusals), tuple(details), tuple(items))
    try:
        program: Program = compile_selected(sources)
    except CelCompileError as exc:  # each item fits alone; all of them together, not
        joined = [refusal is None for refusal in refusals]
        refusals = [DOES_NOT_COMPILE if ok else refusal for ok, refusal in zip(joined, refusals, strict=True)]
        details = [str(exc) if ok else detail for ok, detail in zip(joined, details, strict=True)]
        return Joined(None, tuple(refusals), tuple(details))
    return Joined(program, tuple(refusals), tuple(details), tuple(items))


def _optional(expression: Expression | None) -> str:
    # "" where there is no expression: read as its absence (phase._validation_result), and, unlike null,
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

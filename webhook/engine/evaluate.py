"""Run one matched policy's CEL against one object: conditions, variables, validations, mutations.

Errors are data: an expression that fails to evaluate yields an "error" PolicyResult that
decide.py turns into deny or allow according to the policy's failurePolicy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webhook.engine.cel import Backend, CelEvalError, Program
from webhook.engine.compile import CompiledPolicy
from webhook.engine.model import PolicyResult
from webhook.engine.mutate import EditError, Patcher, flatten_edits


class Bindings:
    """The CEL variables of one request, converted to the backend's form once and shared."""

    __slots__ = ("backend", "data", "constants", "_activation")

    def __init__(self, backend: Backend, data: dict[str, Any], constants: Any = None) -> None:
        self.backend = backend
        self.data = data
        self.constants = constants  # backend.prepare() of what every request shares (params, cluster)
        self._activation: Any = None

    def activation(self) -> Any:
        if self._activation is None:
            self._activation = self.backend.activation(self.data, self.constants)
        return self._activation

    def with_variables(self, values: dict[str, Any]) -> Any:
        extend = getattr(self.backend, "extend", None)
        if extend is not None:  # reuse what is already converted, convert `variables` only
            return extend(self.activation(), "variables", values)
        return self.backend.activation({**self.data, "variables": values}, self.constants)


class _Failed(Exception):
    def __init__(self, where: str, error: str) -> None:
        self.where = where
        self.error = error
        super().__init__(f"{where}: {error}")


def _eval(program: Any, activation: Any, where: str) -> Any:
    try:
        return program.evaluate(activation)
    except CelEvalError as exc:
        raise _Failed(where, str(exc)) from None
    except Exception as exc:  # a backend bug must not take the request down
        raise _Failed(where, f"{type(exc).__name__}: {exc}") from None


def _conditions_met(cp: CompiledPolicy, bindings: Bindings) -> bool:
    activation = bindings.activation()
    for name, program in cp.conditions:
        value = _eval(program, activation, f"matchConditions[{name}]")
        if value is not True:
            if value is False:
                return False
            raise _Failed(f"matchConditions[{name}]", f"must be a bool, got {value!r}")
    return True


def _bound_values(program: Program | None, bindings: Bindings, count: int) -> list[Any] | None:
    """The values of a policy's expressions through its bound program; None: take the generic
    path (no bound program, or an evaluation error, which the generic path attributes exactly)."""
    if program is None:
        return None
    try:
        result = program.evaluate(bindings.activation())
    except Exception:
        return None
    if not (isinstance(result, list) and len(result) == 2 and isinstance(result[1], list)):
        return None
    values: list[Any] = result[1]
    return values if len(values) == count else None


def _with_variables(cp: CompiledPolicy, bindings: Bindings) -> Any:
    """The activation to evaluate the policy with, its variables evaluated one by one, in order."""
    activation = bindings.activation()
    if cp.variables:
        values: dict[str, Any] = {}
        for name, program in cp.variables:
            activation = bindings.with_variables(values)
            values[name] = _eval(program, activation, f"variables[{name}]")
        activation = bindings.with_variables(values)
    return activation


def validate(cp: CompiledPolicy, bindings: Bindings) -> PolicyResult:
    try:
        bound = cp.bound
        if not _conditions_met(cp, bindings):
            return PolicyResult(cp.name, "skip", ("matchConditions not met",))
        checks = _bound_values(bound.validations if bound else None, bindings, len(cp.validations))
        if bound is not None and checks is not None:
            # The variables are bound inside each program: the request's one activation serves.
            activation = bindings.activation()
            message_programs: Sequence[Program | None] = bound.messages
            field_programs: Sequence[Program | None] = bound.fields
        else:
            activation = _with_variables(cp, bindings)
            message_programs = [v.message_program for v in cp.validations]
            field_programs = [v.field_program for v in cp.validations]
        messages: list[str] = []
        fields: list[str] = []
        reasons: list[str] = []
        for i, v in enumerate(cp.validations):
            ok = (
                checks[i]
                if checks is not None
                else _eval(v.check, activation, f"validations[{i}].expression")
            )
            if ok is True:
                continue
            if ok is not False:
                raise _Failed(f"validations[{i}].expression", f"must be a bool, got {ok!r}")
            message = v.message or ""
            message_program = message_programs[i]
            if message_program is not None:
                value = _eval(message_program, activation, f"validations[{i}].messageExpression")
                if isinstance(value, str) and value.strip():
                    message = value  # VAP semantics: an empty messageExpression falls back
            field = v.field
            field_program = field_programs[i]
            if field_program is not None:
                value = _eval(field_program, activation, f"validations[{i}].fieldExpression")
                field = value if isinstance(value, str) and value else field
            messages.append(message)
            fields.append(field or "")
            reasons.append(v.reason)
        if not messages:
            return PolicyResult(cp.name, "pass")
        return PolicyResult(cp.name, "fail", tuple(messages), tuple(fields), reasons=tuple(reasons))
    except _Failed as exc:
        return PolicyResult(cp.name, "error", (f"{exc.where}: {exc.error}",))


def mutate(cp: CompiledPolicy, bindings: Bindings, patcher: Patcher) -> PolicyResult:
    try:
        bound = cp.bound
        if not _conditions_met(cp, bindings):
            return PolicyResult(cp.name, "skip", ("matchConditions not met",))
        values = _bound_values(bound.mutations if bound else None, bindings, len(cp.mutations))
        activation = None if values is not None else _with_variables(cp, bindings)
        # Evaluate every expression before touching the object, and roll back a policy whose
        # edits do not apply: a policy's edits land whole or not at all.
        edits = []
        for i, (name, program) in enumerate(cp.mutations):
            if values is not None:
                value = values[i]
            else:
                value = _eval(program, activation, f"mutations[{name}].patchExpression")
            try:
                edits.append((name, flatten_edits(value)))
            except EditError as exc:
                raise _Failed(f"mutations[{name}]", str(exc)) from None
        state = patcher.checkpoint()
        for name, items in edits:
            try:
                for edit in items:
                    patcher.apply(edit)
            except EditError as exc:
                patcher.rollback(state)
                raise _Failed(f"mutations[{name}]", str(exc)) from None
        return PolicyResult(cp.name, "pass", patch=tuple(patcher.ops[state[1] :]))
    except _Failed as exc:
        return PolicyResult(cp.name, "error", (f"{exc.where}: {exc.error}",))

"""Run one matched policy's CEL against one object: conditions, variables, validations, mutations.

Errors are data: an expression that fails to evaluate yields an "error" PolicyResult that
decide.py turns into deny or allow according to the policy's failurePolicy.
"""

from __future__ import annotations

from typing import Any

from webhook.engine.cel import Backend, CelEvalError
from webhook.engine.compile import CompiledPolicy
from webhook.engine.model import PolicyResult
from webhook.engine.mutate import EditError, Patcher, flatten_edits


class Bindings:
    """The CEL variables of one request, converted to the backend's form once and shared."""

    __slots__ = ("backend", "data", "_activation")

    def __init__(self, backend: Backend, data: dict[str, Any]) -> None:
        self.backend = backend
        self.data = data
        self._activation: Any = None

    def activation(self) -> Any:
        if self._activation is None:
            self._activation = self.backend.activation(self.data)
        return self._activation

    def with_variables(self, values: dict[str, Any]) -> Any:
        return self.backend.activation({**self.data, "variables": values})


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


def _prepare(cp: CompiledPolicy, bindings: Bindings) -> Any | None:
    """The activation to evaluate the policy with, or None when a matchCondition is false."""
    activation = bindings.activation()
    for name, program in cp.conditions:
        value = _eval(program, activation, f"matchConditions[{name}]")
        if value is not True:
            if value is False:
                return None
            raise _Failed(f"matchConditions[{name}]", f"must be a bool, got {value!r}")
    if cp.variables:
        values: dict[str, Any] = {}
        for name, program in cp.variables:
            activation = bindings.with_variables(values)
            values[name] = _eval(program, activation, f"variables[{name}]")
        activation = bindings.with_variables(values)
    return activation


def validate(cp: CompiledPolicy, bindings: Bindings) -> PolicyResult:
    try:
        activation = _prepare(cp, bindings)
        if activation is None:
            return PolicyResult(cp.name, "skip", ("matchConditions not met",))
        messages: list[str] = []
        fields: list[str] = []
        for i, v in enumerate(cp.validations):
            ok = _eval(v.check, activation, f"validations[{i}].expression")
            if ok is True:
                continue
            if ok is not False:
                raise _Failed(f"validations[{i}].expression", f"must be a bool, got {ok!r}")
            message = v.message or ""
            if v.message_program is not None:
                value = _eval(v.message_program, activation, f"validations[{i}].messageExpression")
                if isinstance(value, str) and value.strip():
                    message = value  # VAP semantics: an empty messageExpression falls back
            field = v.field
            if v.field_program is not None:
                value = _eval(v.field_program, activation, f"validations[{i}].fieldExpression")
                field = value if isinstance(value, str) and value else field
            messages.append(message)
            fields.append(field or "")
        if not messages:
            return PolicyResult(cp.name, "pass")
        return PolicyResult(cp.name, "fail", tuple(messages), tuple(fields))
    except _Failed as exc:
        return PolicyResult(cp.name, "error", (f"{exc.where}: {exc.error}",))


def mutate(cp: CompiledPolicy, bindings: Bindings, patcher: Patcher) -> PolicyResult:
    try:
        activation = _prepare(cp, bindings)
        if activation is None:
            return PolicyResult(cp.name, "skip", ("matchConditions not met",))
        # Evaluate every expression before touching the object, and roll back a policy whose
        # edits do not apply: a policy's edits land whole or not at all.
        edits = []
        for name, program in cp.mutations:
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

"""Run one matched policy's CEL against one object: conditions, variables, validations, mutations.

Errors are data: an expression that fails to evaluate yields an "error" PolicyResult that
decide.py turns into deny or allow according to the policy's failurePolicy.
"""

from __future__ import annotations

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


# A folded program's value not known yet: validate() and mutate() evaluate the program themselves
UNKNOWN: Any = object()


def _folded(program: Program | None, bindings: Bindings, count: int, result: Any) -> list[Any] | None:
    """A folded program's values (compile.Folded): [] when a condition is false, else one value per
    expression; None: take the generic path (no folded program, or an evaluation error, which the
    generic path attributes exactly to the condition, variable or expression that failed).
    `result`: the program's value where a phase's program evaluated it already, else UNKNOWN."""
    if result is UNKNOWN:
        if program is None:
            return None
        try:
            result = program.evaluate(bindings.activation())
        except Exception:
            return None
    if type(result) is not list:
        return None
    if not result:
        return result
    if len(result) != 2:
        return None
    values = result[1]
    return values if type(values) is list and len(values) == count else None


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


def validate(cp: CompiledPolicy, bindings: Bindings, value: Any = UNKNOWN) -> PolicyResult:
    """The policy's result; `value`: its folded program's, when known already."""
    folded = cp.folded
    verdicts = _folded(folded.validations if folded else None, bindings, len(cp.validations), value)
    if verdicts is not None:
        return _folded_result(cp, verdicts)
    try:
        if not _conditions_met(cp, bindings):
            return cp.unmet
        activation = _with_variables(cp, bindings)
        messages: list[str] = []
        fields: list[str] = []
        reasons: list[str] = []
        for i, v in enumerate(cp.validations):
            ok = _eval(v.check, activation, f"validations[{i}].expression")
            if ok is True:
                continue
            if ok is not False:
                raise _Failed(f"validations[{i}].expression", f"must be a bool, got {ok!r}")
            message = v.message or ""
            if v.message_program is not None:
                value = _eval(v.message_program, activation, f"validations[{i}].messageExpression")
                message = _message(value, message)
            field = v.field
            if v.field_program is not None:
                value = _eval(v.field_program, activation, f"validations[{i}].fieldExpression")
                field = _field(value, field)
            messages.append(message)
            fields.append(field or "")
            reasons.append(v.reason)
        if not messages:
            return cp.passed
        return PolicyResult(cp.name, "fail", tuple(messages), tuple(fields), reasons=tuple(reasons))
    except _Failed as exc:
        return PolicyResult(cp.name, "error", (f"{exc.where}: {exc.error}",))


def _folded_result(cp: CompiledPolicy, verdicts: list[Any]) -> PolicyResult:
    """The PolicyResult of a folded program's values: what the generic path concludes from the same
    values (every expression evaluated without error)."""
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
        message, field = verdict
        messages.append(_message(message, v.message or "") if v.message_program else v.message or "")
        fields.append((_field(field, v.field) if v.field_program else v.field) or "")
        reasons.append(v.reason)
    return PolicyResult(cp.name, "fail", tuple(messages), tuple(fields), reasons=tuple(reasons))


def _message(value: Any, static: str) -> str:
    # VAP semantics: an empty (or non-string) messageExpression falls back to `message`
    return value if isinstance(value, str) and value.strip() else static


def _field(value: Any, static: str | None) -> str | None:
    return value if isinstance(value, str) and value else static


def mutate(cp: CompiledPolicy, bindings: Bindings, patcher: Patcher, value: Any = UNKNOWN) -> PolicyResult:
    """The policy's result, its edits applied to `patcher`; `value`: its folded program's, when
    known already."""
    folded = cp.folded
    values = _folded(folded.mutations if folded else None, bindings, len(cp.mutations), value)
    if values is not None and not values:
        return cp.unmet
    try:
        if values is None and not _conditions_met(cp, bindings):
            return cp.unmet
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
        patch = patcher.ops[state[1] :]
        return PolicyResult(cp.name, "pass", patch=tuple(patch)) if patch else cp.passed
    except _Failed as exc:
        return PolicyResult(cp.name, "error", (f"{exc.where}: {exc.error}",))

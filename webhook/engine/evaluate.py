"""The generic path: one policy's CEL evaluated expression by expression (conditions, variables,
validations, mutations), each error attributed to the expression that raised it.

It serves every policy the phase's one program (joined.py) cannot, and decides what that program
must agree with. Errors are data: an expression that fails to evaluate yields an "error"
PolicyResult that decide.py turns into deny or allow according to the policy's failurePolicy.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from webhook.engine.bindings import Bindings
from webhook.engine.cel import CelEvalError
from webhook.engine.compile import CompiledPolicy
from webhook.engine.model import PolicyResult
from webhook.engine.mutate import EditError, Patcher, flatten_edits


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
    except Exception as exc:  # a backend bug must not take the request down: the policy's error
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
    """The validating policy's result."""
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
            message = field = None
            if v.message_program is not None:
                message = _eval(v.message_program, activation, f"validations[{i}].messageExpression")
            if v.field_program is not None:
                field = _eval(v.field_program, activation, f"validations[{i}].fieldExpression")
            messages.append(v.message_for(message))
            fields.append(v.field_for(field) or "")
            reasons.append(v.reason)
        if not messages:
            return cp.passed
        return PolicyResult(cp.name, "fail", tuple(messages), tuple(fields), reasons=tuple(reasons))
    except _Failed as exc:
        return PolicyResult(cp.name, "error", (f"{exc.where}: {exc.error}",))


def mutate(cp: CompiledPolicy, bindings: Bindings, patcher: Patcher) -> PolicyResult:
    """The mutating policy's result, its edits applied to `patcher`."""
    try:
        if not _conditions_met(cp, bindings):
            return cp.unmet
        activation = _with_variables(cp, bindings)
        # evaluated one at a time as apply_edits reads them: the first failure is the one named
        values = (
            _eval(program, activation, f"mutations[{name}].patchExpression") for name, program in cp.mutations
        )
        return apply_edits(cp, values, patcher)
    except _Failed as exc:
        return PolicyResult(cp.name, "error", (f"{exc.where}: {exc.error}",))


def apply_edits(cp: CompiledPolicy, values: Iterable[Any], patcher: Patcher) -> PolicyResult:
    """The result of a mutating policy whose mutations evaluated to `values` (one each), its
    edits applied to `patcher`: all of them, or, where one does not apply, none (the policy's
    error)."""
    edits = []
    for (name, _), value in zip(cp.mutations, values, strict=True):
        try:
            edits.append(flatten_edits(value))
        except EditError as exc:
            return PolicyResult(cp.name, "error", (f"mutations[{name}]: {exc}",))
    state = patcher.checkpoint()
    for (name, _), items in zip(cp.mutations, edits, strict=True):
        try:
            for edit in items:
                patcher.apply(edit)
        except EditError as exc:
            patcher.rollback(state)
            return PolicyResult(cp.name, "error", (f"mutations[{name}]: {exc}",))
    patch = patcher.ops[state[1] :]
    return PolicyResult(cp.name, "pass", patch=tuple(patch)) if patch else cp.passed

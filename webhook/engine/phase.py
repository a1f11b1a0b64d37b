"""Evaluate a phase: one phase's policies (the mutating ones, or the validating ones) against one
request, each policy's result in the policies' order.

1. Which policies apply is decided once, before anything is evaluated (`applicability`: the
   policy's match and, for mutations, Kueue-managed pods), remembered by what decides it.
2. The applicable policies are evaluated by the phase's one program (joined.py, the fast
   strategy) where it holds them, else by the generic path (evaluate.py), expression by
   expression. The generic path serves a policy when the program does not hold it (its refusal,
   said at load time), when the program fails on this request (an error must stay the one
   policy's, which only the generic path can tell), or when its value has an unexpected shape.
   Each such fallback is counted by phase and reason (Fallbacks).
3. A policy exempted by an exception (waiver) is evaluated and reported "exempt", its edits kept
   off the object. A deadline that passes before a policy is evaluated gives it the budget
   error, which decide.py maps through its failurePolicy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from time import monotonic, perf_counter
from typing import Any, Protocol

from webhook.engine import evaluate, match
from webhook.engine.bindings import Bindings
from webhook.engine.cel import SELECTED, CelEvalError
from webhook.engine.compile import CompiledPolicy
from webhook.engine.joined import Joined
from webhook.engine.model import Policy, PolicyResult
from webhook.engine.mutate import Patcher
from webhook.workloads import Deferred, Workload

BUDGET_EXCEEDED = "time budget exceeded"
# Fallback reasons besides the refusals of joined.py
EVALUATION_FAILED = "evaluation-failed"
UNEXPECTED_VALUE = "unexpected-value"
# Requests' kinds whose applicability a Phase remembers (a few dozen are seen in practice)
_APPLICABILITY_KEPT = 256


class Exemption(Protocol):
    def exempts(self, policy: str, workload: Workload, namespace: str | None, now: datetime) -> str | None:
        """The justification when this exception exempts `workload` from `policy` now."""


class Fallbacks:
    """How many policies the generic path evaluated in place of the phase's program, by
    (phase, reason): a refusal of joined.py, EVALUATION_FAILED or UNEXPECTED_VALUE."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._observer: Callable[[str, str], None] | None = None

    def observe(self, observer: Callable[[str, str], None]) -> None:
        """Tell `observer(phase, reason)` of every fallback from now on (the server's metric);
        observing again replaces it, so an engine installed twice is not counted twice."""
        self._observer = observer

    def add(self, phase: str, reason: str) -> None:
        with self._lock:
            self._counts[phase, reason] = self._counts.get((phase, reason), 0) + 1
        if self._observer is not None:
            self._observer(phase, reason)

    def counts(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


def applicability(
    cp: CompiledPolicy, workload: Workload, operation: str, namespace: str | None, *, mutating: bool
) -> PolicyResult | None:
    """The result of a policy that does not apply to this request, None when it applies: the one
    place that decides it, for both strategies."""
    reason = match.skip_reason(cp.policy.match, workload, operation, namespace)
    if (
        reason is None
        and mutating
        and workload.kueue_managed
        and cp.policy.match.kueue_managed_pods == "Exclude"
    ):
        reason = "pod managed by Kueue: never relabelled"  # Kueue's pod webhook refuses label changes
    return None if reason is None else PolicyResult(cp.name, "skip", (reason,))


class Phase:
    """One phase of an Engine: its policies, their program, the exceptions, the counts."""

    def __init__(
        self,
        name: str,
        policies: Sequence[CompiledPolicy],
        program: Joined,
        exceptions: Sequence[Exemption],
        fallbacks: Fallbacks,
    ) -> None:
        self.name = name
        self.mutating = name == "mutating"
        self.policies = tuple(policies)
        self._program = program.program
        self._items = program.items
        self._refusals = program.refusals
        self._exceptions = tuple(exceptions)
        self._fallbacks = fallbacks
        self._applicable: dict[tuple[Any, ...], tuple[tuple[PolicyResult | None, ...], list[bool]]] = {}

    def evaluate(
        self,
        workload: Workload,
        operation: str,
        namespace: str | None,
        now: datetime,
        bindings: Bindings,
        patcher: Patcher | None,
        *,
        deadline: float | None = None,
        yield_at: float | None = None,
        timings: dict[str, float] | None = None,
    ) -> list[tuple[Policy, PolicyResult]]:
        """Each policy's result (a mutating phase applies the edits to `patcher`). `timings`,
        when given, receives each applicable policy's evaluation seconds."""
        _yield_if_due(yield_at)
        skips, selected = self._applicability(workload, operation, namespace)
        values: Sequence[Any] = ()  # the program's value of each policy, where it was evaluated
        failed = False
        past = deadline is not None and monotonic() >= deadline
        if not past and self._program is not None and any(selected):
            if timings is None:
                values, failed = self._together(bindings, selected)
            else:
                values = self._one_by_one(bindings, selected, timings)
            # not evaluated in time: every policy's value is late, whatever the program gave
            past = deadline is not None and monotonic() >= deadline
        exempt = self._exempt(workload, namespace, now, skips) if self._exceptions else None
        out: list[tuple[Policy, PolicyResult]] = []
        for i, cp in enumerate(self.policies):
            if yield_at is not None:
                _yield_if_due(yield_at)
            result = skips[i]
            if result is None:
                if past:
                    result = PolicyResult(cp.name, "error", (BUDGET_EXCEEDED,))
                else:
                    result = self._result(
                        cp,
                        values[i] if values else None,
                        self._refusals[i] or (EVALUATION_FAILED if failed else None),
                        bindings,
                        patcher,
                        exempt[i] if exempt else None,
                        deadline,
                        timings,
                    )
            out.append((cp.policy, result))
        return out

    def _applicability(
        self, workload: Workload, operation: str, namespace: str | None
    ) -> tuple[tuple[PolicyResult | None, ...], list[bool]]:
        """Each policy's skip result (None where it applies) and which are selected in the phase's
        program; remembered by what decides them, the same for most requests."""
        w = workload
        key = (
            operation, namespace, bool(w.member), w.role, w.klass, w.tier, w.kind, w.api_version,
            self.mutating and w.kueue_managed,
        )  # fmt: skip
        known = self._applicable.get(key)
        if known is None:
            skips = tuple(
                applicability(cp, w, operation, namespace, mutating=self.mutating) for cp in self.policies
            )
            selected = [
                skip is None and refusal is None for skip, refusal in zip(skips, self._refusals, strict=True)
            ]
            known = skips, selected
            if len(self._applicable) >= _APPLICABILITY_KEPT:
                self._applicable.clear()
            self._applicable[key] = known
        return known

    def _together(self, bindings: Bindings, selected: list[bool]) -> tuple[Sequence[Any], bool]:
        """The program's value for every selected policy in one evaluation; ((), True) when it
        fails on this request."""
        assert self._program is not None
        bindings.data[SELECTED] = selected
        try:
            values = self._program.evaluate(bindings.activation())
        except CelEvalError:  # some selected policy fails: the generic path says which
            return (), True
        if type(values) is not list or len(values) != len(self.policies):
            return (), True
        return values, False

    def _one_by_one(self, bindings: Bindings, selected: list[bool], timings: dict[str, float]) -> list[Any]:
        """As _together, each selected policy's item evaluated alone (Joined.items), timed; a
        policy whose item fails gets the value None (the generic path then evaluates it)."""
        bindings.data[SELECTED] = selected
        activation = bindings.activation()
        values: list[Any] = [None] * len(self.policies)
        for i, (cp, item) in enumerate(zip(self.policies, self._items, strict=True)):
            if not selected[i] or item is None:
                continue
            start = perf_counter()
            try:
                items = item.evaluate(activation)
                values[i] = items[i] if type(items) is list and len(items) == i + 1 else None
            except CelEvalError:
                values[i] = None
            finally:
                timings[cp.name] = perf_counter() - start
        return values

    def _exempt(
        self, workload: Workload, namespace: str | None, now: datetime, skips: Sequence[PolicyResult | None]
    ) -> list[str | None]:
        """Each applicable policy's exemption justification, None where no exception exempts it."""
        out: list[str | None] = []
        for cp, skip in zip(self.policies, skips, strict=True):
            justification = None
            if skip is None:
                for exception in self._exceptions:
                    justification = exception.exempts(cp.name, workload, namespace, now)
                    if justification is not None:
                        break
            out.append(justification)
        return out

    def _result(
        self,
        cp: CompiledPolicy,
        value: Any,
        reason: str | None,
        bindings: Bindings,
        patcher: Patcher | None,
        exemption: str | None,
        deadline: float | None,
        timings: dict[str, float] | None,
    ) -> PolicyResult:
        """An applicable policy's result: from its value in the program, else (`reason`, or a
        value of another shape) from the generic path, counted."""
        target = patcher if patcher is None or exemption is None else Patcher(patcher.doc)
        result = None
        if reason is None and value is not None:
            result = self._from_value(cp, value, target)
            if result is None:
                reason = UNEXPECTED_VALUE
        if result is None:
            if deadline is not None and monotonic() >= deadline:  # the policies before took it all
                return PolicyResult(cp.name, "error", (BUDGET_EXCEEDED,))
            self._fallbacks.add(self.name, reason or EVALUATION_FAILED)
            start = perf_counter()
            result = (
                evaluate.validate(cp, bindings) if target is None else evaluate.mutate(cp, bindings, target)
            )
            if timings is not None:
                timings[cp.name] = timings.get(cp.name, 0.0) + perf_counter() - start
        if exemption is not None:
            return PolicyResult(cp.name, "exempt", result.messages, result.fields, (), exemption)
        return result

    def _from_value(self, cp: CompiledPolicy, value: Any, patcher: Patcher | None) -> PolicyResult | None:
        if patcher is None:
            verdicts = _values_of(value, len(cp.validations))
            return None if verdicts is None else _validation_result(cp, verdicts)
        edits = _values_of(value, len(cp.mutations))
        if edits is None:
            return None
        return evaluate.apply_edits(cp, edits, patcher) if edits else cp.unmet


def _yield_if_due(yield_at: float | None) -> None:
    if yield_at is not None and monotonic() >= yield_at:
        raise Deferred("the time allowed to decide here ran out")


def _values_of(result: Any, count: int) -> list[Any] | None:
    """An item's values: [] when a condition is false, else one value per validation or mutation
    (`count` of them, at least one: a policy without any would be its conditions' [] too); None
    for a value of any other shape."""
    if type(result) is not list or (result and len(result) != count) or not count:
        return None
    return result


def _validation_result(cp: CompiledPolicy, verdicts: list[Any]) -> PolicyResult | None:
    """The PolicyResult of a validating policy's values (_values_of): what the generic path
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

"""The CEL variables of one request, each trimmed to what one phase's policies read.

Converting a Python value into the runtime's form costs on every request, so each phase hands
CEL only the paths its policies name (engine/reads.py finds them from the sources): `object` and
`oldObject` trimmed, `workload` rendered with just those paths (the workloads package's viewer),
`params` and `cluster` trimmed and converted once per Engine. What the policies read is derived
from the policy set alone, so it is made once per set (ReadPlan) and kept on it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from webhook.engine import reads
from webhook.engine.cel import Backend
from webhook.engine.compile import CompiledPolicy, PolicySet
from webhook.workloads import Workload, workload_viewer

# `request` is handed whole; what is read of it tells whether a decision sees the object's name (ahead.py)
_READ_VARIABLES = ("object", "oldObject", "workload", "oldWorkload", "params", "cluster", "request")


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


def policy_sources(policies: Sequence[CompiledPolicy]) -> list[reads.PolicySources]:
    """Every CEL source of the policies, each policy's variables apart: what engine/reads.py reads
    the variables' paths from."""
    out: list[reads.PolicySources] = []
    for cp in policies:
        p = cp.policy
        expressions = [m.expression.source for m in p.match_conditions]
        for v in p.validations:
            expressions.append(v.expression.source)
            expressions += [e.source for e in (v.message_expression, v.field_expression) if e is not None]
        expressions += [m.patch_expression.source for m in p.mutations]
        out.append(reads.PolicySources([(v.name, v.expression.source) for v in p.variables], expressions))
    return out


class ReadPlan:
    """What one phase's policies read of each CEL variable, and the functions that render the
    workload views with just those paths: derived from the policies alone (plan_for)."""

    __slots__ = ("tree", "viewers")

    def __init__(self, policies: Sequence[CompiledPolicy]) -> None:
        self.tree = reads.policy_reads(policy_sources(policies), _READ_VARIABLES)
        self.viewers = {
            variable: workload_viewer(self.tree.get(variable) or {})
            for variable in ("workload", "oldWorkload")
        }


def plan_for(policies: PolicySet, phase: str) -> ReadPlan:
    """The phase's ReadPlan, kept on the set (PolicySet.read_plans): reading the sources and
    generating the views takes about 10 ms, and an Engine is built on the event loop on every
    cluster or eviction change."""
    plan = policies.read_plans.get(phase)
    if not isinstance(plan, ReadPlan):  # two threads may both make it: the same plan either way
        members = policies.mutating if phase == "mutating" else policies.validating
        plan = policies.read_plans[phase] = ReadPlan(members)
    return plan


class PhaseReads:
    """A phase's ReadPlan, with the values that do not change between requests (params,
    cluster) trimmed to what it reads and converted once."""

    __slots__ = ("tree", "_viewers", "constants")

    def __init__(self, plan: ReadPlan, backend: Backend, params: Any, cluster: Mapping[str, Any]) -> None:
        self.tree = plan.tree
        self._viewers = plan.viewers
        self.constants = backend.prepare(
            {"params": self.trimmed("params", params), "cluster": self.trimmed("cluster", cluster)}
        )

    def trimmed(self, variable: str, value: Any) -> Any:
        """`value` as CEL sees it: None when no policy reads the variable, else the paths read."""
        tree = self.tree.get(variable)
        return None if tree is None or value is None else reads.trim(value, tree)

    def view(self, workload: Workload | None, variable: str) -> Any:
        if workload is None or variable not in self.tree:
            return None
        return self._viewers[variable](workload)

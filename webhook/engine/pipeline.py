"""Engine.review(): adapt -> match -> mutate -> re-adapt -> validate -> decide, one screen long.

The webhook, the CLI and the review gate all call this; nothing here knows about HTTP or files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from time import perf_counter
from typing import Any, Protocol

from webhook.config import PlatformConfig
from webhook.context import eviction_key
from webhook.engine import decide, evaluate, match
from webhook.engine.compile import PolicySet
from webhook.engine.model import Decision, Policy, PolicyResult
from webhook.engine.mutate import Patcher
from webhook.nodelevel import node_level_reason
from webhook.workloads import AdaptContext, build_workload
from webhook.workloads.common import POD_GROUP_NAME
from webhook.workloads.model import Workload


class Exemption(Protocol):
    def exempts(self, policy: str, workload: Workload, namespace: str | None, now: datetime) -> str | None:
        """The justification when this exception exempts `workload` from `policy` now."""


@dataclass(frozen=True, slots=True)
class AdmissionInput:
    """One object to decide, as the API server (or a manifest file) presents it."""

    object: dict[str, Any]
    operation: str = "CREATE"
    old_object: dict[str, Any] | None = None
    namespace: str | None = None
    user_info: Mapping[str, Any] = field(default_factory=dict)
    dry_run: bool = False
    # TrainingRuntimes, PriorityClasses … seen beside the object (CLI) or in the cluster (webhook)
    runtimes: Mapping[tuple[str | None, str], dict[str, Any]] = field(default_factory=dict)


class Engine:
    def __init__(
        self,
        policies: PolicySet,
        config: PlatformConfig,
        *,
        priority_classes: Mapping[str, int] | None = None,
        runtimes: Mapping[tuple[str | None, str], dict[str, Any]] | None = None,
        exceptions: Sequence[Exemption] = (),
        cluster: Mapping[str, Any] | None = None,
    ) -> None:
        self.policies = policies
        self.config = config
        self.priority_classes = dict(priority_classes or {})
        # What `cluster.priorityClasses` shows policies: the config's fallback values, overridden
        # by what the cluster says. Fixed for the engine's life, so built once, not per request.
        self.priority_values = {**(config.raw["tiers"].get("values") or {}), **self.priority_classes}
        # The `cluster` variable: other cluster facts beside the priority values. `evictions` (what
        # the resume gate reads) is always present, so policies need no has() guards, and is cut
        # per request to the records of the workload at hand: converting every record of the
        # cluster into CEL on every admission would cost milliseconds per thousand records.
        self.cluster = {**(cluster or {}), "evictions": {}, "priorityClasses": self.priority_values}
        self.evictions: Mapping[str, Any] = (cluster or {}).get("evictions") or {}
        self.runtimes = dict(runtimes or {})
        self.exceptions = tuple(exceptions)
        evaluate.prepare(policies.policies, policies.backend)  # compiled now, not on a first request
        self._mutating = policies.mutating  # PolicySet builds these tuples on every access
        self._validating = policies.validating

    def review(
        self,
        inp: AdmissionInput,
        *,
        mutate: bool = True,
        validate: bool = True,
        now: datetime | None = None,
        timings: dict[str, float] | None = None,
    ) -> Decision:
        """Decide one object. `timings`, when given, receives each policy's evaluation seconds."""
        obj = inp.object
        meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
        namespace = meta.get("namespace") or inp.namespace
        if inp.operation not in ("CREATE", "UPDATE"):
            return Decision(True, mutated=obj, skipped_reason=f"operation {inp.operation} is always allowed")
        if namespace in self.config.excluded_namespaces:
            return Decision(True, mutated=obj, skipped_reason=f"namespace {namespace} is excluded")
        if reason := _node_level(inp):
            # The webhook configurations never send these Pods (matchCondition not-node-level).
            return Decision(True, mutated=obj, skipped_reason=reason)
        ctx = AdaptContext(
            config=self.config,
            runtimes={**self.runtimes, **inp.runtimes},
            priority_classes=self.priority_classes,
            namespace=namespace,
        )
        workload = build_workload(obj, ctx)
        if workload is None:
            return Decision(True, mutated=obj, skipped_reason="not a workload trainguard decides")
        old_workload = build_workload(inp.old_object, ctx) if inp.old_object else None
        base = {
            "oldObject": inp.old_object,
            "oldWorkload": old_workload.view() if old_workload else None,
            "request": {
                "operation": inp.operation,
                "namespace": namespace,
                "name": meta.get("name"),
                "userInfo": dict(inp.user_info),
                "dryRun": inp.dry_run,
            },
            "params": self.config.params(),
            "cluster": self._cluster_for(workload, namespace),
            "variables": {},
        }
        evaluated: list[tuple[Policy, PolicyResult]] = []
        now = now or datetime.now(UTC)
        run = self._run if timings is None else self._timed(timings)

        patcher = Patcher(obj)
        if mutate:
            bindings = evaluate.Bindings(
                self.policies.backend, {**base, "object": obj, "workload": workload.view()}
            )
            for cp in self._mutating:
                result = run(cp, workload, inp.operation, namespace, now, bindings, patcher)
                evaluated.append((cp.policy, result))
            if patcher.ops and validate:
                # Validation sees the mutated object. Without validation (the /mutate endpoint)
                # nothing reads the re-adapted workload, so it is not built: the Decision then
                # carries the workload the mutations saw.
                workload = build_workload(patcher.doc, ctx) or workload

        if validate:
            bindings = evaluate.Bindings(
                self.policies.backend, {**base, "object": patcher.doc, "workload": workload.view()}
            )
            for cp in self._validating:
                result = run(cp, workload, inp.operation, namespace, now, bindings, None)
                evaluated.append((cp.policy, result))

        decision = Decision(True, patch=patcher.ops, workload=workload, mutated=patcher.doc)
        return decide.decide(decision, evaluated)

    def _cluster_for(self, workload: Workload, namespace: str | None) -> dict[str, Any]:
        """`cluster`, with `evictions` holding only the records under this workload's names."""
        if not self.evictions:
            return self.cluster
        found = {
            k: self.evictions[k] for k in eviction_candidates(workload, namespace) if k in self.evictions
        }
        return {**self.cluster, "evictions": found} if found else self.cluster

    def _timed(self, timings: dict[str, float]) -> Callable[..., PolicyResult]:
        """`_run`, recording each policy's perf_counter seconds (the webhook samples 1 in N requests)."""

        def run(cp: Any, *args: Any) -> PolicyResult:
            start = perf_counter()
            try:
                return self._run(cp, *args)
            finally:
                timings[cp.name] = perf_counter() - start

        return run

    def _run(
        self,
        cp: Any,
        workload: Workload,
        operation: str,
        namespace: str | None,
        now: datetime,
        bindings: evaluate.Bindings,
        patcher: Patcher | None,
    ) -> PolicyResult:
        reason = match.skip_reason(cp.policy.match, workload, operation, namespace)
        if reason is not None:
            return PolicyResult(cp.name, "skip", (reason,))
        if patcher is not None and workload.kueue_managed and cp.policy.match.kueue_managed_pods == "Exclude":
            # Kueue's pod webhook rejects label changes on the pods it manages.
            return PolicyResult(cp.name, "skip", ("pod managed by Kueue: never relabelled",))
        for exception in self.exceptions:
            justification = exception.exempts(cp.name, workload, namespace, now)
            if justification is not None:
                result = (
                    evaluate.mutate(cp, bindings, Patcher(patcher.doc))
                    if patcher
                    else evaluate.validate(cp, bindings)
                )
                return PolicyResult(cp.name, "exempt", result.messages, result.fields, (), justification)
        if patcher is not None:
            return evaluate.mutate(cp, bindings, patcher)
        return evaluate.validate(cp, bindings)


def eviction_candidates(workload: Workload, namespace: str | None) -> list[str]:
    """The names a workload's evictions may be recorded under (webhook.context.eviction_key): its
    owner (the job Kueue made the Workload for), its Kueue pod group's Workload, the object itself.
    The resume policies compute the same keys in CEL; this only decides which records they see."""
    ns = workload.namespace or namespace
    keys = []
    if workload.owner is not None:
        keys.append(eviction_key(ns, workload.owner.kind, workload.owner.name))
    group = workload.annotations.get(POD_GROUP_NAME) or workload.labels.get(POD_GROUP_NAME)
    if group:
        keys.append(eviction_key(ns, "Workload", group))
    keys.append(eviction_key(ns, workload.kind, workload.name))
    return keys


def _node_level(inp: AdmissionInput) -> str | None:
    """Why a Pod is node-level, as the not-node-level matchCondition sees it (on UPDATE: old and new)."""
    if inp.object.get("kind") != "Pod" or inp.object.get("apiVersion") != "v1":
        return None
    reason = node_level_reason(inp.object)
    if reason and inp.operation == "UPDATE" and inp.old_object and node_level_reason(inp.old_object) is None:
        return None
    return reason

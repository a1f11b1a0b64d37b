"""Engine.decide(): adapt -> match -> mutate -> re-adapt -> validate -> decide.

decide() reads as that sequence, each step a method named for it: why an object is not decided
at all (_not_decided), what adapting reads beside the object (_adapt_context), adapting it, from
the webhook's store of adaptations on a validating call (_adapt, adaptations.py), with the
decision made ahead for that call when there is one it may use (_use_ahead, ahead.py), each
phase's policies (_evaluate: the mutating ones, then the validating ones), and the mutated object
adapted again or left, with its validating decision made ahead, for the validating call
(_readapt, _ahead). Each phase is evaluated by phase.py, with the
CEL variables trimmed to what that phase's policies read (bindings.py); decide.py turns the
results into the Decision. The webhook, the CLI and the review gate all call this; nothing here
knows about HTTP or files.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from webhook.accelerators import AcceleratorTest, accelerators_of
from webhook.config import PlatformConfig
from webhook.context import Runtimes, eviction_key
from webhook.engine import decide
from webhook.engine.adaptations import Adaptations, AheadMaker, facts_digest
from webhook.engine.ahead import Ahead, Conditions, request_key
from webhook.engine.bindings import Bindings, PhaseReads, plan_for
from webhook.engine.compile import PolicySet
from webhook.engine.model import Decision, Policy, PolicyResult
from webhook.engine.mutate import Patcher
from webhook.engine.phase import Exemption, Fallbacks, Phase
from webhook.nodelevel import node_level_reason
from webhook.workloads import POD_GROUP_NAME, AdaptContext, Workload, build_workload


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
    runtimes: Runtimes = field(default_factory=dict)
    # A time.monotonic() instant. Policies not yet evaluated when it passes take their
    # failurePolicy outcome, so a slow policy cannot hold the API server past its webhook timeout.
    deadline: float | None = None
    # A time.monotonic() instant past which the caller would rather decide elsewhere: decide()
    # raises Deferred when it passes (checked between steps), or when reading the launch lines
    # takes more than INLINE_LAUNCH_STEPS. What it returns before that is the same decision.
    yield_at: float | None = None


# Launch-line steps a yielding decision (AdmissionInput.yield_at) reads before Deferred: about 13 ms
# at the slowest rate measured (torchrun.limits), far above what real workloads take (thousands).
INLINE_LAUNCH_STEPS = 16_384


class Engine:
    def __init__(
        self,
        policies: PolicySet,
        config: PlatformConfig,
        *,
        priority_classes: Mapping[str, int] | None = None,
        runtimes: Runtimes | None = None,
        exceptions: Sequence[Exemption] = (),
        cluster: Mapping[str, Any] | None = None,
        adaptations: Adaptations | None = None,
    ) -> None:
        """`adaptations`: where a mutating call (mutate without validate) leaves the adaptation of
        the object it answers, and a validating call (validate without mutate) looks for it: the
        webhook's, shared by the engines it rebuilds. None, the default, keeps none: a CLI run
        decides each object in one call."""
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
        self._adaptations = adaptations if adaptations is not None and adaptations.enabled else None
        self._facts = b""  # what the adaptations' keys hold of this engine's facts
        if self._adaptations is not None:
            self._facts = facts_digest(config, self.runtimes, self.priority_classes)
        # How many policies the generic path evaluated in place of a phase's one program, by
        # phase and reason (phase.Fallbacks)
        self.fallbacks = Fallbacks()
        self._mutating = Phase(
            "mutating", policies.mutating, policies.mutating_joined, self.exceptions, self.fallbacks
        )
        self._validating = Phase(
            "validating", policies.validating, policies.validating_joined, self.exceptions, self.fallbacks
        )
        # Only what the policies read is handed to CEL (bindings.py), per phase: the webhook's
        # /mutate and /validate calls each build and convert just what their own policies read.
        params = config.params()
        self._mutation = PhaseReads(plan_for(policies, "mutating"), policies.backend, params, self.cluster)
        self._validation = PhaseReads(
            plan_for(policies, "validating"), policies.backend, params, self.cluster
        )
        self._reads_old_workload = (
            "oldWorkload" in self._mutation.tree or "oldWorkload" in self._validation.tree
        )
        # When validating decisions may be made ahead (ahead.py), and whose they are
        self._ahead = Conditions.of(self._validation.tree, self.exceptions, evictions=bool(self.evictions))
        self._token = object()

    def settle(self) -> None:
        """Adapt what mutating calls left for their validating calls (Adaptations.settle): the
        server calls this once a mutating call is answered."""
        if self._adaptations is not None:
            self._adaptations.settle()

    @property
    def steps_bounded(self) -> bool:
        """Whether every step of a decision is bounded, so that one with a `yield_at` gives way
        promptly: launch lines are metered, and the CEL runtime bounds each evaluation."""
        return self.policies.backend.bounded

    def decide(
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
        if reason := self._not_decided(inp, namespace):
            return Decision(True, mutated=obj, skipped_reason=reason)
        ctx = self._adapt_context(inp, namespace, mutate=mutate, validate=validate)
        # A call that brings its own runtimes neither leaves nor finds adaptations.
        kept = self._adaptations if not inp.runtimes else None
        found = None if mutate else kept
        # A call that times its policies (`timings`) evaluates them, rather than take a decision
        # made ahead untimed: the metric of each policy's time is sampled on validating calls too.
        wanted = None
        if found is not None and timings is None:
            wanted = request_key(inp.operation, namespace, inp.user_info, inp.dry_run)
        workload, ahead = self._adapt(obj, ctx, found, wanted)
        if workload is None:
            return Decision(True, mutated=obj, skipped_reason="not a workload trainguard decides")
        if ahead is not None and (made := self._use_ahead(ahead, inp, workload, now)):
            return made
        old_workload = self._adapt_old(inp, ctx)
        request = _request(inp, namespace, meta)
        when = _when(inp, now, timings)
        evaluated: list[tuple[Policy, PolicyResult]] = []
        patcher = Patcher(obj)
        if mutate:
            evaluated += self._evaluate(self._mutating, patcher, inp, workload, old_workload, request, when)
            workload = self._readapt(patcher, ctx, workload, inp, validate=validate, kept=kept)
        if validate:
            evaluated += self._evaluate(self._validating, patcher, inp, workload, old_workload, request, when)
        decision = Decision(True, patch=patcher.ops, workload=workload, mutated=patcher.doc)
        return decide.decide(decision, evaluated)

    def _not_decided(self, inp: AdmissionInput, namespace: str | None) -> str | None:
        """Why the object is allowed as it is, before anything is adapted; None when it is decided."""
        if inp.operation not in ("CREATE", "UPDATE"):
            return f"operation {inp.operation} is always allowed"
        if namespace in self.config.excluded_namespaces:
            return f"namespace {namespace} is excluded"
        # The webhook configurations never send node-level Pods (matchCondition not-node-level).
        return _node_level(inp, accelerators_of(self.config))

    def _adapt_context(
        self, inp: AdmissionInput, namespace: str | None, *, mutate: bool, validate: bool
    ) -> AdaptContext:
        """What adapting the object (and its old version, and the mutated object) reads beside it."""
        return AdaptContext(
            config=self.config,
            runtimes={**self.runtimes, **inp.runtimes} if inp.runtimes else self.runtimes,
            priority_classes=self.priority_classes,
            namespace=namespace,
            launch_allowance=INLINE_LAUNCH_STEPS if inp.yield_at is not None else None,
            # The mutated object is adapted again, for the validation here or the validating call
            # (_readapt), reusing the containers the mutations left alone.
            containers={} if mutate and (validate or self._adaptations is not None) else None,
        )

    def _adapt(
        self, obj: dict[str, Any], ctx: AdaptContext, kept: Adaptations | None, wanted: tuple[Any, ...] | None
    ) -> tuple[Workload | None, Ahead | None]:
        """The object's workload (None when it is not one trainguard decides), and a decision
        made ahead for it and the request `wanted` (ahead.request_key; None: take none). `kept`:
        the store a validating call (validate without mutate) takes what its mutating call left
        from."""
        if kept is not None:
            return kept.take(obj, ctx, self._facts, wanted)
        return build_workload(obj, ctx), None

    def _use_ahead(
        self, ahead: Ahead, inp: AdmissionInput, workload: Workload, now: datetime | None
    ) -> Decision | None:
        """The decision made ahead for this validating call (made for its request: the store
        hands out no other), when it is the one the call would make now (ahead.Conditions);
        None otherwise."""
        name = inp.object["metadata"].get("name")
        if not self._ahead.usable(ahead, self._token, name, now or datetime.now(UTC)):
            return None
        # The call's own object and name (Adaptations.take gave the workload this call's name)
        return dataclasses.replace(ahead.decision, workload=workload, mutated=inp.object, made_ahead=True)

    def _adapt_old(self, inp: AdmissionInput, ctx: AdaptContext) -> Workload | None:
        """The old object's workload (UPDATE), adapted only when some policy reads `oldWorkload`."""
        return build_workload(inp.old_object, ctx) if inp.old_object and self._reads_old_workload else None

    def _evaluate(
        self,
        phase: Phase,
        patcher: Patcher,
        inp: AdmissionInput,
        workload: Workload,
        old_workload: Workload | None,
        request: dict[str, Any],
        when: dict[str, Any],
    ) -> list[tuple[Policy, PolicyResult]]:
        """One phase's results on the object as `patcher` holds it (the mutating phase edits it)."""
        mutating = phase is self._mutating
        reads = self._mutation if mutating else self._validation
        bindings = self._bindings(reads, patcher.doc, workload, inp.old_object, old_workload, request)
        edits = patcher if mutating else None
        return phase.evaluate(
            workload, inp.operation, request["namespace"], bindings=bindings, patcher=edits, **when
        )

    def _readapt(
        self,
        patcher: Patcher,
        ctx: AdaptContext,
        workload: Workload,
        inp: AdmissionInput,
        *,
        validate: bool,
        kept: Adaptations | None,
    ) -> Workload:
        """The workload validation sees once the mutating phase has edited the object; on a
        mutating call (no validation here), the edited object is left in `kept` for the validating
        call that brings it back."""
        if patcher.ops and validate:
            # Validation sees the mutated object. Without validation (the /mutate endpoint)
            # nothing reads the re-adapted workload, so it is not built: the Decision then
            # carries the workload the mutations saw. Containers the mutations left alone
            # are not read again (ctx.containers).
            return build_workload(patcher.doc, ctx) or workload
        if kept is not None and not validate:
            # The validating call brings the patched object back (adaptations.py). An inline
            # call leaves its adaptation, and its decision made ahead, to settle(), after its
            # answer is sent.
            ahead = self._ahead_maker(inp, patcher.doc, ctx.namespace)
            kept.leave(patcher.doc, ctx, self._facts, None if patcher.ops else workload, ahead)
            if inp.yield_at is None:
                kept.settle()
        return workload

    def _ahead_maker(
        self, inp: AdmissionInput, obj: dict[str, Any], namespace: str | None
    ) -> AheadMaker | None:
        """What decides the mutated `obj` as its validating call will (ahead.py), when that is allowed."""
        if not self._ahead.made or inp.operation != "CREATE":
            return None
        meta: dict[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), dict) else {}
        request = _request(inp, namespace, meta)
        key = request_key(inp.operation, namespace, inp.user_info, inp.dry_run)

        def make(workload: Workload, give_up_at: float) -> Ahead:
            now = datetime.now(UTC)
            validating = dataclasses.replace(inp, object=obj, deadline=None, yield_at=give_up_at)
            when = _when(validating, now, None)
            evaluated = self._evaluate(
                self._validating, Patcher(obj), validating, workload, None, request, when
            )
            decision = decide.decide(Decision(True, workload=workload, mutated=obj), evaluated)
            return Ahead(self._token, key, meta.get("name"), now, decision)

        return make

    def _bindings(
        self,
        phase: PhaseReads,
        obj: dict[str, Any],
        workload: Workload,
        old_object: dict[str, Any] | None,
        old_workload: Workload | None,
        request: dict[str, Any],
    ) -> Bindings:
        """One phase's CEL variables: each trimmed to what that phase's policies read."""
        data = {
            "object": phase.trimmed("object", obj),
            "oldObject": phase.trimmed("oldObject", old_object),
            "workload": phase.view(workload, "workload"),
            "oldWorkload": phase.view(old_workload, "oldWorkload"),
            "request": request,
            "variables": {},
        }
        cluster = self._cluster_for(phase, workload, request["namespace"])
        if cluster is not None:  # overrides the prepared constant for this request only
            data["cluster"] = cluster
        return Bindings(self.policies.backend, data, phase.constants)

    def _cluster_for(self, phase: PhaseReads, workload: Workload, namespace: str | None) -> Any:
        """`cluster` with `evictions` holding the records under this workload's names; None when
        there are none (the prepared constant, with no records, serves)."""
        if not self.evictions or "cluster" not in phase.tree:
            return None
        found = {
            k: self.evictions[k] for k in eviction_candidates(workload, namespace) if k in self.evictions
        }
        return phase.trimmed("cluster", {**self.cluster, "evictions": found}) if found else None


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


def _request(inp: AdmissionInput, namespace: str | None, meta: dict[str, Any]) -> dict[str, Any]:
    """What CEL's `request` variable holds of the admission request."""
    return {
        "operation": inp.operation,
        "namespace": namespace,
        "name": meta.get("name"),
        "userInfo": dict(inp.user_info),
        "dryRun": inp.dry_run,
    }


def _when(inp: AdmissionInput, now: datetime | None, timings: dict[str, float] | None) -> dict[str, Any]:
    """Phase.evaluate's arguments that every phase of one decision shares."""
    return {
        "now": now or datetime.now(UTC),
        "deadline": inp.deadline,
        "yield_at": inp.yield_at,
        "timings": timings,
    }


def _node_level(inp: AdmissionInput, accelerators: AcceleratorTest) -> str | None:
    """Why a Pod is node-level, as the not-node-level matchCondition sees it (on UPDATE: old and new)."""
    if inp.object.get("kind") != "Pod" or inp.object.get("apiVersion") != "v1":
        return None
    reason = node_level_reason(inp.object, accelerators)
    if (
        reason
        and inp.operation == "UPDATE"
        and inp.old_object
        and node_level_reason(inp.old_object, accelerators) is None
    ):
        return None
    return reason

"""Engine.review(): adapt -> match -> mutate -> re-adapt -> validate -> decide.

review() reads as that sequence; the rest of the module is how one phase is evaluated: all of its
policies by the phase's joined program where it can (_together), else each policy on its own
(_run), with the skips remembered by what decides them (_skipped) and only the values the
policies read handed to CEL (_Reads). The webhook, the CLI and the review gate all call this;
nothing here knows about HTTP or files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from time import monotonic, perf_counter
from typing import Any, Protocol

from webhook.accelerators import AcceleratorTest, accelerators_of
from webhook.config import PlatformConfig
from webhook.context import Runtimes, eviction_key
from webhook.engine import decide, evaluate, match, reads
from webhook.engine.adaptations import Adaptations, facts_digest
from webhook.engine.cel import SELECTED, Program
from webhook.engine.compile import CompiledPolicy, PolicySet, phase_source
from webhook.engine.model import Decision, Policy, PolicyResult
from webhook.engine.mutate import Patcher
from webhook.nodelevel import node_level_reason
from webhook.workloads import AdaptContext, Deferred, build_workload
from webhook.workloads.draft import POD_GROUP_NAME
from webhook.workloads.model import Workload, compiled_viewer


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
    runtimes: Runtimes = field(default_factory=dict)
    # A time.monotonic() instant. Policies not yet evaluated when it passes take their
    # failurePolicy outcome, so a slow policy cannot hold the API server past its webhook timeout.
    deadline: float | None = None
    # A time.monotonic() instant past which the caller would rather decide elsewhere: review()
    # raises Deferred when it passes (checked between steps), or when reading the launch lines
    # takes more than INLINE_LAUNCH_STEPS. What it returns before that is the same decision.
    yield_at: float | None = None


BUDGET_EXCEEDED = "time budget exceeded"
# Kinds of request whose skipped policies an Engine remembers (a few dozen are seen in practice)
_SKIPS_KEPT = 256
# Launch-line steps a yielding review (AdmissionInput.yield_at) reads before Deferred: about 13 ms
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
        self._mutating = policies.mutating  # PolicySet builds these tuples on every access
        self._validating = policies.validating
        # _skipped(): each phase's skipped policies by what decides them (kind, role, tier …)
        self._skips: dict[tuple[Any, ...], tuple[tuple[PolicyResult | None, ...], list[bool]]] = {}
        # Which policies the phase's one program evaluates (the others' items are always [])
        self._joined = (
            tuple(phase_source(cp, mutating=False) is not None for cp in self._validating),
            tuple(phase_source(cp, mutating=True) is not None for cp in self._mutating),
        )
        # Only what the policies read is handed to CEL (engine/reads.py), per phase: the webhook's
        # /mutate and /validate calls each build and convert just what their own policies read.
        params = config.params()
        self._mutation = _Reads(_plan(policies, "mutating"), policies.backend, params, self.cluster)
        self._validation = _Reads(_plan(policies, "validating"), policies.backend, params, self.cluster)
        self._reads_old_workload = (
            "oldWorkload" in self._mutation.tree or "oldWorkload" in self._validation.tree
        )

    def settle(self) -> None:
        """Adapt what mutating calls left for their validating calls (Adaptations.settle): the
        server calls this once a mutating call is answered."""
        if self._adaptations is not None:
            self._adaptations.settle()

    @property
    def steps_bounded(self) -> bool:
        """Whether every step of a review is bounded, so that one with a `yield_at` gives way
        promptly: launch lines are metered, and the CEL runtime bounds each evaluation."""
        return self.policies.backend.bounded

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
        if reason := _node_level(inp, accelerators_of(self.config)):
            # The webhook configurations never send these Pods (matchCondition not-node-level).
            return Decision(True, mutated=obj, skipped_reason=reason)
        ctx = AdaptContext(
            config=self.config,
            runtimes={**self.runtimes, **inp.runtimes} if inp.runtimes else self.runtimes,
            priority_classes=self.priority_classes,
            namespace=namespace,
            launch_allowance=INLINE_LAUNCH_STEPS if inp.yield_at is not None else None,
            # The mutated object is adapted again, for the validation here or the validating call
            # (see below), reusing the containers the mutations left alone.
            containers={} if mutate and (validate or self._adaptations is not None) else None,
        )
        # A call that brings its own runtimes neither leaves nor finds adaptations.
        kept = self._adaptations if not inp.runtimes else None
        if kept is not None and not mutate:
            workload = kept.adapt(obj, ctx, self._facts)
        else:
            workload = build_workload(obj, ctx)
        if workload is None:
            return Decision(True, mutated=obj, skipped_reason="not a workload trainguard decides")
        old_workload = None
        if inp.old_object and self._reads_old_workload:
            old_workload = build_workload(inp.old_object, ctx)
        request = {
            "operation": inp.operation,
            "namespace": namespace,
            "name": meta.get("name"),
            "userInfo": dict(inp.user_info),
            "dryRun": inp.dry_run,
        }
        evaluated: list[tuple[Policy, PolicyResult]] = []
        now = now or datetime.now(UTC)
        run = self._run if timings is None else self._timed(timings)
        # One evaluation for all of a phase's policies, unless each policy's time is wanted
        together = timings is None

        patcher = Patcher(obj)
        if mutate:
            bindings = self._bindings(self._mutation, obj, workload, inp.old_object, old_workload, request)
            program = self.policies.mutating_program if together else None
            self._phase(
                program, self._mutating, run, workload, inp, namespace, now, bindings, patcher, evaluated
            )
            if patcher.ops and validate:
                # Validation sees the mutated object. Without validation (the /mutate endpoint)
                # nothing reads the re-adapted workload, so it is not built: the Decision then
                # carries the workload the mutations saw. Containers the mutations left alone
                # are not read again (ctx.containers).
                workload = build_workload(patcher.doc, ctx) or workload
            elif kept is not None and not validate:
                # The validating call brings the patched object back (adaptations.py). An inline
                # call leaves its adaptation to settle(), after its answer is sent.
                kept.leave(patcher.doc, ctx, self._facts, None if patcher.ops else workload)
                if inp.yield_at is None:
                    kept.settle()

        if validate:
            bindings = self._bindings(
                self._validation, patcher.doc, workload, inp.old_object, old_workload, request
            )
            program = self.policies.validating_program if together else None
            self._phase(
                program, self._validating, run, workload, inp, namespace, now, bindings, None, evaluated
            )

        decision = Decision(True, patch=patcher.ops, workload=workload, mutated=patcher.doc)
        return decide.decide(decision, evaluated)

    def _bindings(
        self,
        phase: _Reads,
        obj: dict[str, Any],
        workload: Workload,
        old_object: dict[str, Any] | None,
        old_workload: Workload | None,
        request: dict[str, Any],
    ) -> evaluate.Bindings:
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
        return evaluate.Bindings(self.policies.backend, data, phase.constants)

    def _cluster_for(self, phase: _Reads, workload: Workload, namespace: str | None) -> Any:
        """`cluster` with `evictions` holding the records under this workload's names; None when
        there are none (the prepared constant, with no records, serves)."""
        if not self.evictions or "cluster" not in phase.tree:
            return None
        found = {
            k: self.evictions[k] for k in eviction_candidates(workload, namespace) if k in self.evictions
        }
        return phase.trimmed("cluster", {**self.cluster, "evictions": found}) if found else None

    def _timed(self, timings: dict[str, float]) -> _Run:
        """`_run`, recording each policy's perf_counter seconds (the webhook samples 1 in N requests)."""

        def run(
            cp: CompiledPolicy,
            workload: Workload,
            operation: str,
            namespace: str | None,
            now: datetime,
            bindings: evaluate.Bindings,
            patcher: Patcher | None,
            deadline: float | None = None,
        ) -> PolicyResult:
            start = perf_counter()
            try:
                return self._run(cp, workload, operation, namespace, now, bindings, patcher, deadline)
            finally:
                timings[cp.name] = perf_counter() - start

        return run

    def _phase(
        self,
        program: Program | None,
        policies: Sequence[CompiledPolicy],
        run: _Run,
        workload: Workload,
        inp: AdmissionInput,
        namespace: str | None,
        now: datetime,
        bindings: evaluate.Bindings,
        patcher: Patcher | None,
        evaluated: list[tuple[Policy, PolicyResult]],
    ) -> None:
        """One phase's policies (mutating with a `patcher`, validating without): all at once by the
        phase's `program` where it can (_together), with the results _run gives, else one by one."""
        together = (
            self._together(program, policies, workload, inp, namespace, bindings, patcher)
            if program is not None
            else None
        )
        if together is None:
            for cp in policies:
                _yield_if_due(inp)
                result = run(cp, workload, inp.operation, namespace, now, bindings, patcher, inp.deadline)
                evaluated.append((cp.policy, result))
            return
        skipped, values = together
        exceptions = self.exceptions
        for cp, skip, value, joined in zip(
            policies, skipped, values, self._joined[patcher is not None], strict=True
        ):
            if inp.yield_at is not None:
                _yield_if_due(inp)
            if skip is not None:
                result = skip
            elif not joined:
                result = self._evaluate(cp, workload, namespace, now, bindings, patcher, evaluate.UNKNOWN)
            elif patcher is None and not exceptions:
                result = evaluate.validate(cp, bindings, value)
            else:
                result = self._evaluate(cp, workload, namespace, now, bindings, patcher, value)
            evaluated.append((cp.policy, result))

    def _together(
        self,
        program: Program,
        policies: Sequence[CompiledPolicy],
        workload: Workload,
        inp: AdmissionInput,
        namespace: str | None,
        bindings: evaluate.Bindings,
        patcher: Patcher | None,
    ) -> tuple[tuple[PolicyResult | None, ...], list[Any]] | None:
        """Each policy's skip result (None where it applies) and its item of the phase's one
        program (PolicySet.mutating_program / validating_program); None, with nothing decided,
        where the policies must be evaluated one by one instead: when the deadline has passed
        (before or during the evaluation: those policies were not evaluated in time) or any policy
        fails (so that its error is its own, not every policy's)."""
        _yield_if_due(inp)
        deadline = inp.deadline
        if deadline is not None and monotonic() >= deadline:
            return None
        skipped, selected = self._skipped(policies, workload, inp.operation, namespace, patcher)
        bindings.data[SELECTED] = selected
        try:
            values = program.evaluate(bindings.activation())
        except Exception:  # a CelEvalError, or a runtime fault: the policies say which, one by one
            return None
        if type(values) is not list or len(values) != len(policies):
            return None
        if deadline is not None and monotonic() >= deadline:
            return None
        return skipped, values

    def _skipped(
        self,
        policies: Sequence[CompiledPolicy],
        workload: Workload,
        operation: str,
        namespace: str | None,
        patcher: Patcher | None,
    ) -> tuple[tuple[PolicyResult | None, ...], list[bool]]:
        """Each policy's result where it does not apply (_skip), None where it does, and which
        apply; remembered by what decides it, the same for most requests."""
        w = workload
        kueue_managed = patcher is not None and w.kueue_managed
        key = (
            patcher is not None, operation, namespace, bool(w.member), w.role, w.klass, w.tier, w.kind,
            w.api_version, kueue_managed,
        )  # fmt: skip
        known = self._skips.get(key)
        if known is None:
            skipped = tuple(self._skip(cp, w, operation, namespace, patcher) for cp in policies)
            known = skipped, [skip is None for skip in skipped]
            if len(self._skips) >= _SKIPS_KEPT:
                self._skips.clear()
            self._skips[key] = known
        return known[0], list(known[1])

    def _skip(
        self,
        cp: CompiledPolicy,
        workload: Workload,
        operation: str,
        namespace: str | None,
        patcher: Patcher | None,
    ) -> PolicyResult | None:
        """The result of a policy that does not apply to this request, None when it applies."""
        reason = match.skip_reason(cp.policy.match, workload, operation, namespace)
        if reason is not None:
            return PolicyResult(cp.name, "skip", (reason,))
        if patcher is not None and workload.kueue_managed and cp.policy.match.kueue_managed_pods == "Exclude":
            return _kueue_managed(cp)
        return None

    def _run(
        self,
        cp: CompiledPolicy,
        workload: Workload,
        operation: str,
        namespace: str | None,
        now: datetime,
        bindings: evaluate.Bindings,
        patcher: Patcher | None,
        deadline: float | None = None,
    ) -> PolicyResult:
        reason = match.skip_reason(cp.policy.match, workload, operation, namespace)
        if reason is not None:
            return PolicyResult(cp.name, "skip", (reason,))
        if deadline is not None and monotonic() >= deadline:
            # Not evaluated: decide.py maps the error through failurePolicy (Fail denies, Ignore warns).
            return PolicyResult(cp.name, "error", (BUDGET_EXCEEDED,))
        if patcher is not None and workload.kueue_managed and cp.policy.match.kueue_managed_pods == "Exclude":
            return _kueue_managed(cp)
        return self._evaluate(cp, workload, namespace, now, bindings, patcher, evaluate.UNKNOWN)

    def _evaluate(
        self,
        cp: CompiledPolicy,
        workload: Workload,
        namespace: str | None,
        now: datetime,
        bindings: evaluate.Bindings,
        patcher: Patcher | None,
        folded: Any,
    ) -> PolicyResult:
        """An applicable policy's result; `folded`: its folded program's value, if known already."""
        for exception in self.exceptions:
            justification = exception.exempts(cp.name, workload, namespace, now)
            if justification is not None:
                result = (
                    evaluate.mutate(cp, bindings, Patcher(patcher.doc), folded)
                    if patcher
                    else evaluate.validate(cp, bindings, folded)
                )
                return PolicyResult(cp.name, "exempt", result.messages, result.fields, (), justification)
        if patcher is not None:
            return evaluate.mutate(cp, bindings, patcher, folded)
        return evaluate.validate(cp, bindings, folded)


def _kueue_managed(cp: CompiledPolicy) -> PolicyResult:
    # Kueue's pod webhook rejects label changes on the pods it manages.
    return PolicyResult(cp.name, "skip", ("pod managed by Kueue: never relabelled",))


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


# Engine._run's signature: one policy against one request.
_Run = Callable[
    [
        CompiledPolicy,
        Workload,
        str,
        "str | None",
        datetime,
        evaluate.Bindings,
        "Patcher | None",
        "float | None",
    ],
    PolicyResult,
]

_READ_VARIABLES = ("object", "oldObject", "workload", "oldWorkload", "params", "cluster")


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


class _Plan:
    """What one phase's policies (the mutating or the validating ones) read of each CEL variable,
    and the functions that build the workload views with just those paths (model.viewer): derived
    from the policies alone, so made once per policy set (_plan)."""

    __slots__ = ("tree", "viewers")

    def __init__(self, policies: Sequence[CompiledPolicy]) -> None:
        self.tree = reads.policy_reads(policy_sources(policies), _READ_VARIABLES)
        self.viewers = {
            variable: compiled_viewer(Workload, self.tree.get(variable) or {})
            for variable in ("workload", "oldWorkload")
        }


def _plan(policies: PolicySet, phase: str) -> _Plan:
    """The phase's _Plan, kept on the set: reading the sources and generating the views takes
    about 10 ms, and an Engine is built on the event loop on every cluster or eviction change."""
    plan = policies.derived.get(phase)
    if not isinstance(plan, _Plan):  # two threads may both make it: the same plan either way
        members = policies.mutating if phase == "mutating" else policies.validating
        plan = policies.derived[phase] = _Plan(members)
    return plan


class _Reads:
    """A phase's _Plan, with the values that do not change between requests (params, cluster)
    trimmed to what it reads and converted once."""

    __slots__ = ("tree", "_viewers", "constants")

    def __init__(self, plan: _Plan, backend: Any, params: Any, cluster: Mapping[str, Any]) -> None:
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


def _yield_if_due(inp: AdmissionInput) -> None:
    if inp.yield_at is not None and monotonic() >= inp.yield_at:
        raise Deferred("the time allowed to decide here ran out")


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

"""The five platform review questions, answered from the Workload with the evidence for each answer.

    1. gang        multi-node -> gang + min-available enforced?
    2. topology    constrained (keys, levels, required or preferred) or best-effort declared?
    3. preemption  tier; checkpoint owner, interval, location; grace period per pod group
    4. recovery    restart bound, resume priority, cooldown
    5. pool        which pool it targets; shared with inference or isolated

Answers read the object *after* mutation (the decision is taken on it); a piece of evidence that a
trainguard mutation put there says which policy added it. A verdict is `ok`, `needs attention` or
`not applicable`; a failing policy about the same question always makes it `needs attention`, so an
answer never contradicts a finding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from webhook import fields
from webhook.config import PlatformConfig
from webhook.engine import PolicyResult
from webhook.reviewgate import advice
from webhook.workloads.model import PodGroup, TopologyConstraint, Workload

Verdict = Literal["ok", "needs attention", "not applicable"]
OK: Verdict = "ok"
ATTENTION: Verdict = "needs attention"
NA: Verdict = "not applicable"

QUESTIONS: tuple[tuple[str, str], ...] = (
    ("gang", "Gang and min-available"),
    ("topology", "Topology"),
    ("preemption", "Preemption and checkpoints"),
    ("recovery", "Recovery"),
    ("pool", "Pool"),
)
# Policies of the default set that judge the same thing as a question.
RELATED_POLICIES: dict[str, tuple[str, ...]] = {
    "gang": ("gang-required", "min-available"),
    "topology": ("topology-slo",),
    "preemption": ("checkpoint-required",),
    "recovery": ("recovery-policy", "resume-settings", "checkpoint-interval-advice"),
    "pool": ("pool-separation",),
}

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
TIER_LABEL = "trainguard.dev/tier"
TOPOLOGY_SLO = "trainguard.dev/topology-slo"
CHECKPOINT_KEYS = (
    ("owner", "trainguard.dev/checkpoint-owner"),
    ("interval", "trainguard.dev/checkpoint-interval"),
    ("uri", "trainguard.dev/checkpoint-uri"),
)
CHECKPOINT_ENV = "TRAINGUARD_CHECKPOINT_URI"
VOLCANO_COOLDOWN = "volcano.sh/cooldown-time"
VOLCANO_PREEMPTABLE = "volcano.sh/preemptable"
DEFAULT_GRACE = 30

_MECHANISMS = {
    "kueue": "Kueue",
    "scheduling-policy": "gang-scheduler minimum (runPolicy.schedulingPolicy)",
    "volcano": "the Volcano scheduler",
    "runtime-podgroup": "the TrainingRuntime's podGroupPolicy",
    "kueue-pod-group": "a Kueue pod group",
    "coscheduling": "a coscheduling PodGroup",
    "volcano-podgroup": "a Volcano PodGroup",
    "workload-api": "a Workload API pod group",
    "ray-batch-scheduler": "a Ray batch scheduler",
}
_MECHANISM_KEYS: dict[str, tuple[str, ...]] = {
    "kueue": (QUEUE_LABEL,),
    "kueue-pod-group": ("kueue.x-k8s.io/pod-group-name",),
    "coscheduling": ("scheduling.x-k8s.io/pod-group",),
    "volcano-podgroup": ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name"),
    "ray-batch-scheduler": (
        "ray.io/gang-scheduling-enabled",
        "ray.io/scheduler-name",
        "volcano.sh/queue-name",
        "kai.scheduler/queue",
    ),
}
_TOPOLOGY_ANNOTATIONS = {
    "kueue-tas-required": "kueue.x-k8s.io/podset-required-topology",
    "kueue-tas-preferred": "kueue.x-k8s.io/podset-preferred-topology",
    "kueue-tas-slice-required": "kueue.x-k8s.io/podset-slice-required-topology",
    "kueue-tas-unconstrained": "kueue.x-k8s.io/podset-unconstrained-topology",
    "jobset-exclusive-topology": "alpha.jobset.sigs.k8s.io/exclusive-topology",
    "lws-exclusive-topology": "leaderworkerset.sigs.k8s.io/exclusive-topology",
    "lws-subgroup-exclusive-topology": "leaderworkerset.sigs.k8s.io/subgroup-exclusive-topology",
}
_TOPOLOGY_SOURCES = {
    "kueue-tas-required": "Kueue TAS",
    "kueue-tas-preferred": "Kueue TAS",
    "kueue-tas-slice-required": "Kueue TAS slice",
    "kueue-tas-unconstrained": "Kueue TAS (unconstrained)",
    "pod-affinity": "pod affinity",
    "volcano-network-topology": "Volcano network topology",
    "jobset-exclusive-topology": "JobSet exclusive topology",
    "lws-exclusive-topology": "LeaderWorkerSet exclusive topology",
    "lws-subgroup-exclusive-topology": "LeaderWorkerSet subgroup exclusive topology",
}


@dataclass(frozen=True, slots=True)
class Evidence:
    field: str  # rendered dotted path ("" for a fact that no single field holds)
    value: Any  # JSON-like; None for a field that is not set
    added_by: str | None = None  # the mutation policy that put it there
    pointer: str | None = None  # JSON pointer in the workload's object, when it has one


@dataclass(frozen=True, slots=True)
class Answer:
    key: str
    question: str
    verdict: Verdict
    summary: str
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True, slots=True)
class Facts:
    """What the answers read: the workload and object after mutation, and what changed them."""

    workload: Workload  # after mutation
    obj: dict[str, Any]  # after mutation
    original: dict[str, Any]  # as written
    mutations: tuple[PolicyResult, ...]  # mutating results, in order
    results: Mapping[str, PolicyResult]  # every result by policy name
    config: PlatformConfig
    priority_values: Mapping[str, int]  # PriorityClass name -> value, where known

    def evidence(self, ptr: str, value: Any = fields.MISSING) -> Evidence:
        """Evidence for the field at `ptr` of the object, with the mutation that added it, if one did."""
        now = fields.lookup(self.obj, ptr)
        before = fields.lookup(self.original, ptr)
        shown = (None if now is fields.MISSING else now) if value is fields.MISSING else value
        added = self.added_by(ptr) if now is not fields.MISSING and now != before else None
        return Evidence(fields.from_pointer(ptr), shown, added, ptr)

    def added_by(self, ptr: str) -> str:
        """The mutation policy whose patch last wrote `ptr`, one of its parents or its children."""
        found = "a trainguard mutation"
        for result in self.mutations:
            for op in result.patch:
                if _op_writes(op, ptr):
                    found = result.policy
        return found

    def field_evidence(self, field: str | None, value: Any = fields.MISSING) -> Evidence:
        """Evidence for a dotted field as adapters write it (possibly in another object)."""
        if not field:
            return Evidence("", None if value is fields.MISSING else value)
        path = fields.parse(field)
        if path.object is not None:
            return Evidence(fields.render(path), None if value is fields.MISSING else value)
        return self.evidence(fields.pointer(path, self.obj), value)

    def related(self, key: str, *outcomes: str) -> list[str]:
        """Policies about question `key` whose result has one of `outcomes`."""
        out = []
        for name in RELATED_POLICIES.get(key, ()):
            result = self.results.get(name)
            if result is not None and result.outcome in outcomes:
                out.append(name)
        return out


def _op_writes(op: Mapping[str, Any], ptr: str) -> bool:
    path = str(op.get("path", ""))
    if path.endswith("/-"):  # an append writes an element of the list
        return ptr.startswith(path[:-1])
    if path == ptr or path.startswith(ptr + "/"):
        return True
    if ptr.startswith(path + "/") and op.get("op") in ("add", "replace"):
        rest = ptr[len(path) :]
        return fields.lookup(op.get("value"), rest) is not fields.MISSING
    return False


def answer_all(f: Facts) -> tuple[Answer, ...]:
    answers = (gang(f), topology(f), preemption(f), recovery(f), pool(f))
    return tuple(_reconcile(f, a) for a in answers)


def _reconcile(f: Facts, a: Answer) -> Answer:
    summary, verdict = a.summary, a.verdict
    failed = f.related(a.key, "fail", "warn", "error")
    if failed and verdict != ATTENTION:
        summary += f" Policy {', '.join(failed)} reports a finding (see Findings)."
        verdict = ATTENTION
    exempt = f.related(a.key, "exempt")
    if exempt:
        summary += f" Waived for {', '.join(exempt)} by a PolicyException (see Findings)."
    return Answer(a.key, a.question, verdict, summary, a.evidence)


def _title(key: str) -> str:
    return dict(QUESTIONS)[key]


def _pods(n: int) -> str:
    return f"{n} pod" if n == 1 else f"{n} pods"


# --------------------------------------------------------------------------------------------
# 1. Gang


def gang(f: Facts) -> Answer:
    w = f.workload
    evidence = [e for m in w.gang.mechanisms for e in _mechanism_evidence(f, m)]
    if w.gang.min_field:
        evidence.append(f.field_evidence(w.gang.min_field, w.gang.min_available))
    if w.elastic is not None:
        elastic = f.field_evidence(w.elastic.field)
        if elastic.value is None or isinstance(elastic.value, dict | list):
            elastic = f.field_evidence(w.elastic.field, f"{w.elastic.min}..{w.elastic.max} pods")
        evidence.append(elastic)
    mechanisms = ", ".join(_mechanism_name(w, m) for m in w.gang.mechanisms)
    if w.klass == "A":
        return _answer("gang", NA, f"Single node ({_pods(w.total_pods)}): nothing to gang.", evidence)
    expected = w.elastic.min if w.klass == "C" and w.elastic is not None else w.total_pods
    shape = (
        f"elastic (class C, {w.elastic.min} to {w.elastic.max} pods)"
        if w.klass == "C" and w.elastic is not None
        else f"multi-node (class {w.klass}, {_pods(w.total_pods)})"
    )
    if w.role == "inference":
        said = f"gang: {mechanisms}" if mechanisms else "no gang mechanism declared"
        return _answer(
            "gang",
            NA,
            f"Inference, {_pods(w.total_pods)}; {said}. The platform requires gangs for training only.",
            evidence,
        )
    if not w.gang.mechanisms:
        return _answer(
            "gang",
            ATTENTION,
            f"{shape[0].upper()}{shape[1:]} with no gang mechanism: its pods can start one by one and "
            f"hold {'GPUs' if w.total_gpus else 'their resources'} waiting for the rest.",
            evidence,
        )
    minimum = w.gang.min_available
    if minimum is None:
        default = _default_minimum(w)
        return _answer(
            "gang", OK, f"{shape[0].upper()}{shape[1:]}, gang-scheduled by {mechanisms}; {default}.", evidence
        )
    target = "its elastic minimum" if w.klass == "C" and w.elastic is not None else "all of its pods"
    field = fields.normalise(w.gang.min_field) if w.gang.min_field else "the gang minimum"
    if minimum == expected:
        return _answer(
            "gang",
            OK,
            f"{shape[0].upper()}{shape[1:]}, gang-scheduled by {mechanisms}; min-available {minimum} "
            f"({field}) equals {target} ({expected}).",
            evidence,
        )
    return _answer(
        "gang",
        ATTENTION,
        f"{shape[0].upper()}{shape[1:]}, gang-scheduled by {mechanisms}, but min-available is {minimum} "
        f"({field}) where {target} is {expected}.",
        evidence,
    )


def _mechanism_name(w: Workload, mechanism: str) -> str:
    name = _MECHANISMS.get(mechanism, mechanism)
    if mechanism == "kueue" and w.gang.queue_name:
        name += f" (queue {w.gang.queue_name})"
    return name


def _default_minimum(w: Workload) -> str:
    mechs = w.gang.mechanisms
    if "kueue" in mechs:
        return f"no separate minimum: Kueue admits all {w.total_pods} pods at once"
    if "volcano" in mechs and w.api_version.startswith("batch.volcano.sh/"):
        return f"no minAvailable: Volcano's default is all {w.total_pods} pods"
    if "runtime-podgroup" in mechs:
        return "the runtime's PodGroup requires all pods (minMember = all)"
    return "the minimum is set on the PodGroup the pods name, outside this object"


def _mechanism_evidence(f: Facts, mechanism: str) -> list[Evidence]:
    w, obj = f.workload, f.obj
    keys = _MECHANISM_KEYS.get(mechanism)
    if keys is not None:
        found = _metadata_keys(f, "", keys)
        if not found and mechanism == "kueue":  # Deployment / StatefulSet: the template label
            found = [
                e for g in w.groups if _base(g) is not None for e in _metadata_keys(f, _base(g) or "", keys)
            ]
        return found[:1]
    if mechanism == "volcano":
        if w.api_version.startswith("batch.volcano.sh/"):
            if fields.lookup(obj, "/spec/schedulerName") is fields.MISSING:
                return [f.evidence("/spec/schedulerName", "unset (Volcano defaults it to volcano)")]
            return [f.evidence("/spec/schedulerName")]
        return [
            f.evidence(f"{_base(g)}/spec/schedulerName")
            for g in w.groups
            if _base(g) is not None and g.scheduler_name == "volcano"
        ][:1]
    if mechanism == "runtime-podgroup":
        return [f.evidence("/spec/runtimeRef")]
    if mechanism == "workload-api":
        for g in w.groups:
            base = _base(g)
            for leaf in ("/spec/schedulingGroup", "/spec/workloadRef"):
                if base is not None and fields.lookup(obj, base + leaf) is not fields.MISSING:
                    return [f.evidence(base + leaf)]
    return []


def _metadata_keys(f: Facts, base: str, keys: tuple[str, ...]) -> list[Evidence]:
    out = []
    for where in ("labels", "annotations"):
        for key in keys:
            ptr = f"{base}/metadata/{where}/{fields.escape(key)}"
            if fields.lookup(f.obj, ptr) is not fields.MISSING:
                out.append(f.evidence(ptr))
    return out


# --------------------------------------------------------------------------------------------
# 2. Topology


def topology(f: Facts) -> Answer:
    w = f.workload
    evidence = [_constraint_evidence(f, c) for c in w.topology.constraints]
    slo = _metadata_keys(f, "", (TOPOLOGY_SLO,))
    evidence.extend(slo)
    described = _describe_constraints(w.topology.constraints)
    if w.topology.best_effort:
        described.append("topology declared best-effort (trainguard.dev/topology-slo)")
    said = "; ".join(described)
    if w.klass == "A":
        return _answer("topology", NA, "Single pod: no placement between pods to constrain.", evidence)
    if w.role == "inference":
        return _answer("topology", NA, f"Inference workload: {said or 'no topology constraint'}.", evidence)
    required = w.klass == "B" and w.total_gpus > 0
    if said:
        return _answer("topology", OK, f"{said[0].upper()}{said[1:]}.", evidence)
    if not required:
        why = "an elastic (class C) job" if w.klass == "C" else "a job without GPUs"
        return _answer(
            "topology",
            NA,
            f"No topology constraint and no best-effort declaration; not required for {why}.",
            evidence,
        )
    return _answer(
        "topology",
        ATTENTION,
        "Class B GPU job with no topology constraint and no best-effort declaration: its pods may be "
        "spread across racks and zones.",
        evidence,
    )


def _describe_constraints(constraints: tuple[TopologyConstraint, ...]) -> list[str]:
    merged: dict[tuple[str, str, bool], list[str]] = {}
    for c in constraints:
        groups = merged.setdefault((c.source, c.key, c.required), [])
        if c.group and c.group not in groups:
            groups.append(c.group)
    out = []
    for (source, key, required), groups in merged.items():
        how = "required" if required else "preferred"
        where = f" on {', '.join(groups)}" if groups else ""
        what = _TOPOLOGY_SOURCES.get(source, source)
        if source == "kueue-tas-unconstrained":
            out.append(f"{what}{where}: topology accounting without placement")
        else:
            out.append(f"{how} {what} at {key or 'the default tier'}{where}")
    return out


def _group(w: Workload, name: str | None) -> PodGroup | None:
    return next((g for g in w.groups if g.name == name), None)


def _constraint_evidence(f: Facts, c: TopologyConstraint) -> Evidence:
    w = f.workload
    g = _group(w, c.group)
    base = _base(g) if g is not None else None
    annotation = _TOPOLOGY_ANNOTATIONS.get(c.source)
    if annotation is not None:
        candidates = [f"/metadata/annotations/{fields.escape(annotation)}"]
        if base is not None:
            candidates.insert(0, f"{base}/metadata/annotations/{fields.escape(annotation)}")
        if c.source == "jobset-exclusive-topology" and c.group is not None:
            for i, rj in enumerate(_list(fields.at(f.obj, "/spec/replicatedJobs"))):
                if isinstance(rj, dict) and rj.get("name") == c.group:
                    candidates.insert(
                        0,
                        f"/spec/replicatedJobs/{i}/template/metadata/annotations/{fields.escape(annotation)}",
                    )
        return _first_present(f, candidates, c.key)
    if c.source == "pod-affinity" and base is not None:
        ptr = _affinity_term(f.obj, base, c)
        if ptr is not None:
            return f.evidence(ptr)
    if c.source == "volcano-network-topology":
        if w.api_version.startswith("batch.volcano.sh/"):
            if c.group is None:
                return f.evidence("/spec/networkTopology")
            for i, task in enumerate(_list(fields.at(f.obj, "/spec/tasks"))):
                if isinstance(task, dict) and task.get("name") == c.group:
                    return f.evidence(f"/spec/tasks/{i}/partitionPolicy/networkTopology")
        found = _metadata_keys(
            f, "", ("volcano.sh/network-topology-mode", "volcano.sh/network-topology-highest-tier-allowed")
        )
        if found:
            return found[0]
    return Evidence("", c.key)


def _first_present(f: Facts, candidates: list[str], value: Any) -> Evidence:
    for ptr in candidates:
        if fields.lookup(f.obj, ptr) is not fields.MISSING:
            return f.evidence(ptr)
    return Evidence("", value)


def _affinity_term(obj: dict[str, Any], base: str, c: TopologyConstraint) -> str | None:
    kind = (
        "requiredDuringSchedulingIgnoredDuringExecution"
        if c.required
        else "preferredDuringSchedulingIgnoredDuringExecution"
    )
    terms_ptr = f"{base}/spec/affinity/podAffinity/{kind}"
    for i, term in enumerate(_list(fields.at(obj, terms_ptr))):
        inner = term.get("podAffinityTerm") if not c.required and isinstance(term, dict) else term
        if isinstance(inner, dict) and inner.get("topologyKey") == c.key:
            suffix = "/topologyKey" if c.required else "/podAffinityTerm/topologyKey"
            return f"{terms_ptr}/{i}{suffix}"
    return None


def _base(g: PodGroup) -> str | None:
    """The JSON pointer of a group's pod template in this object ("" for a Pod), None when elsewhere."""
    if g.template_pointer or g.patchable:
        return g.template_pointer
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


# --------------------------------------------------------------------------------------------
# 3. Preemption


def preemption(f: Facts) -> Answer:
    w = f.workload
    evidence = _tier_evidence(f)
    cp = w.checkpoint
    present = {
        key: value
        for key, value in (("owner", cp.owner), ("interval", cp.interval), ("uri", cp.uri))
        if value
    }
    for key, annotation in CHECKPOINT_KEYS:
        ptr = f"/metadata/annotations/{fields.escape(annotation)}"
        evidence.append(
            f.evidence(ptr) if key in present else Evidence(fields.from_pointer(ptr), None, None, ptr)
        )
    minimum = int(f.config.raw["checkpoint"]["minGracePeriodSeconds"])
    short = []
    for g in w.groups:
        grace = g.termination_grace_period_seconds
        evidence.append(_grace_evidence(f, g))
        if (DEFAULT_GRACE if grace is None else grace) < minimum:
            short.append(g)
    env = _checkpoint_env(f)
    if env is not None:
        evidence.append(env)
    tier = f"{w.tier} ({tier_source(w)})"
    if w.role == "inference":
        return _answer(
            "preemption", NA, f"Tier {tier}; inference workloads sign no checkpoint contract.", evidence
        )
    if w.tier_source == "label-invalid":
        return _answer(
            "preemption",
            ATTENTION,
            f"Label {TIER_LABEL} is {w.labels.get(TIER_LABEL)!r}, not guaranteed or preemptible; "
            f"read as {tier}.",
            evidence,
        )
    contract = _contract(w, present)
    graces = _graces(w)
    if w.tier == "guaranteed":
        return _answer(
            "preemption",
            NA,
            f"Tier {tier}: not preempted, so no checkpoint contract is required ({contract}). "
            f"Grace periods: {graces}.",
            evidence,
        )
    problems = _checkpoint_problems(f, present)
    if short:
        names = ", ".join(g.name for g in short)
        problems.append(f"grace period below {minimum} s for {names}")
    verdict = ATTENTION if problems else OK
    summary = f"Tier {tier}: {contract}. Grace periods: {graces}."
    if problems:
        summary += f" Missing or out of bounds: {'; '.join(problems)}."
    return _answer("preemption", verdict, summary, evidence)


def tier_source(w: Workload) -> str:
    return {
        "label": f"label {TIER_LABEL}",
        "priority-class": f"from priority class {w.priority_class}"
        if w.priority_class
        else "from the Kueue priority class",
        "default": f"default for class {w.klass}" if w.role == "training" else "default for inference",
        "label-invalid": f"invalid label {TIER_LABEL}",
    }.get(w.tier_source, w.tier_source)


def _tier_evidence(f: Facts) -> list[Evidence]:
    w = f.workload
    if w.tier_source in ("label", "label-invalid"):
        return [f.evidence(f"/metadata/labels/{fields.escape(TIER_LABEL)}")]
    if w.tier_source == "priority-class":
        return _priority_evidence(f)[:1]
    return []


def _priority_evidence(f: Facts) -> list[Evidence]:
    """Where the workload's priority class (and Kueue WorkloadPriorityClass) are set."""
    w, obj = f.workload, f.obj
    out = []
    candidates = [f"{_base(g)}/spec/priorityClassName" for g in w.groups if _base(g) is not None]
    candidates += [
        "/spec/runPolicy/schedulingPolicy/priorityClass",
        "/spec/priorityClassName",
        f"/metadata/labels/{fields.escape('ray.io/priority-class-name')}",
    ]
    for ptr in dict.fromkeys(candidates):
        value = fields.lookup(obj, ptr)
        if value is not fields.MISSING and value == w.priority_class:
            out.append(f.evidence(ptr))
            break
    ptr = f"/metadata/labels/{fields.escape(KUEUE_PRIORITY_LABEL)}"
    if fields.lookup(obj, ptr) is not fields.MISSING:
        out.append(f.evidence(ptr))
    return out


def _contract(w: Workload, present: dict[str, str]) -> str:
    if not present:
        return "no checkpoint contract declared"
    owner = present.get("owner", "no owner")
    interval = f"every {present['interval']}" if "interval" in present else "no interval"
    uri = f"to {present['uri']}" if "uri" in present else "no location"
    return f"checkpoints owned by {owner}, written {interval} {uri}"


def _graces(w: Workload) -> str:
    parts = []
    for g in w.groups:
        value = g.termination_grace_period_seconds
        parts.append(f"{g.name} {value} s" if value is not None else f"{g.name} unset ({DEFAULT_GRACE} s)")
    return ", ".join(parts) or "no pod groups"


def _grace_evidence(f: Facts, g: PodGroup) -> Evidence:
    value = g.termination_grace_period_seconds
    base = _base(g)
    if base is not None:
        ptr = base + "/spec/terminationGracePeriodSeconds"
        if fields.lookup(f.obj, ptr) is fields.MISSING:
            return Evidence(fields.from_pointer(ptr), f"unset ({DEFAULT_GRACE})", None, ptr)
        return f.evidence(ptr)
    return Evidence(
        f"{g.name} pods: spec.terminationGracePeriodSeconds",
        value if value is not None else f"unset ({DEFAULT_GRACE})",
    )


def _checkpoint_problems(f: Facts, present: dict[str, str]) -> list[str]:
    w, cp = f.workload, f.config.raw["checkpoint"]
    problems = [f"{annotation} missing" for key, annotation in CHECKPOINT_KEYS if key not in present]
    checkpoint = w.checkpoint
    if checkpoint.interval and checkpoint.interval_seconds is None:
        problems.append(f"interval {checkpoint.interval!r} is not a duration")
    elif checkpoint.interval_seconds is not None and not (
        cp["minIntervalSeconds"] <= checkpoint.interval_seconds <= cp["maxIntervalSeconds"]
    ):
        problems.append(f"interval {checkpoint.interval} outside {cp['minInterval']}..{cp['maxInterval']}")
    if checkpoint.uri and checkpoint.uri_scheme not in cp["schemes"]:
        problems.append(f"location {checkpoint.uri!r} has no allowed scheme ({', '.join(cp['schemes'])})")
    return problems


def _checkpoint_env(f: Facts) -> Evidence | None:
    for g in f.workload.groups:
        for c in g.containers:
            if not c.pointer:
                continue
            for i, item in enumerate(_list(fields.at(f.obj, c.pointer + "/env"))):
                if isinstance(item, dict) and item.get("name") == CHECKPOINT_ENV:
                    return f.evidence(f"{c.pointer}/env/{i}", f"{CHECKPOINT_ENV}={item.get('value')}")
    return None


# --------------------------------------------------------------------------------------------
# 4. Recovery


def recovery(f: Facts) -> Answer:
    w = f.workload
    limit = int(f.config.raw["restarts"]["max"])
    evidence: list[Evidence] = []
    if w.restarts.field:
        evidence.append(f.field_evidence(w.restarts.field, w.restarts.bound))
    for _, c, t in w.torchrun:
        if t.max_restarts is not None:
            evidence.append(_max_restarts(f, c.pointer, t.max_restarts))
    evidence.extend(_restart_policies(f))
    priority = _priority_evidence(f)
    evidence.extend(priority)
    cooldown = _cooldown(f)
    evidence.extend(cooldown)
    bound = (
        f"restarts bounded by {fields.normalise(w.restarts.field)} = {w.restarts.bound} "
        f"(platform maximum {limit})"
        if w.restarts.bound is not None and w.restarts.field
        else "no restart bound declared"
    )
    resume = _resume(f)
    cool = (
        "cooldown " + ", ".join(f"{e.field} = {e.value}" for e in cooldown if VOLCANO_COOLDOWN in e.field)
        if any(VOLCANO_COOLDOWN in e.field for e in cooldown)
        else "no cooldown declared"
    )
    summary = f"{bound[0].upper()}{bound[1:]}; {resume}; {cool}."
    platform = advice.recovery_advice(f.config, w, dict(f.priority_values))
    summary += f" {platform.summary}" if platform.summary else ""
    evidence.extend(Evidence(field, value) for field, value in platform.evidence)
    applies = w.role == "training" and (w.tier == "preemptible" or w.klass == "C")
    if not applies:
        why = "inference" if w.role == "inference" else f"{w.tier} class {w.klass}"
        return _answer("recovery", NA, f"{summary} A restart bound is not required ({why}).", evidence)
    if w.restarts.bound is None:
        return _answer(
            "recovery", ATTENTION, f"{summary} A {w.tier} class {w.klass} job needs one.", evidence
        )
    if w.restarts.bound > limit:
        return _answer("recovery", ATTENTION, f"{summary} The bound is above the platform maximum.", evidence)
    return _answer("recovery", OK, summary, evidence)


def _max_restarts(f: Facts, container: str, value: int) -> Evidence:
    """Where torchrun's restart bound is written: the launch line's flag, else PET_MAX_RESTARTS."""
    shown = f"torchrun --max-restarts={value}"
    if container:
        for key in ("command", "args"):
            for i, item in enumerate(_list(fields.at(f.obj, f"{container}/{key}"))):
                if isinstance(item, str) and ("--max-restarts" in item or "--max_restarts" in item):
                    return f.evidence(f"{container}/{key}/{i}", shown)
        for i, item in enumerate(_list(fields.at(f.obj, f"{container}/env"))):
            if isinstance(item, dict) and item.get("name") == "PET_MAX_RESTARTS":
                return f.evidence(f"{container}/env/{i}", shown)
    return Evidence("", shown)


def _resume(f: Facts) -> str:
    w = f.workload
    kueue = w.labels.get(KUEUE_PRIORITY_LABEL)
    parts = []
    if w.priority_class:
        value = f.priority_values.get(w.priority_class)
        parts.append(
            f"resumes at priority class {w.priority_class}"
            + (f" (value {value})" if value is not None else "")
        )
    if kueue:
        parts.append(f"Kueue WorkloadPriorityClass {kueue}")
    return ", ".join(parts) if parts else "no priority class (resumes at the cluster's default priority)"


def _restart_policies(f: Facts) -> list[Evidence]:
    out = []
    for g in f.workload.groups:
        base = _base(g)
        if base is None or not g.restart_policy:
            continue
        candidates = [base + "/spec/restartPolicy"]
        if base:  # Kubeflow keeps it beside the template: spec.pytorchReplicaSpecs.Worker.restartPolicy
            candidates.insert(0, base.rsplit("/", 1)[0] + "/restartPolicy")
        for ptr in candidates:
            if fields.lookup(f.obj, ptr) == g.restart_policy:
                out.append(f.evidence(ptr))
                break
    return out


def _cooldown(f: Facts) -> list[Evidence]:
    bases = [""] + [b for b in (_base(g) for g in f.workload.groups) if b]
    out: list[Evidence] = []
    for base in dict.fromkeys(bases):
        out.extend(_metadata_keys(f, base, (VOLCANO_COOLDOWN, VOLCANO_PREEMPTABLE)))
    return out


# --------------------------------------------------------------------------------------------
# 5. Pool


def pool(f: Facts) -> Answer:
    w, cfg = f.workload, f.config
    own = cfg.training_pool if w.role == "training" else cfg.inference_pool
    other = cfg.inference_pool if w.role == "training" else cfg.training_pool
    evidence = [_target_evidence(f, t) for t in w.pool_targets]
    pinned = [t for t in w.pool_targets if t["via"] != "toleration" and t["pool"] == own]
    bad = [
        t
        for t in w.pool_targets
        if ((t["pool"] in (other, "*") and not pinned) if t["via"] == "toleration" else t["pool"] == other)
    ]
    key = cfg.pool_label_key
    if bad:
        ways = ", ".join(f"{fields.normalise(t['field'])} ({t['via']})" for t in bad)
        return _answer(
            "pool",
            ATTENTION,
            f"{w.role.capitalize()} workload targets the {other} pool through {ways}: it would share nodes "
            f"with {'inference' if w.role == 'training' else 'training'}.",
            evidence,
        )
    if pinned:
        ways = ", ".join(sorted({t["via"] for t in pinned}))
        return _answer("pool", OK, f"Isolated: pinned to the {own} pool ({key}={own}, by {ways}).", evidence)
    tolerated = [t for t in w.pool_targets if t["via"] == "toleration"]
    if tolerated:
        return _answer(
            "pool",
            OK,
            f"Tolerates the {own} pool's taint but is not pinned to it: "
            "it may also run on untainted shared nodes; "
            f"it does not target the {other} pool.",
            evidence,
        )
    return _answer(
        "pool",
        OK,
        f"No pool chosen: it runs on any node whose taints it tolerates and does not target the {other} pool "
        f"(no {key} selector, affinity or toleration).",
        evidence,
    )


def _target_evidence(f: Facts, target: Mapping[str, str]) -> Evidence:
    value = target["pool"] if target["pool"] != "*" else "any pool (tolerates every pool taint)"
    obj = target.get("object")
    if obj:
        return f.field_evidence(f"{obj}:{target['field']}", value)
    ptr = fields.pointer(fields.parse(target["field"]), f.obj)
    if target["via"] == "nodeSelector":
        ptr += "/" + fields.escape(f.config.pool_label_key)
    return f.evidence(ptr, value)


def _answer(key: str, verdict: Verdict, summary: str, evidence: list[Evidence]) -> Answer:
    seen: set[tuple[str, str]] = set()
    unique = []
    for e in evidence:
        ident = (e.field, repr(e.value))
        if ident not in seen:
            seen.add(ident)
            unique.append(e)
    return Answer(key, _title(key), verdict, summary, tuple(unique))

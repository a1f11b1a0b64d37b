"""Recovery: the restart bound, the priority a preempted job resumes at, and any cooldown."""

from __future__ import annotations

from webhook import fields
from webhook.reviewgate import advice
from webhook.reviewgate.questions._facts import (
    KUEUE_PRIORITY_LABEL,
    Described,
    Evidence,
    Facts,
    as_list,
    base,
    metadata_keys,
    priority_evidence,
)

VOLCANO_COOLDOWN = "volcano.sh/cooldown-time"
VOLCANO_PREEMPTABLE = "volcano.sh/preemptable"


def describe(f: Facts) -> Described:
    w = f.workload
    limit = int(f.config.raw["restarts"]["max"])
    evidence: list[Evidence] = []
    if w.restarts.field:
        evidence.append(f.field_evidence(w.restarts.field, w.restarts.bound))
    for _, c, t in w.torchrun:
        if t.max_restarts is not None:
            evidence.append(_max_restarts(f, c.pointer, t.max_restarts))
    evidence.extend(_restart_policies(f))
    evidence.extend(priority_evidence(f))
    cooldown = _cooldown(f)
    evidence.extend(cooldown)
    bound = (
        f"restarts bounded by {fields.normalise(w.restarts.field)} = {w.restarts.bound} "
        f"(platform maximum {limit})"
        if w.restarts.bound is not None and w.restarts.field
        else "no restart bound declared"
    )
    cool = (
        "cooldown " + ", ".join(f"{e.field} = {e.value}" for e in cooldown if VOLCANO_COOLDOWN in e.field)
        if any(VOLCANO_COOLDOWN in e.field for e in cooldown)
        else "no cooldown declared"
    )
    summary = f"{bound[0].upper()}{bound[1:]}; {_resume(f)}; {cool}."
    platform = advice.recovery_advice(f.config, w, dict(f.priority_values))
    evidence.extend(Evidence(field, value) for field, value in platform.evidence)
    return Described(f"{summary} {platform.summary}" if platform.summary else summary, evidence)


def _max_restarts(f: Facts, container: str, value: int) -> Evidence:
    """Where torchrun's restart bound is written: the launch line's flag, else PET_MAX_RESTARTS."""
    shown = f"torchrun --max-restarts={value}"
    if container:
        for key in ("command", "args"):
            for i, item in enumerate(as_list(fields.at(f.obj, f"{container}/{key}"))):
                if isinstance(item, str) and ("--max-restarts" in item or "--max_restarts" in item):
                    return f.evidence(f"{container}/{key}/{i}", shown)
        for i, item in enumerate(as_list(fields.at(f.obj, f"{container}/env"))):
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
        at = base(g)
        if at is None or not g.restart_policy:
            continue
        candidates = [at + "/spec/restartPolicy"]
        if at:  # Kubeflow keeps it beside the template: spec.pytorchReplicaSpecs.Worker.restartPolicy
            candidates.insert(0, at.rsplit("/", 1)[0] + "/restartPolicy")
        for ptr in candidates:
            if fields.lookup(f.obj, ptr) == g.restart_policy:
                out.append(f.evidence(ptr))
                break
    return out


def _cooldown(f: Facts) -> list[Evidence]:
    bases = [""] + [b for b in (base(g) for g in f.workload.groups) if b]
    out: list[Evidence] = []
    for at in dict.fromkeys(bases):
        out.extend(metadata_keys(f, at, (VOLCANO_COOLDOWN, VOLCANO_PREEMPTABLE)))
    return out

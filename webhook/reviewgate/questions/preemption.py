"""Preemption and checkpoints: the tier, the checkpoint contract, and each pod group's grace period."""

from __future__ import annotations

from webhook import fields
from webhook.reviewgate.questions._facts import (
    Described,
    Evidence,
    Facts,
    as_list,
    base,
    priority_evidence,
)
from webhook.workloads import PodGroup, Workload

TIER_LABEL = "trainguard.dev/tier"
CHECKPOINT_KEYS = (
    ("owner", "trainguard.dev/checkpoint-owner"),
    ("interval", "trainguard.dev/checkpoint-interval"),
    ("uri", "trainguard.dev/checkpoint-uri"),
)
CHECKPOINT_ENV = "TRAINGUARD_CHECKPOINT_URI"
DEFAULT_GRACE = 30  # seconds: the API server's default terminationGracePeriodSeconds


def describe(f: Facts) -> Described:
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
    evidence += [_grace_evidence(f, g) for g in w.groups]
    env = _checkpoint_env(f)
    if env is not None:
        evidence.append(env)
    tier = f"{w.tier} ({tier_source(w)})"
    if w.tier_source == "label-invalid":
        tier += f"; label {TIER_LABEL} is {w.labels.get(TIER_LABEL)!r}, not guaranteed or preemptible"
    if w.role == "inference":
        return Described(f"Tier {tier}; an inference workload.", evidence)
    return Described(f"Tier {tier}: {_contract(present)}. Grace periods: {_graces(w)}.", evidence)


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
        return priority_evidence(f)[:1]
    return []


def _contract(present: dict[str, str]) -> str:
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
    at = base(g)
    if at is not None:
        ptr = at + "/spec/terminationGracePeriodSeconds"
        if fields.lookup(f.obj, ptr) is fields.MISSING:
            return Evidence(fields.from_pointer(ptr), f"unset ({DEFAULT_GRACE})", None, ptr)
        return f.evidence(ptr)
    return Evidence(
        f"{g.name} pods: spec.terminationGracePeriodSeconds",
        value if value is not None else f"unset ({DEFAULT_GRACE})",
    )


def _checkpoint_env(f: Facts) -> Evidence | None:
    for g in f.workload.groups:
        for c in g.containers:
            if not c.pointer:
                continue
            for i, item in enumerate(as_list(fields.at(f.obj, c.pointer + "/env"))):
                if isinstance(item, dict) and item.get("name") == CHECKPOINT_ENV:
                    return f.evidence(f"{c.pointer}/env/{i}", f"{CHECKPOINT_ENV}={item.get('value')}")
    return None

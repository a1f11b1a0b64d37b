"""Pool: which node pool the workload targets, and through which fields."""

from __future__ import annotations

from collections.abc import Mapping

from webhook import fields
from webhook.reviewgate.questions._facts import Described, Evidence, Facts


def describe(f: Facts) -> Described:
    w, cfg = f.workload, f.config
    evidence = [_target_evidence(f, t) for t in w.pool_targets]
    key = cfg.pool_label_key
    if not w.pool_targets:
        return Described(
            f"No pool chosen (no {key} selector, affinity or toleration): it runs on any node whose "
            "taints it tolerates.",
            evidence,
        )
    targets = "; ".join(
        f"{_pool_name(t['pool'])} through {fields.normalise(t['field'])} ({t['via']})" for t in w.pool_targets
    )
    return Described(f"{w.role.capitalize()} workload targets {targets}.", evidence)


def _pool_name(pool: str) -> str:
    return "every pool (tolerates every pool taint)" if pool == "*" else f"the {pool} pool"


def _target_evidence(f: Facts, target: Mapping[str, str]) -> Evidence:
    value = target["pool"] if target["pool"] != "*" else "any pool (tolerates every pool taint)"
    obj = target.get("object")
    if obj:
        return f.field_evidence(f"{obj}:{target['field']}", value)
    return f.evidence(fields.pointer(fields.parse(target["field"]), f.obj), value)

"""Does a policy apply to this workload? Small predicates, cheapest first, then matchConditions.

`skip_reason()` returns None when the policy applies, else a short reason a report can show.
"""

from __future__ import annotations

from webhook.engine.model import Match
from webhook.workloads.model import Workload


def _operation(m: Match, w: Workload, operation: str, namespace: str | None) -> str | None:
    return None if operation in m.operations else f"operation {operation} not matched"


def _member_pods(m: Match, w: Workload, operation: str, namespace: str | None) -> str | None:
    if m.member_pods == "Exclude" and w.member:
        return "controller-created pod (decided with its workload)"
    if m.member_pods == "Only" and not w.member:
        return "not a controller-created pod"
    return None


def _role(m: Match, w: Workload, operation: str, namespace: str | None) -> str | None:
    return None if not m.roles or w.role in m.roles else f"role {w.role} not matched"


def _class(m: Match, w: Workload, operation: str, namespace: str | None) -> str | None:
    return None if not m.classes or w.klass in m.classes else f"class {w.klass} not matched"


def _tier(m: Match, w: Workload, operation: str, namespace: str | None) -> str | None:
    return None if not m.tiers or w.tier in m.tiers else f"tier {w.tier} not matched"


def _kind(m: Match, w: Workload, operation: str, namespace: str | None) -> str | None:
    if not m.kinds:
        return None
    group = w.api_version.rpartition("/")[0]
    if w.kind in m.kinds or f"{group}/{w.kind}" in m.kinds:
        return None
    return f"kind {w.kind} not matched"


def _namespace(m: Match, w: Workload, operation: str, namespace: str | None) -> str | None:
    if m.namespaces and namespace not in m.namespaces:
        return f"namespace {namespace} not matched"
    if namespace in m.exclude_namespaces:
        return f"namespace {namespace} excluded"
    return None


PREDICATES = (_operation, _member_pods, _role, _class, _tier, _kind, _namespace)


def skip_reason(m: Match, w: Workload, operation: str, namespace: str | None) -> str | None:
    for predicate in PREDICATES:
        reason = predicate(m, w, operation, namespace)
        if reason is not None:
            return reason
    return None

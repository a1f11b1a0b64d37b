"""Does a policy's `match` select this workload? Small predicates, cheapest first.

`skip_reason()` returns None when it does, else a short reason a report can show. It is one part
of phase.applicability (which adds the rule for Kueue-managed pods); matchConditions are CEL,
evaluated with the rest of the policy.
"""

from __future__ import annotations

from webhook.engine.model import Match
from webhook.workloads import Workload


def skip_reason(m: Match, w: Workload, operation: str, namespace: str | None) -> str | None:
    # One function rather than a table of predicates: it runs for every policy of every request,
    # and most of a policy's criteria are empty (match anything).
    if operation not in m.operations:
        return f"operation {operation} not matched"
    if m.member_pods == "Exclude":
        if w.member:
            return "controller-created pod (decided with its workload)"
    elif m.member_pods == "Only" and not w.member:
        return "not a controller-created pod"
    if m.roles and w.role not in m.roles:
        return f"role {w.role} not matched"
    if m.classes and w.klass not in m.classes:
        return f"class {w.klass} not matched"
    if m.tiers and w.tier not in m.tiers:
        return f"tier {w.tier} not matched"
    if m.kinds and w.kind not in m.kinds and f"{w.api_version.rpartition('/')[0]}/{w.kind}" not in m.kinds:
        return f"kind {w.kind} not matched"
    if m.namespaces and namespace not in m.namespaces:
        return f"namespace {namespace} not matched"
    if namespace in m.exclude_namespaces:
        return f"namespace {namespace} excluded"
    return None

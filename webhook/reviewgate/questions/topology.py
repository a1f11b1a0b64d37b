"""Topology: the placement constraints between the workload's pods, or its best-effort declaration."""

from __future__ import annotations

from typing import Any

from webhook import fields
from webhook.reviewgate.questions._facts import Described, Evidence, Facts, as_list, base, metadata_keys
from webhook.workloads import PodGroup, TopologyConstraint, Workload

TOPOLOGY_SLO = "trainguard.dev/topology-slo"

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


def describe(f: Facts) -> Described:
    w = f.workload
    evidence = [_constraint_evidence(f, c) for c in w.topology.constraints]
    evidence.extend(metadata_keys(f, "", (TOPOLOGY_SLO,)))
    described = _describe_constraints(w.topology.constraints)
    if w.topology.best_effort:
        described.append("topology declared best-effort (trainguard.dev/topology-slo)")
    said = "; ".join(described)
    if w.klass == "A":
        return Described("Single pod: no placement between pods to constrain.", evidence)
    if w.role == "inference":
        return Described(f"Inference workload: {said or 'no topology constraint'}.", evidence)
    if said:
        return Described(f"{said[0].upper()}{said[1:]}.", evidence)
    return Described("No topology constraint and no best-effort declaration.", evidence)


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
    at = base(g) if g is not None else None
    annotation = _TOPOLOGY_ANNOTATIONS.get(c.source)
    if annotation is not None:
        candidates = [f"/metadata/annotations/{fields.escape(annotation)}"]
        if at is not None:
            candidates.insert(0, f"{at}/metadata/annotations/{fields.escape(annotation)}")
        if c.source == "jobset-exclusive-topology" and c.group is not None:
            for i, rj in enumerate(as_list(fields.at(f.obj, "/spec/replicatedJobs"))):
                if isinstance(rj, dict) and rj.get("name") == c.group:
                    candidates.insert(
                        0,
                        f"/spec/replicatedJobs/{i}/template/metadata/annotations/{fields.escape(annotation)}",
                    )
        return _first_present(f, candidates, c.key)
    if c.source == "pod-affinity" and at is not None:
        ptr = _affinity_term(f.obj, at, c)
        if ptr is not None:
            return f.evidence(ptr)
    if c.source == "volcano-network-topology":
        if w.api_version.startswith("batch.volcano.sh/"):
            if c.group is None:
                return f.evidence("/spec/networkTopology")
            for i, task in enumerate(as_list(fields.at(f.obj, "/spec/tasks"))):
                if isinstance(task, dict) and task.get("name") == c.group:
                    return f.evidence(f"/spec/tasks/{i}/partitionPolicy/networkTopology")
        found = metadata_keys(
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


def _affinity_term(obj: dict[str, Any], at: str, c: TopologyConstraint) -> str | None:
    kind = (
        "requiredDuringSchedulingIgnoredDuringExecution"
        if c.required
        else "preferredDuringSchedulingIgnoredDuringExecution"
    )
    terms_ptr = f"{at}/spec/affinity/podAffinity/{kind}"
    for i, term in enumerate(as_list(fields.at(obj, terms_ptr))):
        inner = term.get("podAffinityTerm") if not c.required and isinstance(term, dict) else term
        if isinstance(inner, dict) and inner.get("topologyKey") == c.key:
            suffix = "/topologyKey" if c.required else "/podAffinityTerm/topologyKey"
            return f"{terms_ptr}/{i}{suffix}"
    return None

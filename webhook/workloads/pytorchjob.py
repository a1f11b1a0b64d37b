"""PyTorchJob (kubeflow.org/v1): Master + Worker replica specs, elasticPolicy, runPolicy."""

from __future__ import annotations

from webhook.workloads._kubeflow import read_replica_specs, read_run_policy
from webhook.workloads.draft import Draft, mapping, optional_count, text
from webhook.workloads.model import ElasticRange, Restarts
from webhook.workloads.torchrun.injection import Injected, inject


def adapt(d: Draft) -> None:
    counts = read_replica_specs(d, "pytorchReplicaSpecs", {})
    read_run_policy(d)
    inject(d.groups, _operator_env(d, counts), lambda group, container: True, d.launch_budget)
    if "elasticPolicy" not in d.spec or d.spec["elasticPolicy"] is None:
        return
    ep = mapping(d.spec["elasticPolicy"], "spec.elasticPolicy")
    d.elastic_declared = True
    workers = sum(n for rtype, n in counts.items() if rtype.lower() == "worker")
    others = sum(n for rtype, n in counts.items() if rtype.lower() != "worker")
    lo = optional_count(ep.get("minReplicas"), "spec.elasticPolicy.minReplicas")
    hi = optional_count(ep.get("maxReplicas"), "spec.elasticPolicy.maxReplicas")
    # The operator's defaulter fills a missing side from the other, both from Worker.replicas.
    if lo is None:
        lo = hi if hi is not None else workers
    if hi is None:
        hi = lo
    if lo < hi:
        # In pods: the elastic workers plus the fixed replicas (a Master, when there is one).
        d.elastic = ElasticRange(lo + others, hi + others, "spec.elasticPolicy.minReplicas", fixed=others)
    if d.restarts.bound is None:
        limit = optional_count(ep.get("maxRestarts"), "spec.elasticPolicy.maxRestarts")
        if limit is not None:
            d.restarts = Restarts(limit, "spec.elasticPolicy.maxRestarts")


def _operator_env(d: Draft, counts: dict[str, int]) -> dict[str, Injected]:
    """PET_NNODES / PET_NPROC_PER_NODE as the training operator appends them to every container
    (pkg/controller.v1/pytorch envvar.go, elastic.go): appended last, they win over the
    container's own entries of the same name."""
    out: dict[str, Injected] = {}
    nproc = text(d.spec.get("nprocPerNode"))
    ep = d.spec.get("elasticPolicy")
    if isinstance(ep, dict):
        if nproc is None and ep.get("nProcPerNode") is not None:
            nproc = text(ep.get("nProcPerNode"))
            if nproc is not None:
                out["PET_NPROC_PER_NODE"] = Injected(nproc, "spec.elasticPolicy.nProcPerNode")
        lo = optional_count(ep.get("minReplicas"), "spec.elasticPolicy.minReplicas")
        hi = optional_count(ep.get("maxReplicas"), "spec.elasticPolicy.maxReplicas")
        if lo is None and hi is None:
            workers = sum(n for rtype, n in counts.items() if rtype.lower() == "worker")
            out["PET_NNODES"] = Injected(str(workers), "spec.pytorchReplicaSpecs.Worker.replicas")
        else:
            lo, hi = (lo if lo is not None else hi), (hi if hi is not None else lo)
            out["PET_NNODES"] = Injected(f"{lo}:{hi}", "spec.elasticPolicy.minReplicas/maxReplicas")
    else:
        out["PET_NNODES"] = Injected(str(sum(counts.values())), "spec.pytorchReplicaSpecs[*].replicas")
    if nproc is not None and "PET_NPROC_PER_NODE" not in out:
        out["PET_NPROC_PER_NODE"] = Injected(nproc, "spec.nprocPerNode")
    return out

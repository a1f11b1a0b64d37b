"""PyTorchJob (kubeflow.org/v1): Master + Worker replica specs, elasticPolicy, runPolicy."""

from __future__ import annotations

from webhook.workloads._kubeflow import read_replica_specs, read_run_policy
from webhook.workloads.common import Draft, mapping, optional_count
from webhook.workloads.model import ElasticRange, Restarts


def adapt(d: Draft) -> None:
    counts = read_replica_specs(d, "pytorchReplicaSpecs", {})
    read_run_policy(d)
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

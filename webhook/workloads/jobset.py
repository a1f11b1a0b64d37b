"""JobSet (jobset.x-k8s.io/v1alpha2): replicatedJobs of batch Jobs, exclusive topology, maxRestarts.

Pods = Σ replicatedJobs[].replicas × the Job's parallelism (capped by completions). JobSet has no
gang of its own: Kueue (queue label) or Workload-Aware Scheduling (templates) provide it.
"""

from __future__ import annotations

from webhook.workloads.draft import Draft, count, job_pods, mapping, optional_count, sequence, text
from webhook.workloads.model import Restarts
from webhook.workloads.podtemplate import read_template

EXCLUSIVE_TOPOLOGY = "alpha.jobset.sigs.k8s.io/exclusive-topology"


def adapt(d: Draft) -> None:
    key = d.annotations.get(EXCLUSIVE_TOPOLOGY)
    if key:
        d.constraint("jobset-exclusive-topology", key, True)
    for i, raw in enumerate(sequence(d.spec.get("replicatedJobs"), "spec.replicatedJobs")):
        where = f"spec.replicatedJobs[{i}]"
        rj = mapping(raw, where)
        name = text(rj.get("name")) or f"job-{i}"
        replicas = count(rj.get("replicas"), f"{where}.replicas", 1)
        job = mapping(rj.get("template"), f"{where}.template")
        job_meta = mapping(job.get("metadata"), f"{where}.template.metadata")
        job_spec = mapping(job.get("spec"), f"{where}.template.spec")
        pods = replicas * job_pods(job_spec, f"{where}.template.spec")
        read_template(
            d, job_spec.get("template"), f"/spec/replicatedJobs/{i}/template/spec/template", name, pods
        )
        job_annotations = mapping(job_meta.get("annotations"), f"{where}.template.metadata.annotations")
        key = text(job_annotations.get(EXCLUSIVE_TOPOLOGY))
        if key:
            d.constraint("jobset-exclusive-topology", key, True, name)
    fp = mapping(d.spec.get("failurePolicy"), "spec.failurePolicy")
    limit = optional_count(fp.get("maxRestarts"), "spec.failurePolicy.maxRestarts")
    if limit is not None:
        d.restarts = Restarts(limit, "spec.failurePolicy.maxRestarts")

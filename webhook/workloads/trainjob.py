"""TrainJob (trainer.kubeflow.org/v1alpha1) and the (Cluster)TrainingRuntime it references.

The pod templates of a TrainJob live in its runtime, not in the TrainJob: the runtime's
replicatedJobs become pod groups with `patchable=False` and `template_pointer=""`, and fields found
there are reported as `<Kind>/<name>:<path in the runtime>`. The TrainJob's own `spec.trainer`
overrides the runtime's `node` container (command, args, env, resourcesPerNode); that container's
pointer is `/spec/trainer`, the one place a mutation can change it on the TrainJob. When the
runtime is not known, one `node` group stands for the trainer pods, and `unknown_runtime` names
the reference so that policies decide on what is known and say what went unchecked.

Topology for the runtime's pods travels in `spec.runtimePatches[]` (Trainer v2.2+): every entry
is read as constraints, and trainguard writes its own entry as manager `trainguard.dev/webhook`.

Pods: the `node` replicatedJob runs numNodes pods (`spec.trainer.numNodes`, else the runtime's
`mlPolicy.numNodes`, else 1; one fewer when an MPI launcher runs as a node); every other
replicatedJob (initializers, launcher) runs replicas × parallelism. The class follows numNodes.
"""

from __future__ import annotations

from typing import Any

from webhook.workloads.draft import (
    Draft,
    count,
    job_pods,
    join,
    mapping,
    optional_count,
    pool_hits,
    sequence,
    str_map,
    tas_constraints,
    text,
    volcano_network_topology,
)
from webhook.workloads.jobset import EXCLUSIVE_TOPOLOGY
from webhook.workloads.model import ElasticRange, Restarts
from webhook.workloads.podtemplate import pod_affinity, read_template, required_node_terms
from webhook.workloads.torchrun.injection import Injected, inject
from webhook.workloads.torchrun.mpi import set_mpirun_np

ANCESTOR_STEP = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_NODE = "node"  # the trainer replicatedJob and container name in Trainer v2 runtimes


def adapt(d: Draft) -> None:
    trainer = mapping(d.spec.get("trainer"), "spec.trainer")
    ref = mapping(d.spec.get("runtimeRef"), "spec.runtimeRef")
    kind = text(ref.get("kind")) or "ClusterTrainingRuntime"
    name = text(ref.get("name")) or ""
    source = f"{kind}/{name}"
    runtime = _runtime(d, kind, name)
    if runtime is None:
        d.unknown_runtime = source
    rspec = mapping(runtime.get("spec"), f"{source}:spec") if runtime else {}
    ml = mapping(rspec.get("mlPolicy"), f"{source}:spec.mlPolicy")

    nodes = optional_count(trainer.get("numNodes"), "spec.trainer.numNodes")
    if nodes is None:
        nodes = count(ml.get("numNodes"), f"{source}:spec.mlPolicy.numNodes", 1)
    d.class_pods = nodes

    template = mapping(rspec.get("template"), f"{source}:spec.template")
    jobs = sequence(
        mapping(template.get("spec"), f"{source}:spec.template.spec").get("replicatedJobs"),
        f"{source}:spec.template.spec.replicatedJobs",
    )
    if jobs:
        _runtime_groups(d, jobs, trainer, nodes, ml, source)
    else:
        # Runtime unknown (or without replicatedJobs): the trainer pods as the TrainJob states them.
        stand_in = {"spec": {"containers": [{"name": TRAINER_NODE}]}}
        read_template(d, stand_in, "", TRAINER_NODE, nodes, patchable=False, source=source, trainer=trainer)
    # The trainer container is the one spec.trainer overrides (podtemplate gives it this pointer).
    inject(
        d.groups,
        _operator_env(trainer, ml, nodes, bool(jobs), source),
        lambda g, c: c.pointer == "/spec/trainer",
        d.launch_budget,
    )
    set_mpirun_np(d.groups, lambda g, c: c.pointer == "/spec/trainer")  # an MPI runtime's launcher

    pgp = mapping(rspec.get("podGroupPolicy"), f"{source}:spec.podGroupPolicy")
    if pgp:
        d.gang("runtime-podgroup")
        volcano = mapping(pgp.get("volcano"), f"{source}:spec.podGroupPolicy.volcano")
        if volcano.get("networkTopology"):
            volcano_network_topology(
                d, volcano["networkTopology"], f"{source}:spec.podGroupPolicy.volcano.networkTopology"
            )
    _legacy_elastic(d, ml, source)
    runtime_patches(d)
    if d.restarts.bound is None:
        fp = mapping(
            mapping(template.get("spec"), f"{source}:spec.template.spec").get("failurePolicy"),
            f"{source}:spec.template.spec.failurePolicy",
        )
        where = f"{source}:spec.template.spec.failurePolicy.maxRestarts"
        limit = optional_count(fp.get("maxRestarts"), where)
        if limit is not None:
            d.restarts = Restarts(limit, where)


def _runtime(d: Draft, kind: str, name: str) -> dict[str, Any] | None:
    if not name:
        return None
    key = (d.namespace or "default", name) if kind == "TrainingRuntime" else (None, name)
    runtime = d.ctx.runtimes.get(key)
    return runtime if isinstance(runtime, dict) else None


def _runtime_groups(
    d: Draft, jobs: list[Any], trainer: dict[str, Any], nodes: int, ml: dict[str, Any], source: str
) -> None:
    mpi = mapping(ml.get("mpi"), f"{source}:spec.mlPolicy.mpi")
    launcher_is_node = mpi.get("runLauncherAsNode") is True and any(
        isinstance(j, dict) and j.get("name") == "launcher" for j in jobs
    )
    for i, raw in enumerate(jobs):
        where = f"{source}:spec.template.spec.replicatedJobs[{i}]"
        rj = mapping(raw, where)
        name = text(rj.get("name")) or f"job-{i}"
        job = mapping(rj.get("template"), f"{where}.template")
        job_labels = mapping(mapping(job.get("metadata"), f"{where}.template.metadata").get("labels"), where)
        job_spec = mapping(job.get("spec"), f"{where}.template.spec")
        if name == TRAINER_NODE:
            pods = nodes - 1 if launcher_is_node and nodes > 0 else nodes
        else:
            pods = count(rj.get("replicas"), f"{where}.replicas", 1) * job_pods(
                job_spec, f"{where}.template.spec"
            )
        is_trainer = name == TRAINER_NODE or job_labels.get(ANCESTOR_STEP) == "trainer"
        read_template(
            d,
            job_spec.get("template"),
            "",
            name,
            pods,
            patchable=False,
            source=source,
            source_pointer=f"/spec/template/spec/replicatedJobs/{i}/template/spec/template",
            trainer=trainer if is_trainer else None,
        )


def _legacy_elastic(d: Draft, ml: dict[str, Any], source: str) -> None:
    """Trainer v2.0/v2.1 runtimes: `mlPolicy.torch.elasticPolicy{minNodes, maxNodes, maxRestarts}`."""
    torch = mapping(ml.get("torch"), f"{source}:spec.mlPolicy.torch")
    if not torch.get("elasticPolicy"):
        return
    where = f"{source}:spec.mlPolicy.torch.elasticPolicy"
    ep = mapping(torch["elasticPolicy"], where)
    d.elastic_declared = True
    lo = optional_count(ep.get("minNodes"), f"{where}.minNodes")
    hi = optional_count(ep.get("maxNodes"), f"{where}.maxNodes")
    if lo is not None and hi is not None and lo < hi:
        d.elastic = ElasticRange(lo, hi, f"{where}.minNodes")
    limit = optional_count(ep.get("maxRestarts"), f"{where}.maxRestarts")
    if limit is not None:
        d.restarts = Restarts(limit, f"{where}.maxRestarts")


def runtime_patches(d: Draft) -> None:
    """Trainer v2.2+ `spec.runtimePatches[]`: what each manager adds to the runtime's pods.

    Every entry (Kueue's, the user's, trainguard's own) is read alike: Kueue topology-aware
    scheduling annotations and pod affinity on a replicatedJob's pod template constrain that
    replicatedJob's pods, exclusive-topology annotations on the JobSet or Job template constrain
    the whole job or that replicatedJob, and nodeSelector, required node affinity and tolerations
    on the pool keys are pool targets, as on any pod template.
    """
    for i, raw in enumerate(sequence(d.spec.get("runtimePatches"), "spec.runtimePatches")):
        entry = f"spec.runtimePatches[{i}]"
        spec = mapping(mapping(raw, entry).get("trainingRuntimeSpec"), f"{entry}.trainingRuntimeSpec")
        where = f"{entry}.trainingRuntimeSpec.template"
        template = mapping(spec.get("template"), where)
        meta = mapping(template.get("metadata"), f"{where}.metadata")
        key = str_map(meta.get("annotations"), f"{where}.metadata.annotations").get(EXCLUSIVE_TOPOLOGY)
        if key:
            d.constraint("jobset-exclusive-topology", key, True)
        tspec = mapping(template.get("spec"), f"{where}.spec")
        for j, rj_raw in enumerate(sequence(tspec.get("replicatedJobs"), f"{where}.spec.replicatedJobs")):
            rw = f"{where}.spec.replicatedJobs[{j}]"
            rj = mapping(rj_raw, rw)
            name = text(rj.get("name")) or f"job-{j}"
            job = mapping(rj.get("template"), f"{rw}.template")
            job_meta = mapping(job.get("metadata"), f"{rw}.template.metadata")
            key = str_map(job_meta.get("annotations"), f"{rw}.template.metadata.annotations").get(
                EXCLUSIVE_TOPOLOGY
            )
            if key:
                d.constraint("jobset-exclusive-topology", key, True, name)
            pw = f"{rw}.template.spec.template"
            pod = mapping(mapping(job.get("spec"), f"{rw}.template.spec").get("template"), pw)
            pod_meta = mapping(pod.get("metadata"), f"{pw}.metadata")
            tas_constraints(d, str_map(pod_meta.get("annotations"), f"{pw}.metadata.annotations"), name)
            pod_spec = mapping(pod.get("spec"), f"{pw}.spec")
            affinity = mapping(pod_spec.get("affinity"), f"{pw}.spec.affinity")
            if affinity:
                pod_affinity(d, affinity, name)
            tolerations = sequence(pod_spec.get("tolerations"), f"{pw}.spec.tolerations")
            hits = pool_hits(
                str_map(pod_spec.get("nodeSelector"), f"{pw}.spec.nodeSelector"),
                required_node_terms(affinity) if affinity else (),
                tuple(t for t in tolerations if isinstance(t, dict)),
                d.ctx.config.pool_label_key,
                d.ctx.config.pool_taint_key,
            )
            for pool, suffix, via in hits:
                d.patch_pool_targets.append({"pool": pool, "field": join(pw, suffix), "via": via})


def _operator_env(
    trainer: dict[str, Any], ml: dict[str, Any], nodes: int, known: bool, source: str
) -> dict[str, Injected]:
    """PET_NNODES / PET_NPROC_PER_NODE as Trainer's torch plugin sets them on the trainer container
    (pkg/runtime/framework/plugins/torch): from numNodes and numProcPerNode. A runtime that is not
    torch's gets none; an unknown runtime is taken as torch's when the container runs torchrun."""
    if known and "torch" not in ml:
        return {}
    out: dict[str, Injected] = {}
    if trainer.get("numNodes") is not None:
        out["PET_NNODES"] = Injected(str(nodes), "spec.trainer.numNodes")
    elif known:
        out["PET_NNODES"] = Injected(str(nodes), f"{source}:spec.mlPolicy.numNodes")
    torch = ml.get("torch")
    if trainer.get("numProcPerNode") is not None:
        out["PET_NPROC_PER_NODE"] = Injected(
            text(trainer["numProcPerNode"]) or "", "spec.trainer.numProcPerNode"
        )
    elif isinstance(torch, dict) and torch.get("numProcPerNode") is not None:
        where = f"{source}:spec.mlPolicy.torch.numProcPerNode"  # Trainer v2.0 and v2.1
        out["PET_NPROC_PER_NODE"] = Injected(text(torch["numProcPerNode"]) or "", where)
    return out

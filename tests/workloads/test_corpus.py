"""Every manifest of the shared corpus adapts, and every workload in it keeps its class.

The corpus lives in `$TRAINGUARD_SHARED_DIR/corpus`, else `<repo>/../shared/corpus`. The class
table below was derived from each file's note in corpus/INDEX.md and from the manifest itself; a
change of classification shows up here.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonpointer import resolve_pointer

from tests.conftest import shared_dir
from webhook.config import load_config
from webhook.documents import Document, read_manifests
from webhook.errors import InputError
from webhook.workloads import AdaptContext, build_workload
from webhook.workloads.model import ElasticRange, Workload

_SHARED = shared_dir()
if _SHARED is None:
    pytest.skip(
        "the shared corpus is not beside this checkout: set TRAINGUARD_SHARED_DIR to the folder holding corpus/",
        allow_module_level=True,
    )
CORPUS = _SHARED / "corpus"

# (file#document) -> expected class, for every document that is a workload trainguard decides.
# Notes say why where the class is not obvious from the INDEX note.
EXPECTED_CLASS: dict[str, str] = {
    # JobSet: pods = Σ replicas × parallelism; no elastic JobSets yet (KEP-463 unreleased).
    "jobset/coordinator.yaml#1": "B",  # workers 4 + driver 1
    "jobset/exclusive-placement.yaml#1": "B",  # 3 jobs × 3 pods
    "jobset/group.yaml#1": "B",  # 2 + 2
    "jobset/high-priority-jobset.yaml#3": "B",  # 2 jobs × 2 pods, WAS gang
    "jobset/host-maintenance-event-model.yaml#1": "B",  # leader 2 + workers 2
    "jobset/mnist.yaml#1": "B",  # torchrun --nnodes=4, 4 pods
    "jobset/resnet.yaml#1": "B",  # 4 pods, static rendezvous
    "jobset/v6e-jax-workload.yaml#1": "B",  # 2 slices × 4 TPU hosts
    "jobset/was-jobset.yaml#1": "B",  # 3 jobs × 2 pods
    # MPIJob: launcher + workers, fixed size.
    "kubeflow-mpi-operator/pi.yaml#1": "B",
    "kubeflow-mpi-operator/tensorflow-benchmarks.yaml#1": "B",
    # TrainJob: class from numNodes (trainer.numNodes, else the runtime's mlPolicy.numNodes).
    "kubeflow-trainer-v2/01-multi-node.yaml#1": "B",  # numNodes 3
    "kubeflow-trainer-v2/02-runtime-patches.yaml#1": "B",  # numNodes 2
    "kubeflow-trainer-v2/03-kueue-integration.yaml#1": "B",  # numNodes 3
    "kubeflow-trainer-v2/04-volcano-integration.yaml#2": "B",  # numNodes 4, runtime podGroupPolicy
    "kubeflow-trainer-v2/05-multi-step.yaml#2": "B",  # numNodes 2 (+ dataset initializer)
    "kubeflow-trainer-v2/lammps-train-gpus.yaml#1": "B",  # numNodes 2, runtime not in the corpus
    # PyTorchJob v1 and MPIJob v1.
    "kubeflow-training-operator-v1/demo.yaml#1": "B",  # Master 1 + Worker 1
    "kubeflow-training-operator-v1/echo.yaml#1": "C",  # elasticPolicy 1..2
    "kubeflow-training-operator-v1/etcd.yaml#2": "A",  # the etcd server: a bare pod
    "kubeflow-training-operator-v1/imagenet.yaml#1": "C",  # elasticPolicy 1..3
    "kubeflow-training-operator-v1/pytorch_deepspeed_demo.yaml#1": "B",  # Master + Worker, 1 GPU each
    "kubeflow-training-operator-v1/pytorch_job_mnist_nccl.yaml#1": "B",  # 2 nodes
    "kubeflow-training-operator-v1/simple.yaml#1": "B",  # 1 + 1
    # Horovod --min-np/--max-np runs inside the launcher; the worker count is fixed at 2.
    "kubeflow-training-operator-v1/tensorflow-mnist-elastic.yaml#1": "B",
    # Ray: head + workers; autoscaling only when enableInTreeAutoscaling is on.
    "kuberay/ray-cluster.kai-scheduler.yaml#3": "B",
    "kuberay/ray-cluster.scheduler-plugins.yaml#1": "B",
    "kuberay/ray-cluster.tpu-v6e-16-multihost.yaml#1": "B",  # head + 1 × 4 hosts
    "kuberay/ray-cluster.volcano-scheduler-queue.yaml#2": "B",
    "kuberay/ray-job.kueue-toy-sample.yaml#1": "B",  # min 1/max 5 but no autoscaling: 1 worker
    "kuberay/ray-job.pytorch-distributed-training.yaml#1": "A",  # head only
    "kuberay/ray-job.pytorch-mnist.yaml#1": "B",
    "kuberay/ray-job.volcano-scheduler-queue.yaml#2": "B",
    # batch/v1 Jobs: parallelism capped by completions.
    "kubernetes-batch/indexed-job-vol.yaml#1": "B",  # parallelism 3
    "kubernetes-batch/indexed-job.yaml#1": "B",
    "kueue/04-llm-job.yaml#1": "B",
    "kueue/kueue-pod-group.yaml#1": "B",  # one of a pod group of 2
    "kueue/kueue-pod-group.yaml#2": "B",
    "kueue/kueue-pod.yaml#1": "A",
    "kueue/ray-cluster-sample.yaml#1": "B",  # min 1/max 10 but no autoscaling
    "kueue/ray-job-autoscaling-sample.yaml#1": "C",  # enableInTreeAutoscaling, 1..5 workers
    "kueue/ray-job-sample.yaml#1": "B",
    "kueue/sample-job-partial-admission.yaml#1": "C",  # job-min-parallelism 5 of 20
    "kueue/sample-job-preferred.yaml#1": "B",
    "kueue/sample-job-required.yaml#1": "B",
    "kueue/sample-job-unconstrained.yaml#1": "B",
    "kueue/sample-job.yaml#1": "B",
    "kueue/sample-jobset-tas-combined.yaml#1": "B",
    "kueue/sample-jobset-tas-required.yaml#1": "B",
    "kueue/sample-jobset-tas-sliced.yaml#1": "B",
    "kueue/sample-jobset.yaml#1": "B",  # workers 1 + driver 1
    "kueue/sample-leaderworkerset-tas.yaml#1": "B",
    "kueue/sample-leaderworkerset.yaml#1": "B",
    "kueue/sample-mpijob.yaml#1": "B",
    "kueue/sample-pytorchjob.yaml#1": "B",
    "kueue/sample-scalable-job.yaml#1": "C",  # kueue.x-k8s.io/elastic-job
    # LeaderWorkerSet: inference; replicas × size pods.
    "lws/lws-exclusive-placement.yaml#1": "B",
    "lws/lws-sample-volcano.yaml#1": "B",
    "lws/lws.yaml#1": "B",
    "lws/vllm-gpu-lws.yaml#1": "B",
    # Volcano: minAvailable below the task total makes the surplus elastic.
    "volcano/deployment.yaml#1": "A",  # a Deployment of 1
    "volcano/elastic-job.yaml#1": "C",  # 3 of 10
    "volcano/how_to_use_pytorch_plugin--example.yaml#1": "C",  # minAvailable 1 of 3
    "volcano/job.yaml#1": "C",  # 3 of 6
    "volcano/minAvailable-webhook-deny.yaml#1": "B",  # 5 > 4: fixed size; min-available denies it
    "volcano/mindspore-gpu.yaml#1": "B",  # 3 of 3
    "volcano/mpi.yaml#1": "C",  # 3 of 11
}

INFERENCE = {
    "kueue/sample-leaderworkerset-tas.yaml#1",
    "kueue/sample-leaderworkerset.yaml#1",
    "lws/lws-exclusive-placement.yaml#1",
    "lws/lws-sample-volcano.yaml#1",
    "lws/lws.yaml#1",
    "lws/vllm-gpu-lws.yaml#1",
    "volcano/deployment.yaml#1",
}


def _key(doc: Document) -> str:
    return Path(doc.path).relative_to(CORPUS).as_posix() + f"#{doc.index}"


@cache
def _documents() -> tuple[Document, ...]:
    return tuple(read_manifests([str(CORPUS)]))


@cache
def _context() -> AdaptContext:
    """Runtimes from every corpus document, as the CLI collects them from the files it reads."""
    runtimes: dict[tuple[str | None, str], dict[str, Any]] = {}
    for doc in _documents():
        obj = doc.data
        meta = obj.get("metadata") or {}
        if obj.get("kind") == "ClusterTrainingRuntime":
            runtimes[(None, meta["name"])] = obj
        elif obj.get("kind") == "TrainingRuntime":
            runtimes[(meta.get("namespace") or "default", meta["name"])] = obj
    return AdaptContext(config=load_config(), runtimes=runtimes, namespace="default")


@cache
def _workloads() -> dict[str, Workload]:
    out = {}
    for doc in _documents():
        w = build_workload(doc.data, _context())
        if w is not None:
            out[_key(doc)] = w
    return out


def _document_ids() -> list[str]:
    return [_key(doc) for doc in _documents()]


def test_the_corpus_is_all_there() -> None:
    files = {Path(doc.path).relative_to(CORPUS).as_posix() for doc in _documents()}
    assert len(files) == 84


@pytest.mark.parametrize("key", _document_ids())
def test_every_document_adapts(key: str) -> None:
    doc = next(d for d in _documents() if _key(d) == key)
    w = build_workload(doc.data, _context())
    assert (w is not None) == (key in EXPECTED_CLASS), "decided, yet not in the class table (or the reverse)"
    if w is not None:
        view = w.view()
        assert (view["kind"], view["class"], view["name"]) == (
            doc.data["kind"],
            EXPECTED_CLASS[key],
            doc.data["metadata"].get("name") or doc.data["metadata"].get("generateName"),
        )


def test_the_class_table_covers_every_corpus_workload() -> None:
    assert sorted(_workloads()) == sorted(EXPECTED_CLASS)


@pytest.mark.parametrize(("key", "klass"), sorted(EXPECTED_CLASS.items()))
def test_corpus_class(key: str, klass: str) -> None:
    w = _workloads()[key]
    assert w.klass == klass
    assert w.role == ("inference" if key in INFERENCE else "training")


def test_class_counts() -> None:
    counts = {c: sum(1 for w in _workloads().values() if w.klass == c) for c in "ABC"}
    assert counts == {"A": 4, "B": 54, "C": 9}


@pytest.mark.parametrize("key", sorted(EXPECTED_CLASS))
def test_template_and_container_pointers_resolve(key: str) -> None:
    doc = next(d for d in _documents() if _key(d) == key)
    w = _workloads()[key]
    for group in w.groups:
        if not group.patchable:  # a TrainJob's runtime templates are not in the TrainJob
            assert group.template_pointer == ""
            for c in group.containers:
                assert c.pointer in ("", "/spec/trainer")
            continue
        template = resolve_pointer(doc.data, group.template_pointer)
        assert isinstance(template, dict)
        assert isinstance(template.get("spec"), dict)
        for c in group.containers:
            container = resolve_pointer(doc.data, c.pointer)
            assert isinstance(container, dict)
            assert container.get("name") == c.name


@pytest.mark.parametrize(
    ("key", "field", "value"),
    [
        pytest.param(
            "kueue/kueue-pod-group.yaml#1", "gang.min_available", 2, id="kueue-pod-group-total-count"
        ),
        pytest.param("kueue/kueue-pod.yaml#1", "gang.mechanisms", (), id="kueue-pod-queue-label-is-no-gang"),
        pytest.param(
            "kubeflow-trainer-v2/04-volcano-integration.yaml#2",
            "gang.mechanisms",
            ("runtime-podgroup",),
            id="trainjob-runtime-from-the-same-file",
        ),
        pytest.param(
            "kubeflow-trainer-v2/05-multi-step.yaml#2",
            "groups",
            ("dataset-initializer", "node"),
            id="trainjob-namespaced-runtime-groups",
        ),
        pytest.param(
            "kubeflow-trainer-v2/lammps-train-gpus.yaml#1", "total_gpus", 2, id="trainjob-resources-per-node"
        ),
        pytest.param(
            "volcano/job.yaml#1",
            "elastic",
            ElasticRange(3, 6, "spec.minAvailable"),
            id="volcano-elastic-range",
        ),
        pytest.param(
            "volcano/minAvailable-webhook-deny.yaml#1", "gang.min_available", 5, id="volcano-min-above"
        ),
        pytest.param(
            "kubeflow-training-operator-v1/imagenet.yaml#1",
            "elastic",
            ElasticRange(1, 3, "spec.elasticPolicy.minReplicas"),
            id="pytorchjob-elastic-range",
        ),
        pytest.param("lws/vllm-gpu-lws.yaml#1", "total_gpus", 32, id="lws-gpus"),
        pytest.param("jobset/v6e-jax-workload.yaml#1", "total_gpus", 32, id="jobset-tpus"),
        pytest.param("kuberay/ray-cluster.tpu-v6e-16-multihost.yaml#1", "total_pods", 5, id="ray-multihost"),
        pytest.param(
            "kueue/sample-jobset-tas-sliced.yaml#1",
            "topology",
            ("kueue-tas-slice-required",),
            id="jobset-tas-slices",
        ),
        pytest.param(
            "jobset/exclusive-placement.yaml#1",
            "topology",
            ("jobset-exclusive-topology",),
            id="jobset-exclusive",
        ),
        pytest.param("jobset/was-jobset.yaml#1", "gang.mechanisms", ("workload-api",), id="jobset-was"),
        pytest.param("lws/lws-sample-volcano.yaml#1", "gang.mechanisms", ("volcano",), id="lws-volcano"),
        pytest.param(
            "kuberay/ray-cluster.scheduler-plugins.yaml#1",
            "gang.mechanisms",
            ("ray-batch-scheduler",),
            id="ray-gang-scheduling-label",
        ),
        pytest.param("jobset/mnist.yaml#1", "torchrun_nnodes", ("4",), id="jobset-torchrun-in-bash"),
    ],
)
def test_corpus_facts(key: str, field: str, value: Any) -> None:
    w = _workloads()[key]
    if field == "groups":
        got: Any = tuple(g.name for g in w.groups)
    elif field == "topology":
        got = tuple(c.source for c in w.topology.constraints)
    elif field == "torchrun_nnodes":
        got = tuple(t.nnodes for _, _, t in w.torchrun)
    else:
        got = w
        for part in field.split("."):
            got = getattr(got, part)
    assert got == value


_ODD_VALUES: tuple[Any, ...] = (
    None,
    "",
    "abc",
    -1,
    0,
    3,
    2.5,
    True,
    [],
    {},
    ["x"],
    {"a": 1},
    [None],
    [{}],
    "500m",
)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if prefix:
        yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            if prefix or k not in ("apiVersion", "kind"):
                yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


def test_odd_values_anywhere_give_an_input_error_or_a_workload() -> None:
    """A value of the wrong type anywhere in a corpus workload never crashes an adapter."""
    rng = random.Random(20261130)
    ctx = _context()
    objects = [d.data for d in _documents() if _key(d) in EXPECTED_CLASS]
    for _ in range(1500):
        obj = copy.deepcopy(rng.choice(objects))
        for _ in range(rng.randint(1, 3)):
            paths = list(_paths(obj))
            if not paths:
                break
            *parents, last = rng.choice(paths)
            target = obj
            for step in parents:
                target = target[step]
            target[last] = copy.deepcopy(rng.choice(_ODD_VALUES))
        try:
            w = build_workload(obj, ctx)
        except InputError as err:
            assert err.field, err
        else:
            if w is not None:
                w.view()

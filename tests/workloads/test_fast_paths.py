"""The adapters' and the view's fast paths read exactly what the general code reads.

Each table names the input shapes a fast path takes and those that must leave it: env lists
(read by C loops when every entry is a plain name/value mapping), the suspend field, the frozen
model types' own constructors, and the generated view against the general viewer().
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from webhook.config import load_config
from webhook.errors import InputError
from webhook.workloads import AdaptContext, build_workload
from webhook.workloads.model import Gang, TorchrunSpec, Workload, compiled_viewer, viewer

CTX = AdaptContext(config=load_config(), runtimes={}, priority_classes={}, namespace="ml")
FROM = {"fieldRef": {"fieldPath": "metadata.name"}}


def _pod(env: Any, command: list[str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "trainer", "image": "x", "env": env}
    if command is not None:
        container["command"] = command
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": [container]},
    }


def _build(obj: dict[str, Any]) -> Workload:
    w = build_workload(obj, CTX)
    assert w is not None
    return w


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param(
            [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}], {"A": "1", "B": "2"}, id="plain"
        ),
        pytest.param([{"name": "A", "valueFrom": FROM}], {"A": None}, id="value-from-is-unknown"),
        pytest.param([{"name": "A"}], {"A": ""}, id="no-value-nor-value-from-is-empty"),
        pytest.param(
            [{"name": "A", "value": None, "valueFrom": None}], {"A": ""}, id="null-value-from-is-empty"
        ),
        pytest.param([{"name": "A", "value": ""}], {"A": ""}, id="empty-value"),
        pytest.param(
            [{"name": "A", "value": "x", "valueFrom": FROM}], {"A": "x"}, id="value-wins-over-value-from"
        ),
        pytest.param(
            [{"name": "A", "valueFrom": FROM}, {"name": "A", "value": "2"}],
            {"A": "2"},
            id="last-entry-wins-value",
        ),
        pytest.param(
            [{"name": "A", "value": "1"}, {"name": "A", "valueFrom": FROM}],
            {"A": None},
            id="last-entry-wins-unknown",
        ),
        pytest.param(
            [{"name": "A", "valueFrom": FROM}, {"name": "A"}], {"A": ""}, id="last-of-two-unset-entries-wins"
        ),
        pytest.param(
            [{"name": "A"}, {"name": "B", "value": "1"}, {"name": "A", "valueFrom": FROM}],
            {"A": None, "B": "1"},
            id="order-of-first-appearance-kept",
        ),
        # shapes the fast path leaves to the general loop
        pytest.param([{"name": "A", "value": 4}], {"A": "4"}, id="number-value"),
        pytest.param([{"name": "A", "value": 0}], {"A": "0"}, id="zero-value"),
        pytest.param([{"name": "A", "value": False}], {"A": "false"}, id="false-value"),
        pytest.param([{"name": "A", "value": True}], {"A": "true"}, id="true-value"),
        pytest.param([{"name": "A", "value": {"x": 1}}], {"A": ""}, id="mapping-value"),
        pytest.param([{"name": "A", "value": []}], {"A": ""}, id="empty-list-value"),
        pytest.param([{"value": "1"}, {"name": "B", "value": "2"}], {"B": "2"}, id="nameless-entry-skipped"),
        pytest.param(
            [{"name": 1, "value": "1"}, {"name": "B", "value": "2"}], {"B": "2"}, id="number-name-skipped"
        ),
        pytest.param([{"name": None, "value": "1"}], {}, id="null-name-skipped"),
        pytest.param(["A=1", {"name": "B", "value": "2"}], {"B": "2"}, id="string-entry-skipped"),
        pytest.param([["A", "1"], None, {"name": "B"}], {"B": ""}, id="list-and-null-entries-skipped"),
    ],
)
def test_container_env(env: list[Any], expected: dict[str, str | None]) -> None:
    env_read = _build(_pod(env)).groups[0].containers[0].env
    assert env_read == expected
    assert list(env_read) == list(expected)


@pytest.mark.parametrize(
    ("env", "nnodes", "unresolved"),
    [
        pytest.param([{"name": "N", "value": "4"}], "4", (), id="plain-value-expands"),
        pytest.param([{"name": "N", "value": 4}], "4", (), id="number-value-expands"),
        pytest.param([{"name": "N", "valueFrom": FROM}], None, ("nnodes",), id="value-from-is-unresolved"),
    ],
)
def test_env_feeds_the_launch_line(env: list[Any], nnodes: str | None, unresolved: tuple[str, ...]) -> None:
    w = _build(_pod(env, ["torchrun", "--nnodes", "$(N)", "train.py"]))
    spec = w.groups[0].containers[0].torchrun
    assert spec is not None
    assert (spec.nnodes, spec.unresolved) == (nnodes, unresolved)


def _job(spec: dict[str, Any]) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "t", "image": "x"}]}}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j"},
        "spec": {"template": template} | spec,
    }


def _pytorchjob(spec: dict[str, Any]) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}
    replicas = {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "t"},
        "spec": replicas | spec,
    }


@pytest.mark.parametrize(
    ("obj", "suspended"),
    [
        pytest.param(_job({"suspend": True}), True, id="job-suspended"),
        pytest.param(_job({"suspend": False}), False, id="job-running"),
        pytest.param(_job({}), False, id="job-unset"),
        pytest.param(_job({"suspend": "true"}), False, id="job-string-is-not-true"),
        pytest.param(_pytorchjob({"runPolicy": {"suspend": True}}), True, id="pytorchjob-suspended"),
        pytest.param(_pytorchjob({"runPolicy": None}), False, id="pytorchjob-null-run-policy"),
        pytest.param(_pytorchjob({"runPolicy": {"suspend": 1}}), False, id="pytorchjob-one-is-not-true"),
        pytest.param(_pod([]), None, id="pod-has-no-suspend-field"),
    ],
)
def test_suspended(obj: dict[str, Any], suspended: bool | None) -> None:
    assert _build(obj).suspended is suspended


def test_model_types_stay_frozen_with_their_defaults() -> None:
    gang = Gang(("kueue",), 4)
    assert (gang.min_available, gang.min_field, gang.gaps) == (4, None, ())
    with pytest.raises(dataclasses.FrozenInstanceError):
        gang.min_available = 3  # type: ignore[misc]
    first, second = TorchrunSpec("torchrun"), TorchrunSpec("torchrun")
    assert first.sources == {} and first.sources is not second.sources  # a fresh default each
    assert dataclasses.replace(first, nnodes="2").nnodes == "2"
    with pytest.raises(TypeError):
        Gang(mechanisms=(), unknown=1)  # type: ignore[call-arg]


ELASTIC_POD = _pod(
    [{"name": "N", "value": "1:4"}], ["torchrun", "--nnodes", "$(N)", "--nproc-per-node", "8", "train.py"]
)
OWNED_POD = _pod([]) | {
    "metadata": {"name": "p-0", "labels": {"training.kubeflow.org/job-name": "llama"}},
}


@pytest.mark.parametrize(
    "paths",
    [
        pytest.param({"elastic": {}, "owner": {}}, id="optional-parts-whole"),
        pytest.param({"torchrun": {}}, id="torchrun-whole"),
        pytest.param({"torchrun": {"*": {"": {}}}}, id="torchrun-entries-sized"),
        pytest.param(
            {"torchrun": {"*": {"group": {}, "containerField": {}, "nnodes": {}, "sources": {"nnodes": {}}}}},
            id="torchrun-entry-fields",
        ),
        pytest.param({"torchrun": {"*": {"*": {}}}}, id="torchrun-entry-iterated"),
        pytest.param({"gang": {"mechanisms": {"*": {"": {}}}}}, id="list-of-strings"),
        pytest.param({"groups": {"*": {"fieldPrefix": {}, "containers": {}}}}, id="groups"),
        pytest.param({}, id="whole-workload"),
    ],
)
@pytest.mark.parametrize("obj", [ELASTIC_POD, OWNED_POD, _job({})], ids=["elastic-pod", "owned-pod", "job"])
def test_generated_view_renders_what_viewer_renders(paths: dict[str, Any], obj: dict[str, Any]) -> None:
    w = _build(obj)
    generated = compiled_viewer(Workload, paths)(w)
    assert generated == viewer(paths)(w)
    assert list(generated) == list(viewer(paths)(w))


LONG = "s3://bucket/" + "x" * 2000


@pytest.mark.parametrize(
    ("annotations", "seconds", "scheme"),
    [
        pytest.param({"trainguard.dev/checkpoint-interval": "30m"}, 1800, None, id="interval"),
        pytest.param({"trainguard.dev/checkpoint-uri": "GS://b/p"}, None, "gs", id="uri-scheme-lowered"),
        pytest.param({"trainguard.dev/checkpoint-interval": "soon"}, None, None, id="invalid-interval"),
        pytest.param({"trainguard.dev/checkpoint-uri": LONG}, None, "s3", id="long-uri-read-each-time"),
        pytest.param({"trainguard.dev/checkpoint-owner": "ml@example.com"}, None, None, id="owner-only"),
    ],
)
def test_checkpoint_reads_the_same_on_every_admission(
    annotations: dict[str, str], seconds: int | None, scheme: str | None
) -> None:
    obj = _pod([]) | {"metadata": {"name": "p", "annotations": annotations}}
    first, second = _build(obj).checkpoint, _build(obj).checkpoint
    assert first == second
    assert (first.declared, first.interval_seconds, first.uri_scheme) == (True, seconds, scheme)
    assert first.uri == annotations.get("trainguard.dev/checkpoint-uri")


def _pod_with(container: Any) -> dict[str, Any]:
    obj = _pod([])
    obj["spec"]["containers"].append(container)
    return obj


@pytest.mark.parametrize(
    ("container", "field", "message"),
    [
        pytest.param(
            "sidecar", "spec.containers[1]", "must be a mapping, got a string", id="container-not-a-mapping"
        ),
        pytest.param(
            {"name": "s", "env": "A=1"}, "spec.containers[1].env", "must be a list", id="env-not-a-list"
        ),
        pytest.param(
            {"name": "s", "resources": ["x"]}, "spec.containers[1].resources", "mapping", id="resources-list"
        ),
        pytest.param(
            {"name": "s", "env": [], "resources": {"limits": "8"}},
            "spec.containers[1].resources.limits",
            "must be a mapping, got a string",
            id="limits-not-a-mapping",
        ),
        pytest.param(
            {"name": "s", "resources": {"limits": {"nvidia.com/gpu": "half"}}},
            "spec.containers[1].resources.limits['nvidia.com/gpu']",
            "must be a whole number of devices, got 'half'",
            id="devices-not-a-number",
        ),
    ],
)
def test_a_malformed_container_names_its_field(container: Any, field: str, message: str) -> None:
    with pytest.raises(InputError) as caught:
        build_workload(_pod_with(container), CTX)
    assert caught.value.field == field
    assert message in str(caught.value)

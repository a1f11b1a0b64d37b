"""classify (class, role, tier) and podtemplate (what a pod template says), through the adapters."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from webhook.accelerators import accelerators_of
from webhook.config import config_from_mapping, load_config
from webhook.errors import InputError
from webhook.workloads import AdaptContext, build_workload
from webhook.workloads.classify import class_of
from webhook.workloads.model import ElasticRange, Workload


def _pod(**spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"containers": [{"name": "t", "image": "x"}]}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": base | spec,
    }


def _pytorchjob(
    workers: int, elastic: dict[str, int] | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "x"}]}}
    spec: dict[str, Any] = {
        "pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": copy.deepcopy(template)},
            "Worker": {"replicas": workers, "template": copy.deepcopy(template)},
        }
    }
    if elastic:
        spec["elasticPolicy"] = elastic
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "t", "namespace": "ml", "labels": labels or {}},
        "spec": spec,
    }


def _adapt(obj: dict[str, Any], config: Any = None) -> Workload:
    ctx = AdaptContext(config=config or load_config(), runtimes={}, priority_classes={}, namespace="ml")
    w = build_workload(obj, ctx)
    assert w is not None
    return w


@pytest.mark.parametrize(
    ("pods", "elastic", "forced", "klass"),
    [
        pytest.param(1, None, False, "A", id="one-pod-is-a"),
        pytest.param(4, None, False, "B", id="several-pods-are-b"),
        pytest.param(4, ElasticRange(2, 4, "spec.elasticPolicy"), False, "C", id="elastic-is-c"),
    ],
)
def test_class_of(pods: int, elastic: ElasticRange | None, forced: bool, klass: str) -> None:
    assert class_of(pods, elastic, forced) == klass


@pytest.mark.parametrize(
    ("obj", "klass", "tier", "tier_source"),
    [
        pytest.param(_pod(), "A", "guaranteed", "default", id="bare-pod"),
        pytest.param(_pytorchjob(3), "B", "guaranteed", "default", id="fixed-size-job"),
        pytest.param(
            _pytorchjob(3, {"minReplicas": 2, "maxReplicas": 4}),
            "C",
            "preemptible",
            "default",
            id="elastic-job",
        ),
        pytest.param(
            _pytorchjob(3, labels={"trainguard.dev/tier": "preemptible"}),
            "B",
            "preemptible",
            "label",
            id="tier-label",
        ),
        pytest.param(
            _pytorchjob(3, labels={"trainguard.dev/tier": "gold"}),
            "B",
            "guaranteed",
            "label-invalid",
            id="invalid-tier",
        ),
    ],
)
def test_class_and_tier(obj: dict[str, Any], klass: str, tier: str, tier_source: str) -> None:
    w = _adapt(obj)
    assert (w.klass, w.tier, w.tier_source, w.role) == (klass, tier, tier_source, "training")


def test_a_priority_class_named_in_the_config_sets_the_tier() -> None:
    config = config_from_mapping({"tiers": {"priorityClasses": {"preemptible": ["spot"]}}}, "test")
    w = _adapt(_pod(priorityClassName="spot"), config)
    assert (w.tier, w.tier_source, w.priority_class) == ("preemptible", "priority-class", "spot")


@pytest.mark.parametrize(
    ("accelerators", "resource", "accelerator"),
    [
        pytest.param(None, "nvidia.com/gpu", True, id="nvidia-gpu"),
        pytest.param(None, "nvidia.com/mig-1g.5gb", True, id="mig-slice"),
        pytest.param(None, "nvidia.com/mig-3g.40gb", True, id="larger-mig-slice"),
        pytest.param(None, "amd.com/gpu", True, id="amd-gpu"),
        pytest.param(None, "habana.ai/gaudi", True, id="intel-gaudi"),
        pytest.param(None, "cpu", False, id="cpu"),
        pytest.param(None, "example.com/fpga-ish", False, id="unknown-resource"),
        pytest.param(["example.com/fpga-*"], "example.com/fpga-x2", True, id="configured-prefix"),
        pytest.param(["example.com/fpga-*"], "nvidia.com/gpu", False, id="configured-list-replaces-defaults"),
        pytest.param(["nvidia.com/gpu"], "nvidia.com/mig-1g.5gb", False, id="mig-left-out"),
    ],
)
def test_which_resources_count_as_gpus(
    accelerators: list[str] | None, resource: str, accelerator: bool
) -> None:
    config = (
        load_config() if accelerators is None else config_from_mapping({"accelerators": accelerators}, "t")
    )
    assert accelerators_of(config)(resource) is accelerator
    obj = _pod(containers=[{"name": "t", "image": "x", "resources": {"limits": {resource: 2}}}])
    w = _adapt(obj, config)
    assert (w.total_gpus, w.groups[0].containers[0].accelerators) == (
        (2, {resource: 2}) if accelerator else (0, {})
    )


@pytest.mark.parametrize(
    ("spec", "gpus", "grace", "selector"),
    [
        pytest.param({}, 0, None, {}, id="nothing-declared"),
        pytest.param(
            {"containers": [{"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 8}}}]},
            8,
            None,
            {},
            id="gpu-limits",
        ),
        pytest.param(
            {"containers": [{"name": "t", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "2"}}}]},
            2,
            None,
            {},
            id="gpu-requests-as-a-string",
        ),
        pytest.param(
            {"terminationGracePeriodSeconds": 120, "nodeSelector": {"trainguard.dev/pool": "training"}},
            0,
            120,
            {"trainguard.dev/pool": "training"},
            id="grace-and-selector",
        ),
    ],
)
def test_read_template(spec: dict[str, Any], gpus: int, grace: int | None, selector: dict[str, str]) -> None:
    (group,) = _adapt(_pod(**spec)).groups
    assert (group.gpus_per_pod, group.termination_grace_period_seconds, group.node_selector) == (
        gpus,
        grace,
        selector,
    )
    assert [c.pointer for c in group.containers] == ["/spec/containers/0"]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        pytest.param({"containers": "t"}, "spec.containers", id="containers-not-a-list"),
        pytest.param(
            {"terminationGracePeriodSeconds": "long"}, "spec.terminationGracePeriodSeconds", id="grace"
        ),
        pytest.param({"nodeSelector": ["a"]}, "spec.nodeSelector", id="selector-not-a-map"),
    ],
)
def test_a_malformed_template_is_an_input_error_naming_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as caught:
        _adapt(_pod(**spec))
    assert caught.value.field is not None and caught.value.field.startswith(field)

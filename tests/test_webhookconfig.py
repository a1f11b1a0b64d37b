"""webhook.webhookconfig and `trainguard webhook-config`: structure, options, and matchConditions.

The matchConditions are CEL the API server runs before it calls us. They are compiled and
evaluated here with cel-expr-python (the same C++ CEL runtime family as the API server's cel-go
semantics for this subset), and checked against the engine: whatever they skip, the engine would
have allowed unchanged.
"""

from __future__ import annotations

import base64
import json
import re
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from cel_expr_python import cel

from tests.conftest import shared_dir
from webhook import certs, kinds, webhookconfig
from webhook.cli import EXIT_ERROR, main
from webhook.config import PlatformConfig, load_config
from webhook.engine import AdmissionInput, Engine, build_engine, default_policies_dir, load_policy_set
from webhook.webhookconfig import WebhookConfigError

CORPUS = (shared_dir() or Path("/nonexistent")) / "corpus"
OWN_SA = "system:serviceaccount:trainguard-system:trainguard"

Obj = dict[str, Any]


def webhook_of(objects: list[Obj], kind: str) -> Obj:
    hook: Obj = next(o for o in objects if o["kind"] == kind)["webhooks"][0]
    return hook


def validating(objects: list[Obj]) -> Obj:
    return webhook_of(objects, "ValidatingWebhookConfiguration")


def mutating(objects: list[Obj]) -> Obj:
    return webhook_of(objects, "MutatingWebhookConfiguration")


@pytest.fixture(scope="module")
def ca_pem() -> bytes:
    return certs.make_ca()[0]


# --- structure -----------------------------------------------------------------------------------


def test_two_configurations_in_order() -> None:
    objects = webhookconfig.render()
    assert [(o["apiVersion"], o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "trainguard"),
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", "trainguard"),
    ]
    assert all(len(o["webhooks"]) == 1 for o in objects)


@pytest.mark.parametrize(
    ("pick", "name", "path", "policy"),
    [
        pytest.param(validating, "validate.trainguard.dev", "/validate", "Fail", id="validating"),
        pytest.param(mutating, "mutate.trainguard.dev", "/mutate", "Ignore", id="mutating"),
    ],
)
def test_webhook_defaults(pick: Callable[[list[Obj]], Obj], name: str, path: str, policy: str) -> None:
    hook = pick(webhookconfig.render())
    assert hook["name"] == name
    assert hook["clientConfig"] == {
        "service": {"name": "trainguard", "namespace": "trainguard-system", "path": path, "port": 443}
    }
    assert hook["failurePolicy"] == policy
    assert hook["sideEffects"] == "None"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["timeoutSeconds"] == 5
    assert hook["matchPolicy"] == "Equivalent"


def test_only_the_mutating_webhook_is_reinvoked() -> None:
    objects = webhookconfig.render()
    assert mutating(objects)["reinvocationPolicy"] == "IfNeeded"
    assert "reinvocationPolicy" not in validating(objects)


@pytest.mark.parametrize(
    ("v", "m"),
    [
        pytest.param("Fail", "Ignore", id="defaults"),
        pytest.param("Ignore", "Fail", id="swapped"),
        pytest.param("Fail", "Fail", id="both-fail"),
        pytest.param("Ignore", "Ignore", id="both-ignore"),
    ],
)
def test_failure_policies_are_configurable(v: Any, m: Any) -> None:
    objects = webhookconfig.render(validating_failure_policy=v, mutating_failure_policy=m)
    assert (validating(objects)["failurePolicy"], mutating(objects)["failurePolicy"]) == (v, m)


def test_the_two_webhooks_share_no_objects() -> None:
    objects = webhookconfig.render()
    v, m = validating(objects), mutating(objects)
    assert v["rules"] == m["rules"] and v["rules"] is not m["rules"]
    assert v["namespaceSelector"] is not m["namespaceSelector"]


# --- rules ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("info", [pytest.param(k, id=f"{k.group or 'core'}/{k.kind}") for k in kinds.KINDS])
def test_every_kind_is_covered(info: kinds.KindInfo) -> None:
    rules = validating(webhookconfig.render())["rules"]
    matching = [r for r in rules if info.group in r["apiGroups"] and info.plural in r["resources"]]
    assert len(matching) == 1
    rule = matching[0]
    assert set(info.versions) <= set(rule["apiVersions"])
    assert rule["operations"] == ["CREATE", "UPDATE"]
    assert rule["scope"] == "*"


def test_one_rule_per_api_group_and_nothing_else() -> None:
    rules = webhookconfig.rules()
    groups = [r["apiGroups"] for r in rules]
    assert all(len(g) == 1 for g in groups)
    assert sorted(g[0] for g in groups) == sorted({k.group for k in kinds.KINDS})
    registered = {(r["apiGroups"][0], res) for r in rules for res in r["resources"]}
    assert registered == {(k.group, k.plural) for k in kinds.KINDS}
    assert all(not res.endswith("/*") and "/" not in res for r in rules for res in r["resources"])


# --- namespaceSelector ---------------------------------------------------------------------------


def test_namespace_selector_excludes_kube_system_and_own_namespace() -> None:
    selector = validating(webhookconfig.render(namespace="guard"))["namespaceSelector"]
    assert selector == {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                # trainguard-system comes from the embedded PlatformConfig's excludedNamespaces.
                "values": ["guard", "kube-system", "trainguard-system"],
            }
        ]
    }


def test_excluded_namespaces_merge_options_and_config(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("excludedNamespaces: [monitoring, kube-system]\n")
    objects = webhookconfig.render(excluded_namespaces=["ingress", "monitoring"], platform=load_config(cfg))
    for hook in (validating(objects), mutating(objects)):
        (expr,) = hook["namespaceSelector"]["matchExpressions"]
        assert expr["values"] == ["ingress", "kube-system", "monitoring", "trainguard-system"]


# --- clientConfig and caBundle -------------------------------------------------------------------


def test_ca_bundle_round_trip(ca_pem: bytes) -> None:
    objects = webhookconfig.render(ca_bundle=ca_pem)
    for hook in (validating(objects), mutating(objects)):
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == ca_pem


def test_without_ca_bundle_the_field_is_absent() -> None:
    objects = webhookconfig.render()
    assert all("caBundle" not in h["clientConfig"] for h in (validating(objects), mutating(objects)))


@pytest.mark.parametrize(
    ("url", "validate_url"),
    [
        pytest.param("https://127.0.0.1:8443", "https://127.0.0.1:8443/validate", id="host-port"),
        pytest.param("https://127.0.0.1:8443/", "https://127.0.0.1:8443/validate", id="trailing-slash"),
        pytest.param(
            "https://hooks.example.com/tg", "https://hooks.example.com/tg/validate", id="path-prefix"
        ),
    ],
)
def test_url_client_config(ca_pem: bytes, url: str, validate_url: str) -> None:
    objects = webhookconfig.render(url=url, ca_bundle=ca_pem)
    v, m = validating(objects)["clientConfig"], mutating(objects)["clientConfig"]
    assert (v["url"], m["url"]) == (validate_url, validate_url.replace("/validate", "/mutate"))
    assert "service" not in v and "service" not in m


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"timeout_seconds": 0}, "--timeout", id="timeout-zero"),
        pytest.param({"timeout_seconds": 31}, "--timeout", id="timeout-above-30"),
        pytest.param({"port": 0}, "--port", id="port-zero"),
        pytest.param({"port": 70000}, "--port", id="port-too-big"),
        pytest.param({"url": "http://127.0.0.1:8443"}, "https://", id="url-http"),
        pytest.param({"url": "https://"}, "https://", id="url-no-host"),
        pytest.param({"url": "https://h:8443/?a=b"}, "query", id="url-query"),
        pytest.param({"url": "https://u:p@h:8443"}, "user info", id="url-user-info"),
        pytest.param({"validating_failure_policy": "Maybe"}, "Fail or Ignore", id="bad-failure-policy"),
    ],
)
def test_invalid_options_are_refused(options: dict[str, Any], message: str) -> None:
    with pytest.raises(WebhookConfigError, match=re.escape(message)):
        webhookconfig.render(**options)


def test_a_ca_bundle_that_is_not_pem_is_refused() -> None:
    with pytest.raises(certs.CertificateError, match="not a PEM certificate bundle"):
        webhookconfig.render(ca_bundle=b"not a pem")


# --- matchConditions: syntax ---------------------------------------------------------------------

ENV = cel.NewEnv(variables={"object": cel.Type.DYN, "oldObject": cel.Type.DYN, "request": cel.Type.DYN})
QUALIFIED_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


@cache
def compiled(expression: str) -> cel.Expression:
    return ENV.compile(expression)


def render_variants() -> list[Any]:
    return [
        pytest.param({}, id="defaults"),
        pytest.param({"url": "https://127.0.0.1:8443"}, id="url"),
        pytest.param({"namespace": "o'brien"}, id="quote-in-namespace"),
        pytest.param({"skip_plain_cpu": False}, id="no-plain-cpu-skip"),
    ]


@pytest.mark.parametrize("options", render_variants())
def test_match_conditions_compile_and_are_named_validly(options: dict[str, Any]) -> None:
    objects = webhookconfig.render(**options)
    for hook in (validating(objects), mutating(objects)):
        names = [c["name"] for c in hook["matchConditions"]]
        assert len(names) == len(set(names)) and len(names) <= 64
        for cond in hook["matchConditions"]:
            assert QUALIFIED_NAME.match(cond["name"]), cond["name"]
            assert cond["name"] in webhookconfig.EXPLANATIONS
            compiled(cond["expression"])  # raises on a syntax error


def test_no_plain_cpu_skip_keeps_the_self_and_node_level_conditions() -> None:
    objects = webhookconfig.render(skip_plain_cpu=False)
    for hook in (validating(objects), mutating(objects)):
        assert [c["name"] for c in hook["matchConditions"]] == ["not-trainguard-itself", "not-node-level"]


# --- matchConditions: semantics ------------------------------------------------------------------


def evaluate(
    hook: Obj, obj: Obj | None, *, operation: str = "CREATE", old: Obj | None = None, user: str = "alice"
) -> bool:
    """Whether the API server would call `hook` for this request (all matchConditions true)."""
    api_version, kind = (obj or old or {}).get("apiVersion", ""), (obj or old or {}).get("kind", "")
    info = kinds.lookup(api_version, kind)
    group, _, version = api_version.rpartition("/")
    request = {
        "operation": operation,
        "namespace": "default",
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "resource": {
            "group": group,
            "version": version,
            "resource": info.plural if info else kind.lower() + "s",
        },
        "subResource": "",
    }
    data = {"object": obj, "oldObject": old, "request": request}
    for cond in hook["matchConditions"]:
        value = compiled(cond["expression"]).eval(ENV.Activation(data))
        # An error would make the API server apply failurePolicy: for validating, a rejection.
        assert value.type() == cel.Type.BOOL, f"{cond['name']}: {value}"
        if not value.value():
            return False
    return True


def container(**fields: Any) -> Obj:
    return {"name": "main", "image": "registry.example/app:1", "resources": {}, **fields}


def pod(*containers: Obj, labels: Obj | None = None, annotations: Obj | None = None, **spec: Any) -> Obj:
    meta: Obj = {"name": "p", "namespace": "default"}
    if labels:
        meta["labels"] = labels
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": list(containers) or [container()], **spec},
    }


def controller(
    kind: str, *containers: Obj, labels: Obj | None = None, template_labels: Obj | None = None, **spec: Any
) -> Obj:
    template = pod(*containers, labels={"app": "x", **(template_labels or {})}, **spec)
    del template["apiVersion"], template["kind"]
    template["metadata"] = {"labels": template["metadata"]["labels"]}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "d", "namespace": "default", **({"labels": labels} if labels else {})},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "x"}}, "template": template},
    }


def deployment(*containers: Obj, **kw: Any) -> Obj:
    return controller("Deployment", *containers, **kw)


GPU = {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
CPU = {"resources": {"requests": {"cpu": "100m", "memory": "64Mi", "hugepages-2Mi": "2Mi"}}}
MIG = {"resources": {"limits": {"nvidia.com/mig-1g.5gb": "1"}}}
AMD = {"resources": {"requests": {"amd.com/gpu": "1"}, "limits": {"amd.com/gpu": "1"}}}
GAUDI = {"resources": {"limits": {"habana.ai/gaudi": "8"}}}
RDMA = {"resources": {"limits": {"rdma/hca_shared_devices_a": "1"}}}

# (object, old object or None, called by validating, called by mutating)
CASES = [
    pytest.param(pod(container(**CPU)), None, False, True, id="cpu-pod"),
    pytest.param(deployment(container(**CPU)), None, False, False, id="cpu-deployment"),
    pytest.param(controller("StatefulSet", container()), None, False, False, id="cpu-statefulset"),
    pytest.param(pod(container(**GPU)), None, True, True, id="gpu-pod"),
    pytest.param(
        deployment(container(resources={"requests": {"amd.com/gpu": "1"}})),
        None,
        True,
        True,
        id="amd-gpu-request",
    ),
    pytest.param(
        deployment(container(), initContainers=[container(name="warm", **GPU)]),
        None,
        True,
        True,
        id="gpu-init",
    ),
    pytest.param(
        pod(container(resources={"limits": {"nvidia.com/mig-1g.5gb": "1"}})), None, True, True, id="mig-slice"
    ),
    pytest.param(
        deployment(container(resources={"limits": {"vpc.amazonaws.com/efa": "1"}})),
        None,
        True,
        True,
        id="efa-nic",
    ),
    pytest.param(
        pod(container(), resourceClaims=[{"name": "gpu", "resourceClaimName": "a100"}]),
        None,
        True,
        True,
        id="dra",
    ),
    pytest.param(
        deployment(container(resources={"claims": [{"name": "gpu"}]})), None, True, True, id="container-claim"
    ),
    pytest.param(
        pod(container(), labels={"trainguard.dev/tier": "preemptible"}), None, True, True, id="tier-label"
    ),
    pytest.param(
        deployment(container(), labels={"trainguard.dev/role": "training"}), None, True, True, id="role-label"
    ),
    pytest.param(
        deployment(container(), template_labels={"kueue.x-k8s.io/queue-name": "q"}),
        None,
        True,
        True,
        id="queue-label-on-template",
    ),
    pytest.param(
        pod(container(), annotations={"kueue.x-k8s.io/pod-group-total-count": "2"}),
        None,
        True,
        True,
        id="kueue-pod-group-annotation",
    ),
    pytest.param(
        pod(container(), annotations={"scheduling.k8s.io/group-name": "pg"}),
        None,
        True,
        True,
        id="volcano-group",
    ),
    pytest.param(
        pod(container(), labels={"scheduling.x-k8s.io/pod-group": "pg"}), None, True, True, id="coscheduling"
    ),
    pytest.param(
        pod(container(command=["torchrun", "--nnodes=2", "train.py"])),
        None,
        True,
        True,
        id="torchrun-command",
    ),
    pytest.param(
        deployment(container(args=["python", "-m", "torch.distributed.run", "--nnodes=2", "t.py"])),
        None,
        True,
        True,
        id="torch-distributed-run-args",
    ),
    pytest.param(
        pod(container(command=["sh", "-c", "pip install x && torchrun --nnodes 2 t.py"])),
        None,
        True,
        True,
        id="torchrun-in-shell",
    ),
    pytest.param(pod(container(env=[{"name": "PET_NNODES", "value": "2"}])), None, True, True, id="pet-env"),
    pytest.param(
        pod(container(command=["$(LAUNCHER)", "t.py"], env=[{"name": "LAUNCHER", "value": "torchrun"}])),
        None,
        True,
        True,
        id="launcher-in-env-value",
    ),
    pytest.param(
        deployment(container(), nodeSelector={"trainguard.dev/pool": "training"}),
        None,
        True,
        True,
        id="inference-on-training-pool",
    ),
    pytest.param(
        deployment(container(), nodeSelector={"kubernetes.io/os": "linux"}),
        None,
        False,
        False,
        id="os-selector",
    ),
    pytest.param(
        pod(
            container(),
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                        ]
                    }
                }
            },
        ),
        None,
        True,
        True,
        id="node-affinity",
    ),
    pytest.param(
        deployment(
            container(),
            tolerations=[{"key": "trainguard.dev/pool", "value": "training", "effect": "NoSchedule"}],
        ),
        None,
        True,
        True,
        id="pool-toleration",
    ),
    pytest.param(
        deployment(container(), tolerations=[{"operator": "Exists"}]),
        None,
        True,
        True,
        id="wildcard-toleration",
    ),
    pytest.param(
        deployment(container(), tolerations=[{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}]),
        None,
        False,
        False,
        id="unrelated-toleration",
    ),
    pytest.param(
        pod(container(), affinity={"podAntiAffinity": {}}), None, False, True, id="pod-anti-affinity-only"
    ),
    pytest.param(deployment(container()), deployment(container(**GPU)), True, True, id="update-gpu-removed"),
    pytest.param(deployment(container()), deployment(container()), False, False, id="update-both-plain"),
    pytest.param(
        {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "j", "namespace": "default"},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "template": {"spec": {"containers": [container()]}}}
                }
            },
        },
        None,
        True,
        True,
        id="cpu-pytorchjob",
    ),
    pytest.param(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "j", "namespace": "default"},
            "spec": {"template": {"spec": {"containers": [container()], "restartPolicy": "Never"}}},
        },
        None,
        True,
        True,
        id="cpu-batch-job",
    ),
]


@pytest.mark.parametrize(("obj", "old", "v_called", "m_called"), CASES)
def test_match_conditions(obj: Obj, old: Obj | None, v_called: bool, m_called: bool) -> None:
    objects = webhookconfig.render()
    operation = "UPDATE" if old is not None else "CREATE"
    assert evaluate(validating(objects), obj, operation=operation, old=old) is v_called
    assert evaluate(mutating(objects), obj, operation=operation, old=old) is m_called


@pytest.mark.parametrize(
    "pick", [pytest.param(validating, id="validating"), pytest.param(mutating, id="mutating")]
)
def test_own_service_account_is_never_sent(pick: Callable[[list[Obj]], Obj]) -> None:
    hook = pick(webhookconfig.render())
    assert evaluate(hook, pod(container(**GPU)), user=OWN_SA) is False
    assert evaluate(hook, pod(container(**GPU)), user="system:serviceaccount:other:trainguard") is True


# --- matchConditions: node-level Pods never wait on the webhook ----------------------------------


def owned_by(obj: Obj, kind: str, *, controller: bool | None = True, api_version: str = "apps/v1") -> Obj:
    ref: Obj = {"apiVersion": api_version, "kind": kind, "name": "agent", "uid": "1"}
    if controller is not None:
        ref["controller"] = controller
    obj["metadata"]["ownerReferences"] = [ref]
    return obj


DS_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            ]
        }
    }
}
EVERYTHING = [{"operator": "Exists"}]

# (object, old object or None, node-level: never sent to either webhook, and skipped by the engine)
NODE_LEVEL_CASES = [
    pytest.param(owned_by(pod(container(), affinity=DS_AFFINITY), "DaemonSet"), None, True, id="daemonset"),
    # Node-level only without accelerators, whatever the shape: GPUs, MIG slices, other vendors'.
    pytest.param(owned_by(pod(container(**GPU)), "DaemonSet"), None, False, id="daemonset-with-gpu"),
    pytest.param(owned_by(pod(container(**MIG)), "DaemonSet"), None, False, id="daemonset-with-mig-slice"),
    pytest.param(owned_by(pod(container(**AMD)), "DaemonSet"), None, False, id="daemonset-with-amd-gpu"),
    pytest.param(owned_by(pod(container(**GAUDI)), "DaemonSet"), None, False, id="daemonset-with-gaudi"),
    pytest.param(
        owned_by(pod(container(), initContainers=[container(name="init", **GPU)]), "DaemonSet"),
        None,
        False,
        id="daemonset-with-gpu-init-container",
    ),
    pytest.param(
        owned_by(pod(container(), resourceClaims=[{"name": "gpu"}]), "DaemonSet"),
        None,
        False,
        id="daemonset-with-dra-claim",
    ),
    # An agent's own extended resources (an RDMA device, hugepages) are not accelerators.
    pytest.param(owned_by(pod(container(**RDMA)), "DaemonSet"), None, True, id="daemonset-with-rdma-device"),
    pytest.param(pod(container(**RDMA), tolerations=EVERYTHING), None, True, id="tolerates-everything-rdma"),
    pytest.param(
        pod(container(**MIG), priorityClassName="system-cluster-critical"),
        None,
        False,
        id="critical-with-mig",
    ),
    pytest.param(
        owned_by(pod(container(**GPU)), "DaemonSet", controller=None),
        None,
        False,
        id="daemonset-not-controller",
    ),
    pytest.param(
        owned_by(pod(container(**GPU)), "DaemonSet", api_version="example.com/v1"),
        None,
        False,
        id="daemonset-of-another-group",
    ),
    pytest.param(owned_by(pod(container(**GPU)), "ReplicaSet"), None, False, id="replicaset-owned"),
    pytest.param(
        pod(container(**CPU), priorityClassName="system-node-critical"), None, True, id="system-node-critical"
    ),
    pytest.param(
        pod(container(), priorityClassName="system-cluster-critical"),
        None,
        True,
        id="system-cluster-critical",
    ),
    pytest.param(
        pod(container(**GPU), priorityClassName="system-node-critical"), None, False, id="critical-with-gpu"
    ),
    pytest.param(pod(container(), priorityClassName="training-high"), None, False, id="other-priority-class"),
    pytest.param(pod(container(), tolerations=EVERYTHING), None, True, id="tolerates-everything"),
    pytest.param(
        pod(container(), tolerations=[{"operator": "Exists", "effect": "NoSchedule"}]),
        None,
        True,
        id="tolerates-every-noschedule-taint",
    ),
    pytest.param(
        pod(container(), tolerations=[{"key": "gpu", "operator": "Exists"}]),
        None,
        False,
        id="keyed-toleration",
    ),
    pytest.param(pod(container(**GPU), tolerations=EVERYTHING), None, False, id="tolerates-everything-gpu"),
    pytest.param(
        pod(container(), tolerations=EVERYTHING, resourceClaims=[{"name": "gpu"}]),
        None,
        False,
        id="tolerates-everything-dra-claim",
    ),
    pytest.param(
        pod(container(resources={"claims": [{"name": "gpu"}]}), tolerations=EVERYTHING),
        None,
        False,
        id="tolerates-everything-container-claim",
    ),
    pytest.param(
        pod(container(), tolerations=EVERYTHING, initContainers=[container(name="init", **GPU)]),
        None,
        False,
        id="tolerates-everything-init-gpu",
    ),
    pytest.param(deployment(container(), tolerations=EVERYTHING), None, False, id="deployment-is-not-a-pod"),
    pytest.param(
        pod(container(**CPU)),
        owned_by(pod(container(**CPU)), "DaemonSet"),
        False,
        id="update-drops-the-daemonset-owner",
    ),
    pytest.param(
        owned_by(pod(container(**CPU)), "DaemonSet"),
        pod(container(**CPU)),
        False,
        id="update-adds-a-daemonset-owner",
    ),
    pytest.param(
        owned_by(pod(container(**CPU)), "DaemonSet"),
        owned_by(pod(container(**CPU)), "DaemonSet"),
        True,
        id="update-of-a-daemonset-pod",
    ),
    pytest.param(
        owned_by(pod(container(**CPU)), "DaemonSet"),
        owned_by(pod(container(**GPU)), "DaemonSet"),
        False,
        id="update-drops-the-gpus-of-a-daemonset-pod",
    ),
]


def only(hook: Obj, name: str) -> Obj:
    return {**hook, "matchConditions": [c for c in hook["matchConditions"] if c["name"] == name]}


@pytest.mark.parametrize(("obj", "old", "node_level"), NODE_LEVEL_CASES)
@pytest.mark.parametrize("skip_plain_cpu", [True, False], ids=["skip-plain-cpu", "no-skip-plain-cpu"])
def test_node_level_pods_are_sent_to_neither_webhook(
    obj: Obj, old: Obj | None, node_level: bool, skip_plain_cpu: bool
) -> None:
    objects = webhookconfig.render(skip_plain_cpu=skip_plain_cpu)
    operation = "UPDATE" if old is not None else "CREATE"
    for hook in (validating(objects), mutating(objects)):
        assert evaluate(only(hook, "not-node-level"), obj, operation=operation, old=old) is not node_level
        if node_level:
            assert evaluate(hook, obj, operation=operation, old=old) is False


@pytest.mark.parametrize(("obj", "old", "node_level"), NODE_LEVEL_CASES)
def test_the_engine_skips_exactly_the_node_level_pods(obj: Obj, old: Obj | None, node_level: bool) -> None:
    """`trainguard check` and the cluster agree: what the API server never sends, the CLI skips."""
    decision = engine().decide(
        AdmissionInput(
            object=obj, operation="UPDATE" if old else "CREATE", old_object=old, namespace="default"
        )
    )
    skipped = (decision.skipped_reason or "").startswith("node-level Pod: ")
    assert skipped is node_level, decision.skipped_reason
    if node_level:
        assert decision.allowed and decision.patch == []


NPU = {"resources": {"limits": {"example.com/npu-v2": "1"}}}
ACCELERATOR_CONFIG_CASES = [
    # The PlatformConfig's accelerators draw the line on both sides: a DaemonSet's Pod that asks for
    # an accelerator the platform added is decided, one the platform dropped is an agent again.
    pytest.param("", owned_by(pod(container(**NPU)), "DaemonSet"), True, id="unknown-resource-default"),
    pytest.param(
        "accelerators: [nvidia.com/gpu, example.com/npu-*]\n",
        owned_by(pod(container(**NPU)), "DaemonSet"),
        False,
        id="added-prefix",
    ),
    pytest.param(
        "accelerators: [nvidia.com/gpu]\n",
        owned_by(pod(container(**MIG)), "DaemonSet"),
        True,
        id="mig-dropped",
    ),
    pytest.param(
        "accelerators: [nvidia.com/gpu]\n",
        owned_by(pod(container(**GPU)), "DaemonSet"),
        False,
        id="gpu-kept",
    ),
]


@pytest.mark.parametrize(("config_text", "obj", "node_level"), ACCELERATOR_CONFIG_CASES)
def test_the_configured_accelerators_decide_node_level_pods_alike(
    config_text: str, obj: Obj, node_level: bool
) -> None:
    platform = _config_from_text(config_text) if config_text else load_config()
    objects = webhookconfig.render(platform=platform)
    for hook in (validating(objects), mutating(objects)):
        assert evaluate(only(hook, "not-node-level"), obj) is not node_level
    decision = engine(config_text).decide(AdmissionInput(object=obj, operation="CREATE", namespace="default"))
    assert (decision.skipped_reason or "").startswith("node-level Pod: ") is node_level


@pytest.mark.parametrize(
    "obj",
    [
        pytest.param({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}, id="no-spec"),
        pytest.param({"apiVersion": "v1", "kind": "Pod", "spec": {"containers": None}}, id="null-containers"),
        pytest.param(
            {"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {}}}, id="empty-template"
        ),
        pytest.param(pod({"name": "c"}), id="container-without-resources"),
    ],
)
def test_odd_objects_evaluate_without_error(obj: Obj) -> None:
    objects = webhookconfig.render()
    for hook in (validating(objects), mutating(objects)):
        evaluate(hook, obj)  # asserts a boolean result


def config_file(tmp_path: Path, text: str) -> PlatformConfig:
    path = tmp_path / "platform.yaml"
    path.write_text(text)
    return load_config(path)


PLATFORM_CASES = [
    pytest.param(
        "tiers: {priorityClasses: {preemptible: [spot]}}\n",
        pod(container(), priorityClassName="spot"),
        True,
        id="tier-priority-class",
    ),
    pytest.param(
        "tiers: {priorityClasses: {preemptible: [spot]}}\n",
        pod(container(), priorityClassName="infra-high"),
        False,
        id="other-priority-class",
    ),
    pytest.param(
        "pools: {labelKey: node-pool, taintKey: dedicated}\n",
        deployment(container(), nodeSelector={"node-pool": "training"}),
        True,
        id="custom-pool-label",
    ),
    pytest.param(
        "pools: {labelKey: node-pool, taintKey: dedicated}\n",
        deployment(
            container(), tolerations=[{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}]
        ),
        True,
        id="custom-pool-taint",
    ),
    pytest.param(
        "pools: {labelKey: node-pool, taintKey: dedicated}\n",
        deployment(container(), nodeSelector={"trainguard.dev/pool": "training"}),
        False,
        id="default-pool-key-not-configured",
    ),
]


@pytest.mark.parametrize(("config", "obj", "v_called"), PLATFORM_CASES)
def test_match_conditions_follow_the_platform_config(
    tmp_path: Path, config: str, obj: Obj, v_called: bool
) -> None:
    hook = validating(webhookconfig.render(platform=config_file(tmp_path, config)))
    assert evaluate(hook, obj) is v_called


# --- matchConditions against the engine ----------------------------------------------------------


@cache
def engine(config_text: str = "") -> Engine:
    config = load_config() if not config_text else _config_from_text(config_text)
    return build_engine(load_policy_set([default_policies_dir()]), config)


def _config_from_text(text: str) -> PlatformConfig:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "platform.yaml"
        path.write_text(text)
        return load_config(path)


def assert_engine_agrees(
    obj: Obj, old: Obj | None, v_called: bool, m_called: bool, config_text: str = ""
) -> None:
    """A skipped object must be one the engine allows without findings (validating) or patch (mutating)."""
    decision = engine(config_text).decide(
        AdmissionInput(
            object=obj, operation="UPDATE" if old else "CREATE", old_object=old, namespace="default"
        )
    )
    name = obj.get("kind")
    if not v_called:
        assert decision.allowed, (name, decision.violations)
        assert not (decision.violations or decision.warnings or decision.audits), name
    if not m_called:
        assert decision.patch == [], (name, decision.patch)


@pytest.mark.parametrize(("obj", "old", "v_called", "m_called"), CASES)
def test_skipped_objects_are_ones_the_engine_leaves_alone(
    obj: Obj, old: Obj | None, v_called: bool, m_called: bool
) -> None:
    assert_engine_agrees(obj, old, v_called, m_called)


@pytest.mark.parametrize(("config", "obj", "v_called"), PLATFORM_CASES)
def test_skipped_objects_agree_with_the_engine_under_a_platform_config(
    config: str, obj: Obj, v_called: bool
) -> None:
    assert_engine_agrees(obj, None, v_called, True, config)


def corpus_documents() -> list[tuple[str, Obj]]:
    docs = []
    for path in sorted(CORPUS.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and kinds.lookup(str(doc.get("apiVersion")), str(doc.get("kind"))):
                docs.append((str(path.relative_to(CORPUS)), doc))
    return docs


def requests_extended_resources(obj: Any) -> bool:
    if isinstance(obj, dict):
        for key in ("limits", "requests"):
            if isinstance(obj.get(key), dict) and any("/" in str(k) for k in obj[key]):
                return True
        return any(requests_extended_resources(v) for v in obj.values())
    return isinstance(obj, list) and any(requests_extended_resources(v) for v in obj)


@pytest.mark.skipif(not CORPUS.is_dir(), reason="shared corpus not present next to the repository")
def test_corpus_sweep() -> None:
    """Every real workload evaluates without error; GPU workloads are sent; skips agree with the engine."""
    objects = webhookconfig.render()
    v_hook, m_hook = validating(objects), mutating(objects)
    docs = corpus_documents()
    assert len(docs) > 40
    for name, doc in docs:
        v_called, m_called = evaluate(v_hook, doc), evaluate(m_hook, doc)
        if requests_extended_resources(doc):
            assert v_called and m_called, name
        if not (v_called and m_called):
            assert_engine_agrees(doc, None, v_called, m_called)


# --- dump ----------------------------------------------------------------------------------------


def test_yaml_stream_parses_back_and_explains_its_conditions(ca_pem: bytes) -> None:
    objects = webhookconfig.render(ca_bundle=ca_pem)
    text = webhookconfig.dump(objects, "yaml")
    assert list(yaml.safe_load_all(text)) == objects
    header = text.split("apiVersion:")[0]
    assert "not-trainguard-itself:" in header and "not-plain-cpu-infrastructure:" in header
    assert "caBundle is left out" not in header
    assert "&id" not in text and "*id" not in text  # no YAML anchors
    assert all(len(line) <= 100 for line in header.splitlines())


def test_yaml_header_says_when_ca_bundle_is_left_out() -> None:
    assert "caBundle is left out" in webhookconfig.dump(webhookconfig.render())


def test_json_is_a_list() -> None:
    objects = webhookconfig.render()
    assert json.loads(webhookconfig.dump(objects, "json")) == {
        "apiVersion": "v1",
        "kind": "List",
        "items": objects,
    }


# --- the CLI -------------------------------------------------------------------------------------


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["webhook-config", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_prints_the_rendering(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys)
    assert code == 0
    assert out == webhookconfig.dump(webhookconfig.render())


def test_cli_reads_the_ca_from_a_certs_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = certs.write_bundle(tmp_path)
    code, out, _ = run_cli(capsys, "--certs", str(tmp_path), "-o", "json")
    assert code == 0
    items = json.loads(out)["items"]
    assert {base64.b64decode(i["webhooks"][0]["clientConfig"]["caBundle"]) for i in items} == {
        paths.ca_cert.read_bytes()
    }


def test_cli_options_reach_the_objects(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(certs.make_ca()[0])
    cfg = tmp_path / "platform.yaml"
    cfg.write_text("pools: {labelKey: node-pool}\n")
    code, out, _ = run_cli(
        capsys,
        *("--ca-bundle", str(ca), "--url", "https://10.0.0.5:9443", "--name", "tg", "--namespace", "guard"),
        *("--validating-failure-policy", "Ignore", "--mutating-failure-policy", "Fail", "--timeout", "10"),
        *("--exclude-namespace", "monitoring", "--exclude-namespace", "ingress", "--config", str(cfg)),
        *("--service-account", "gatekeeper", "-o", "json"),
    )
    assert code == 0
    objects = json.loads(out)["items"]
    assert objects == webhookconfig.render(
        ca_bundle=ca.read_bytes(),
        url="https://10.0.0.5:9443",
        name="tg",
        namespace="guard",
        service_account="gatekeeper",
        validating_failure_policy="Ignore",
        mutating_failure_policy="Fail",
        timeout_seconds=10,
        excluded_namespaces=["monitoring", "ingress"],
        platform=load_config(cfg),
    )
    v = validating(objects)
    assert v["clientConfig"]["url"] == "https://10.0.0.5:9443/validate"
    assert "system:serviceaccount:guard:gatekeeper" in v["matchConditions"][0]["expression"]
    assert "'node-pool'" in only(v, "not-plain-cpu-infrastructure")["matchConditions"][0]["expression"]


def test_cli_no_skip_plain_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--no-skip-plain-cpu", "-o", "json")
    assert code == 0
    for item in json.loads(out)["items"]:
        names = [c["name"] for c in item["webhooks"][0]["matchConditions"]]
        assert names == ["not-trainguard-itself", "not-node-level"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--url", "https://h:1", "--service", "x"], "--url replaces", id="url-and-service"),
        pytest.param(["--url", "https://h:1", "--port", "443"], "--url replaces", id="url-and-port"),
        pytest.param(["--url", "http://h:1"], "https://", id="url-not-https"),
        pytest.param(["--timeout", "31"], "--timeout", id="timeout"),
        pytest.param(["--ca-bundle", "/nonexistent/ca.pem"], "cannot read the CA bundle", id="missing-ca"),
        pytest.param(["--certs", "/nonexistent"], "cannot read the CA bundle", id="missing-certs-dir"),
        pytest.param(["--config", "/nonexistent.yaml"], "cannot read", id="missing-config"),
    ],
)
def test_cli_user_errors_exit_2(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, out, err = run_cli(capsys, *args)
    assert code == EXIT_ERROR and out == ""
    assert err.startswith("trainguard: error: ") and message in err


def test_cli_refuses_a_serving_cert_as_ca_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = certs.write_bundle(tmp_path)
    code, _, err = run_cli(capsys, "--ca-bundle", str(paths.tls_cert))
    assert code == EXIT_ERROR
    assert f"{paths.tls_cert}: " in err and "did you mean ca.crt" in err


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--validating-failure-policy", "Maybe"], id="bad-policy"),
        pytest.param(["--ca-bundle", "a", "--certs", "b"], id="two-ca-sources"),
        pytest.param(["-o", "xml"], id="bad-output"),
    ],
)
def test_cli_usage_errors(capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["webhook-config", *args])
    assert exc.value.code == EXIT_ERROR
    assert "usage:" in capsys.readouterr().err


@pytest.mark.parametrize("url", ["https://127.0.0.1:8443/validate", "https://h:1/base/mutate/"])
def test_url_naming_an_endpoint_is_refused(url: str) -> None:
    with pytest.raises(WebhookConfigError, match="base URL"):
        webhookconfig.render(url=url)

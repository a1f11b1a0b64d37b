"""deploy/helm/trainguard: lint, render, refuse bad values, and never drift from the kustomize base.

Everything here runs the real `helm` (built once from the helm.sh/helm/v3 Go module, see tools.py);
the API server's verdict on the rendered objects is in test_chart_apiserver.py.
"""

from __future__ import annotations

import base64
import copy
import filecmp
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import CHART, NAMESPACE, ROOT, Helm, Obj, find
from webhook.config import config_from_mapping
from webhook.config import schema as platform_config_schema
from webhook.engine import load_policy_set

HELM_LABELS = (
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/instance",
    "app.kubernetes.io/version",
)
CA_PEM = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


# --- one source: the chart's copies are the files the kustomize base packs -----------------------


@pytest.mark.parametrize(
    ("source", "copy_"),
    [
        pytest.param(ROOT / "policies", CHART / "files" / "policies", id="policies"),
        pytest.param(ROOT / "deploy" / "crds", CHART / "crds", id="crds"),
    ],
)
def test_chart_copies_are_identical_to_their_sources(source: Path, copy_: Path) -> None:
    names = sorted(p.name for p in source.glob("*.yaml"))
    assert names, source
    assert sorted(p.name for p in copy_.glob("*.yaml")) == names, "run deploy/helm/sync-chart-files.sh"
    _, mismatch, errors = filecmp.cmpfiles(source, copy_, names, shallow=False)
    assert mismatch == errors == [], f"{mismatch + errors} differ: run deploy/helm/sync-chart-files.sh"


def test_webhook_configurations_copy_is_identical() -> None:
    source = ROOT / "deploy" / "webhook-configurations.yaml"
    assert filecmp.cmp(source, CHART / "files" / "webhook-configurations.yaml", shallow=False), (
        "run deploy/helm/sync-chart-files.sh"
    )


def test_rbac_copies_are_the_base_and_its_components() -> None:
    sources = {
        "rbac.yaml": ROOT / "deploy" / "rbac.yaml",
        "policy-admin.yaml": ROOT / "deploy" / "rbac-policy-admin.yaml",
    }
    for component in ("self-register", "audit"):
        for path in sorted((ROOT / "deploy" / component).glob("rbac*.yaml")):
            sources[f"{component}.yaml"] = path
    copies = CHART / "files" / "rbac"
    assert sorted(p.name for p in copies.glob("*.yaml")) == sorted(sources), (
        "run deploy/helm/sync-chart-files.sh"
    )
    for name, source in sources.items():
        assert filecmp.cmp(source, copies / name, shallow=False), (
            f"{name}: run deploy/helm/sync-chart-files.sh"
        )


def test_sync_script_reproduces_the_copies(tmp_path: Path) -> None:
    """The script, run on a copy of the tree, changes nothing: the committed copies are its output."""
    tree = tmp_path / "repo"
    shutil.copytree(ROOT / "policies", tree / "policies")
    shutil.copytree(ROOT / "deploy", tree / "deploy", ignore=shutil.ignore_patterns("files", "crds"))
    shutil.copytree(ROOT / "deploy" / "crds", tree / "deploy" / "crds")
    subprocess.run(["sh", str(tree / "deploy" / "helm" / "sync-chart-files.sh")], check=True, timeout=60)
    made = tree / "deploy" / "helm" / "trainguard"
    for sub in ("files/policies", "files/rbac", "crds"):
        names = sorted(p.name for p in (CHART / sub).glob("*.yaml"))
        assert sorted(p.name for p in (made / sub).glob("*.yaml")) == names
        assert filecmp.cmpfiles(CHART / sub, made / sub, names, shallow=False)[1:] == ([], [])


# --- the default render is the kustomize base ---------------------------------------------------


def _kustomize(directory: Path = ROOT / "deploy") -> list[Obj]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with its built-in kustomize) renders deploy/"
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


_HASH_SUFFIX = re.compile(r"^(trainguard-(?:config|policies))-[a-z0-9]{10}$")


def _normalise_kustomize(obj: Obj) -> Obj:
    """Hash-suffixed ConfigMap names become the plain names the chart uses (it rolls by checksum)."""
    text = json.dumps(obj)
    for name in ("trainguard-config", "trainguard-policies"):
        text = re.sub(rf'"{name}-[a-z0-9]{{10}}"', f'"{name}"', text)
    return _parse_config(json.loads(text))


def _normalise_helm(obj: Obj) -> Obj:
    obj = copy.deepcopy(obj)
    for holder in (obj, obj.get("spec", {}).get("template", {})):
        labels = holder.get("metadata", {}).get("labels", {})
        for key in HELM_LABELS:
            labels.pop(key, None)
        annotations = holder.get("metadata", {}).get("annotations")
        if annotations is not None:
            for key in [k for k in annotations if k.startswith("checksum/")]:
                del annotations[key]
            if not annotations:
                del holder["metadata"]["annotations"]
    return _parse_config(obj)


def _parse_config(obj: Obj) -> Obj:
    # The kustomize base's config.yaml carries comments; what the server reads is the mapping.
    if obj["kind"] == "ConfigMap" and obj["metadata"]["name"] == "trainguard-config":
        obj["data"] = {"config.yaml": yaml.safe_load(obj["data"]["config.yaml"])}
    return obj


def _by_key(objects: list[Obj]) -> dict[tuple[str, str], Obj]:
    keyed = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    assert len(keyed) == len(objects), "two objects of one kind and name"
    return keyed


def test_default_render_is_the_kustomize_base(helm: Helm) -> None:
    """Every object of `kubectl kustomize deploy/`, field for field, but the Namespace.

    The chart leaves the Namespace to `helm install --create-namespace` (pre-install hooks run in it
    before any templated object exists); helm's own labels and the checksum annotations that roll
    the pods are the chart's additions. Hooks (the certificate Job) are compared in other tests.
    """
    chart = _by_key([_normalise_helm(o) for o in helm.objects(extra=("--no-hooks",))])
    base = _by_key([_normalise_kustomize(o) for o in _kustomize()])
    assert base.pop(("Namespace", NAMESPACE))["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == (
        "restricted"
    )
    assert sorted(chart) == sorted(base)
    for key, expected in base.items():
        assert chart[key] == expected, f"{key} differs from the kustomize base"


@pytest.mark.parametrize(
    ("component", "values"),
    [
        pytest.param("audit", {"audit": {"enabled": True}}, id="audit"),
        pytest.param("self-register", {"webhook": {"selfRegister": True}}, id="self-register"),
        pytest.param("mtls", {"mtls": {"enabled": True}, "certificates": {"source": "secret"}}, id="mtls"),
    ],
)
def test_component_render_is_the_base_with_that_component(
    helm: Helm, tmp_path: Path, component: str, values: dict[str, Any]
) -> None:
    """Each optional value renders what an overlay of the base plus the kustomize component renders."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(ROOT / "deploy", overlay)],
                "components": [os.path.relpath(ROOT / "deploy" / component, overlay)],
                # The base's own convention, which the component's objects do not inherit.
                "labels": [{"pairs": {"app.kubernetes.io/part-of": "trainguard"}}],
            }
        ),
        encoding="utf-8",
    )
    chart = _by_key([_normalise_helm(o) for o in helm.objects(values, extra=("--no-hooks",), tmp=tmp_path)])
    base = _by_key([_normalise_kustomize(o) for o in _kustomize(overlay)])
    del base[("Namespace", NAMESPACE)]
    assert sorted(chart) == sorted(base)
    for key, expected in base.items():
        assert chart[key] == expected, f"{key} differs from the kustomize base with deploy/{component}"


def test_default_rbac_writes_only_the_ca_bundle_of_its_two_configurations(helm: Helm) -> None:
    """helm template, read as the authorizer would: what the service account may write."""
    objects = helm.objects(extra=("--no-hooks",))
    subject = {"kind": "ServiceAccount", "name": "trainguard", "namespace": NAMESPACE}
    bound = {
        b["roleRef"]["name"] for b in objects if b["kind"].endswith("Binding") and subject in b["subjects"]
    }
    writes = sorted(
        (resource, tuple(rule.get("resourceNames") or ()), tuple(sorted(rule["verbs"])))
        for role in objects
        if role["kind"] in ("ClusterRole", "Role") and role["metadata"]["name"] in bound
        for rule in role["rules"]
        if set(rule["verbs"]) - {"get", "list", "watch"}
        for resource in rule["resources"]
    )
    assert writes == [
        ("mutatingwebhookconfigurations", ("trainguard",), ("get", "patch")),
        ("validatingwebhookconfigurations", ("trainguard",), ("get", "patch")),
    ]
    policy_admin = find(objects, "ClusterRole", "trainguard-policyexceptions-admin")
    assert policy_admin["metadata"]["labels"]["trainguard.dev/aggregate-to-policy-admin"] == "true"
    assert not [k for k in policy_admin["metadata"]["labels"] if k.startswith("rbac.authorization.k8s.io/")]
    assert "trainguard-policy-admin" not in bound


def test_default_render_adds_the_certificate_job_as_hooks(helm: Helm) -> None:
    hooks = [o for o in helm.objects() if "helm.sh/hook" in o["metadata"].get("annotations", {})]
    assert sorted((o["kind"], o["metadata"]["name"]) for o in hooks) == sorted(
        (kind, "trainguard-certgen") for kind in ("ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Job")
    )
    job = find(hooks, "Job", "trainguard-certgen")
    (init,) = job["spec"]["template"]["spec"]["initContainers"]
    assert init["args"][:2] == ["certs", "--out"]
    assert init["args"][init["args"].index("--namespace") + 1] == NAMESPACE
    (apply,) = job["spec"]["template"]["spec"]["containers"]
    assert apply["args"] == ["apply", "-k", "/work"]


# --- value sets ---------------------------------------------------------------------------------


def _deployment(objects: list[Obj]) -> Obj:
    return find(objects, "Deployment", "trainguard")


def _container(objects: list[Obj]) -> Obj:
    (container,) = _deployment(objects)["spec"]["template"]["spec"]["containers"]
    assert isinstance(container, dict)
    return container


def _webhooks(objects: list[Obj]) -> dict[str, Obj]:
    return {
        o["kind"]: o["webhooks"][0]
        for o in objects
        if o["kind"] in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
    }


def _check_replicas(objects: list[Obj]) -> None:
    assert _deployment(objects)["spec"]["replicas"] == 3
    assert find(objects, "PodDisruptionBudget", "trainguard")["spec"]["minAvailable"] == 2


def _check_workers_and_resources(objects: list[Obj]) -> None:
    container = _container(objects)
    assert container["args"][-2:] == ["--workers", "4"]
    assert container["resources"] == {
        "requests": {"cpu": "2", "memory": "512Mi"},
        "limits": {"cpu": "4", "memory": "1Gi"},
    }


def _check_extra_policy(objects: list[Obj]) -> None:
    data = find(objects, "ConfigMap", "trainguard-policies")["data"]
    shipped = sorted(p.name for p in (ROOT / "policies").glob("*.yaml"))
    assert sorted(data) == sorted([*shipped, "team-rule.yaml"])
    assert data["team-rule.yaml"] == EXTRA_POLICY
    with tempfile.TemporaryDirectory() as directory:
        for name, text in data.items():
            Path(directory, name).write_text(text, encoding="utf-8")
        assert "team-rule" in load_policy_set([Path(directory)], "cel-python").names()


def _check_only_extra_policy(objects: list[Obj]) -> None:
    assert sorted(find(objects, "ConfigMap", "trainguard-policies")["data"]) == ["team-rule.yaml"]


def _check_existing_configmap(objects: list[Obj]) -> None:
    assert not [o for o in objects if o["metadata"]["name"] == "trainguard-policies"]
    volumes = {v["name"]: v for v in _deployment(objects)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["policies"]["configMap"]["name"] == "platform-policies"
    assert "checksum/policies" not in _deployment(objects)["spec"]["template"]["metadata"]["annotations"]


def _check_platform_config(objects: list[Obj]) -> None:
    text = find(objects, "ConfigMap", "trainguard-config")["data"]["config.yaml"]
    config = config_from_mapping(yaml.safe_load(text), "config.yaml")  # what the server does at start
    assert config.raw["queues"]["namespaces"] == {"ml-team": "ml-team-queue"}
    assert config.raw["topology"]["rackKey"] == "example.com/rack"
    assert config.excluded_namespaces == ("monitoring", "batch-infra")
    for hook in _webhooks(objects).values():
        assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == [
            "batch-infra",
            "kube-system",
            "monitoring",
            NAMESPACE,
        ]


def _check_failure_policies(objects: list[Obj]) -> None:
    hooks = _webhooks(objects)
    assert hooks["ValidatingWebhookConfiguration"]["failurePolicy"] == "Ignore"
    assert hooks["MutatingWebhookConfiguration"]["failurePolicy"] == "Fail"
    assert {h["timeoutSeconds"] for h in hooks.values()} == {10}
    assert {h["clientConfig"]["caBundle"] for h in hooks.values()} == {
        base64.b64encode(CA_PEM.encode()).decode()
    }
    args = _container(objects)["args"]
    assert "--self-register" not in args and "--ca-bundle" not in args
    roles = [o for o in objects if o["kind"] == "ClusterRole"]
    assert not [
        r for role in roles for r in role["rules"] if "admissionregistration.k8s.io" in r["apiGroups"]
    ]


def _check_no_plain_cpu_skip(objects: list[Obj]) -> None:
    for hook in _webhooks(objects).values():
        names = [c["name"] for c in hook["matchConditions"]]
        assert "not-plain-cpu-infrastructure" not in names and "not-trainguard-itself" in names


def _check_other_namespace(objects: list[Obj]) -> None:
    for hook in _webhooks(objects).values():
        assert hook["clientConfig"]["service"]["namespace"] == "platform"
        assert "platform" in hook["namespaceSelector"]["matchExpressions"][0]["values"]
        itself = next(c for c in hook["matchConditions"] if c["name"] == "not-trainguard-itself")
        assert (
            itself["expression"] == "request.userInfo.username != 'system:serviceaccount:platform:trainguard'"
        )
    binding = find(objects, "ClusterRoleBinding", "trainguard")
    assert binding["subjects"][0]["namespace"] == "platform"


def _check_audit(objects: list[Obj]) -> None:
    container = _container(objects)
    assert container["args"][-2:] == ["--audit", "--report-format=both"]
    assert "POD_NAME" in [e["name"] for e in container["env"]]
    rules = find(objects, "ClusterRole", "trainguard-audit")["rules"]
    assert {"wgpolicyk8s.io"} in [set(r["apiGroups"]) for r in rules]
    lease = find(objects, "Role", "trainguard-audit-lease")["rules"]
    assert lease[0]["resourceNames"] == ["trainguard-audit"]


def _check_existing_secret(objects: list[Obj]) -> None:
    assert not [o for o in objects if o["metadata"]["name"] == "trainguard-certgen"]
    volumes = {v["name"]: v for v in _deployment(objects)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "webhook-tls"


def _check_cert_manager(objects: list[Obj]) -> None:
    certificate = find(objects, "Certificate", "trainguard")
    assert certificate["spec"]["secretName"] == "trainguard-tls"
    assert certificate["spec"]["dnsNames"] == [
        "trainguard",
        f"trainguard.{NAMESPACE}",
        f"trainguard.{NAMESPACE}.svc",
        f"trainguard.{NAMESPACE}.svc.cluster.local",
    ]
    assert certificate["spec"]["issuerRef"] == {
        "name": "trainguard-ca",
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    assert find(objects, "Certificate", "trainguard-ca")["spec"]["isCA"] is True
    assert find(objects, "Issuer", "trainguard-ca")["spec"]["ca"]["secretName"] == "trainguard-ca"
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        annotations = find(objects, kind, "trainguard")["metadata"]["annotations"]
        assert annotations == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/trainguard"}


def _check_cert_manager_issuer(objects: list[Obj]) -> None:
    assert find(objects, "Certificate", "trainguard")["spec"]["issuerRef"] == {
        "name": "platform-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert not [o for o in objects if o["kind"] == "Issuer"]


def _webhook_configuration_rules(objects: list[Obj]) -> list[Obj]:
    return [
        rule
        for role in objects
        if role["kind"] in ("ClusterRole", "Role")
        for rule in role.get("rules") or []
        if "admissionregistration.k8s.io" in rule["apiGroups"]
    ]


def _check_cert_manager_writes_nothing(objects: list[Obj]) -> None:
    args = _container(objects)["args"]
    assert "--inject-ca-bundle" not in args and "--self-register" not in args and "--ca-bundle" not in args
    assert _webhook_configuration_rules(objects) == []


def _check_network_policy_peers(objects: list[Obj]) -> None:
    policy = find(objects, "NetworkPolicy", "trainguard")
    assert policy["spec"]["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "trainguard",
        "app.kubernetes.io/component": "webhook",
    }
    port = [{"port": 8443, "protocol": "TCP"}]
    metrics_port = [{"port": 9443, "protocol": "TCP"}]
    assert policy["spec"]["ingress"] == [
        {
            "from": [
                {"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.244.0.0/16"]}},
                {"ipBlock": {"cidr": "fd00::/8", "except": ["fd00:10:244::/56"]}},
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}},
            ],
            "ports": port,
        },
        {"from": [{"namespaceSelector": {"matchLabels": {"team": "observability"}}}], "ports": metrics_port},
    ]


def _check_metrics_port(objects: list[Obj]) -> None:
    """metrics.port moves /metrics, the Service's and container's `metrics` port and the metrics rule."""
    container = _container(objects)
    assert container["args"][container["args"].index("--metrics-port") + 1] == "9100"
    assert {"name": "metrics", "containerPort": 9100, "protocol": "TCP"} in container["ports"]
    service = find(objects, "Service", "trainguard")
    assert {"name": "metrics", "port": 9100, "targetPort": "metrics", "protocol": "TCP"} in service["spec"][
        "ports"
    ]
    api_server, metrics = find(objects, "NetworkPolicy", "trainguard")["spec"]["ingress"]
    assert api_server["ports"] == [{"port": 8443, "protocol": "TCP"}]
    assert metrics["ports"] == [{"port": 9100, "protocol": "TCP"}]


def _check_no_network_policy(objects: list[Obj]) -> None:
    assert [o for o in objects if o["kind"] == "NetworkPolicy"] == []


def _check_mtls_own_secret(objects: list[Obj]) -> None:
    args = _container(objects)["args"]
    assert args[args.index("--client-ca") + 1] == "/client-ca/apiserver-ca.pem"
    volumes = {v["name"]: v for v in _deployment(objects)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["client-ca"]["secret"]["secretName"] == "apiserver-client-ca"
    mounts = {m["name"]: m["mountPath"] for m in _container(objects)["volumeMounts"]}
    assert mounts["client-ca"] == "/client-ca"


EXTRA_POLICY = """apiVersion: trainguard.dev/v1alpha1
kind: TrainingPolicy
metadata:
  name: team-rule
spec:
  mode: Warn
  match:
    roles: [training]
  validations:
    - expression: "true"
      message: always fine
"""

VALUE_SETS: list[Any] = [
    pytest.param({"replicas": 3, "podDisruptionBudget": {"minAvailable": 2}}, _check_replicas, id="replicas"),
    pytest.param(
        {
            "workers": 4,
            "resources": {
                "requests": {"cpu": "2", "memory": "512Mi"},
                "limits": {"cpu": "4", "memory": "1Gi"},
            },
        },
        _check_workers_and_resources,
        id="workers-and-resources",
    ),
    pytest.param(
        {"policies": {"extra": {"team-rule.yaml": EXTRA_POLICY}}}, _check_extra_policy, id="extra-policy-file"
    ),
    pytest.param(
        {"policies": {"shipped": False, "extra": {"team-rule.yaml": EXTRA_POLICY}}},
        _check_only_extra_policy,
        id="only-extra-policies",
    ),
    pytest.param(
        {"policies": {"existingConfigMap": "platform-policies"}},
        _check_existing_configmap,
        id="existing-configmap",
    ),
    pytest.param(
        {
            "platformConfig": {
                "queues": {"namespaces": {"ml-team": "ml-team-queue"}},
                "topology": {"rackKey": "example.com/rack"},
                "excludedNamespaces": ["monitoring"],
            },
            "excludedNamespaces": ["batch-infra"],
        },
        _check_platform_config,
        id="platform-config-and-excluded-namespaces",
    ),
    pytest.param(
        {
            "webhook": {
                "validating": {"failurePolicy": "Ignore"},
                "mutating": {"failurePolicy": "Fail"},
                "timeoutSeconds": 10,
                "selfRegister": False,
            },
            "certificates": {"source": "secret", "caBundle": CA_PEM},
        },
        _check_failure_policies,
        id="failure-policies-and-timeout",
    ),
    pytest.param({"webhook": {"skipPlainCpu": False}}, _check_no_plain_cpu_skip, id="send-plain-cpu"),
    pytest.param({"audit": {"enabled": True, "reportFormat": "both"}}, _check_audit, id="audit-on"),
    pytest.param(
        {"certificates": {"source": "secret", "secretName": "webhook-tls"}},
        _check_existing_secret,
        id="existing-secret",
    ),
    pytest.param({"certificates": {"source": "certManager"}}, _check_cert_manager, id="cert-manager"),
    pytest.param(
        {"certificates": {"source": "certManager"}},
        _check_cert_manager_writes_nothing,
        id="cert-manager-no-caBundle-writes",
    ),
    pytest.param(
        {
            "networkPolicy": {
                "apiServer": {
                    "cidrs": ["10.0.0.0/8", "fd00::/8"],
                    "except": ["10.244.0.0/16", "fd00:10:244::/56"],
                    "peers": [
                        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}}}
                    ],
                },
                "metrics": {"peers": [{"namespaceSelector": {"matchLabels": {"team": "observability"}}}]},
            }
        },
        _check_network_policy_peers,
        id="network-policy-peers",
    ),
    pytest.param({"networkPolicy": {"enabled": False}}, _check_no_network_policy, id="no-network-policy"),
    pytest.param({"metrics": {"port": 9100}}, _check_metrics_port, id="metrics-port"),
    pytest.param(
        {
            "mtls": {
                "enabled": True,
                "clientCASecret": "apiserver-client-ca",
                "clientCAKey": "apiserver-ca.pem",
            }
        },
        _check_mtls_own_secret,
        id="mtls-own-client-ca-secret",
    ),
    pytest.param(
        {
            "certificates": {
                "source": "certManager",
                "certManager": {
                    "issuerRef": {"name": "platform-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
                },
            }
        },
        _check_cert_manager_issuer,
        id="cert-manager-own-issuer",
    ),
]


@pytest.mark.parametrize(("values", "check"), VALUE_SETS)
def test_value_set_renders_and_lints(helm: Helm, tmp_path: Path, values: dict[str, Any], check: Any) -> None:
    check(helm.objects(values, tmp=tmp_path))
    path = tmp_path / "values.json"
    lint = helm.run("lint", str(CHART), "--strict", "--namespace", NAMESPACE, "--values", str(path))
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_release_namespace_reaches_every_reference(helm: Helm) -> None:
    _check_other_namespace(helm.objects(namespace="platform"))


def test_lint_defaults(helm: Helm) -> None:
    lint = helm.run("lint", str(CHART), "--strict", "--namespace", NAMESPACE)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in lint.stdout


def test_rendered_policies_load_as_the_shipped_set(helm: Helm, tmp_path: Path) -> None:
    data = find(helm.objects(), "ConfigMap", "trainguard-policies")["data"]
    for name, text in data.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    rendered = load_policy_set([tmp_path], "cel-python")
    shipped = load_policy_set([ROOT / "policies"], "cel-python")
    assert rendered.names() == shipped.names()


# --- values the schema (or the chart) refuses -----------------------------------------------------


REFUSED: list[Any] = [
    pytest.param({"replicas": 0}, "replicas", id="no-replicas"),
    pytest.param({"replicas": "two"}, "replicas", id="replicas-not-a-number"),
    pytest.param({"workers": 0}, "workers", id="no-workers"),
    pytest.param(
        {"webhook": {"validating": {"failurePolicy": "Open"}}}, "failurePolicy", id="unknown-failure-policy"
    ),
    pytest.param({"webhook": {"timeoutSeconds": 31}}, "timeoutSeconds", id="timeout-over-30"),
    pytest.param({"certificates": {"source": "vault"}}, "source", id="unknown-certificate-source"),
    pytest.param({"excludedNamespaces": ["Not_A_Namespace"]}, "excludedNamespaces", id="bad-namespace-name"),
    pytest.param({"policies": {"extra": {"rule.txt": "x"}}}, "rule.txt", id="extra-policy-not-yaml"),
    pytest.param({"platformConfig": {"queue": {}}}, "queue", id="unknown-platform-config-field"),
    pytest.param({"platformConfig": {"tiers": {"values": 5}}}, "values", id="platform-config-mistyped-map"),
    pytest.param(
        {"platformConfig": {"topology": {"rackKey": ["a", "b"]}}}, "rackKey", id="platform-config-list"
    ),
    pytest.param(
        {"platformConfig": {"recovery": {"tiers": {"preemptible": {"cooldown": 5}}}}},
        "cooldown",
        id="platform-config-duration-a-number",
    ),
    pytest.param({"replica": 2}, "replica", id="misspelt-top-level-value"),
    pytest.param({"resources": {"limits": {"cpu": "lots"}}}, "cpu", id="bad-quantity"),
    pytest.param({"audit": {"enabled": "yes"}}, "enabled", id="audit-not-a-boolean"),
    # Beyond the schema: combinations the chart itself refuses, with the reason.
    pytest.param(
        {"webhook": {"selfRegister": True, "validating": {"failurePolicy": "Ignore"}}},
        "selfRegister=false",
        id="failure-policy-with-self-registration",
    ),
    pytest.param({"networkPolicy": {"apiServer": {"cidrs": ["10.0.0.1"]}}}, "cidrs", id="cidr-without-mask"),
    pytest.param(
        {"networkPolicy": {"metrics": {"peers": [{"namespace": "monitoring"}]}}},
        "namespace",
        id="peer-with-an-unknown-field",
    ),
    pytest.param({"metrics": {"port": 8443}}, "port", id="metrics-port-is-the-admission-port"),
    pytest.param({"metrics": {"port": "9443"}}, "port", id="metrics-port-not-a-number"),
    pytest.param({"metrics": {"port": 70000}}, "port", id="metrics-port-out-of-range"),
    pytest.param({"mtls": {"enabled": "yes"}}, "enabled", id="mtls-not-a-boolean"),
    pytest.param({"mtls": {"enabled": True}}, "clientCASecret", id="mtls-with-a-ca-whose-key-is-discarded"),
    pytest.param({"policies": {"shipped": False}}, "no policies", id="empty-policy-set"),
]


@pytest.mark.parametrize(("values", "field"), REFUSED)
def test_bad_values_fail_at_template_time(
    helm: Helm, tmp_path: Path, values: dict[str, Any], field: str
) -> None:
    result = helm.template(values, tmp=tmp_path)
    assert result.returncode != 0, result.stdout[:2000]
    assert field in result.stderr, result.stderr
    assert result.stdout == ""


def test_schema_knows_every_platform_config_field() -> None:
    """A PlatformConfig field added to the embedded defaults must be settable through the chart."""
    defaults = yaml.safe_load((ROOT / "webhook" / "_data" / "platform-defaults.yaml").read_text("utf-8"))
    schema = json.loads((CHART / "values.schema.json").read_text("utf-8"))
    assert sorted(schema["properties"]["platformConfig"]["properties"]) == sorted(defaults)


def test_the_chart_types_the_platform_config_with_the_servers_schema() -> None:
    """One schema for `check`, `serve` and `helm install`: the chart's platformConfig block is the
    PlatformConfig schema the server validates with (webhook/_data/platform-config.schema.json)."""
    chart = json.loads((CHART / "values.schema.json").read_text("utf-8"))
    expected = {k: v for k, v in platform_config_schema().items() if k not in ("$schema", "title")}
    assert chart["properties"]["platformConfig"] == expected, (
        "copy webhook/_data/platform-config.schema.json (without $schema and title) into "
        "values.schema.json's properties.platformConfig"
    )

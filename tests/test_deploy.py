"""deploy/: `kubectl kustomize deploy/` renders, the objects are what the API expects, nothing drifts.

Without a cluster, each object is decoded into the Kubernetes client's typed models and encoded
back: a misspelt or misplaced field disappears in the round trip and fails the test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient

from webhook import __version__, webhookconfig
from webhook.config import load_config

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
NAMESPACE = "trainguard-system"
POD_LABELS = {"app.kubernetes.io/name": "trainguard", "app.kubernetes.io/component": "webhook"}

Obj = dict[str, Any]


def kustomize(directory: Path) -> list[Obj]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with its built-in kustomize) is needed to render deploy/"
    result = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d is not None]


@pytest.fixture(scope="module")
def rendered() -> list[Obj]:
    return kustomize(DEPLOY)


def with_component(directory: Path, component: str) -> list[Obj]:
    """deploy/ plus one of its optional components, as an overlay of an operator's renders it."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "resources": [os.path.relpath(DEPLOY, directory)],
                "components": [os.path.relpath(DEPLOY / component, directory)],
            }
        )
    )
    return kustomize(directory)


@pytest.fixture(scope="module")
def rendered_with_self_registration(tmp_path_factory: pytest.TempPathFactory) -> list[Obj]:
    return with_component(tmp_path_factory.mktemp("overlay"), "self-register")


def one(objects: list[Obj], kind: str, name_prefix: str = "trainguard") -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].startswith(name_prefix)]
    assert len(found) == 1, (kind, name_prefix, [o["metadata"]["name"] for o in found])
    return found[0]


@pytest.fixture(scope="module")
def pod_spec(rendered: list[Obj]) -> Obj:
    spec: Obj = one(rendered, "Deployment")["spec"]["template"]["spec"]
    return spec


@pytest.fixture(scope="module")
def container(pod_spec: Obj) -> Obj:
    (c,) = pod_spec["containers"]
    assert isinstance(c, dict)
    return c


# --- the rendering -------------------------------------------------------------------------------


def test_renders_the_expected_objects(rendered: list[Obj]) -> None:
    kinds = sorted(
        (o["kind"], o["metadata"]["name"].rsplit("-", 1)[0] if o["kind"] == "ConfigMap" else "")
        for o in rendered
    )
    assert kinds == sorted(
        [
            ("Namespace", ""),
            ("ServiceAccount", ""),
            ("ClusterRole", ""),
            ("ClusterRoleBinding", ""),
            ("ClusterRole", ""),  # trainguard-policy-admin, aggregated
            ("ClusterRole", ""),  # trainguard-policyexceptions-admin, aggregated into it
            ("NetworkPolicy", ""),
            ("ResourceQuota", ""),
            ("Deployment", ""),
            ("Service", ""),
            ("PodDisruptionBudget", ""),
            ("ConfigMap", "trainguard-config"),
            ("ConfigMap", "trainguard-policies"),
            ("ValidatingWebhookConfiguration", ""),
            ("MutatingWebhookConfiguration", ""),
        ]
    )


CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
}


def test_namespaced_objects_live_in_trainguard_system(rendered: list[Obj]) -> None:
    for obj in rendered:
        if obj["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in obj["metadata"], obj["kind"]
        else:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["kind"]


def test_every_object_survives_the_typed_round_trip(rendered: list[Obj]) -> None:
    client = ApiClient()
    encode: Callable[[Any], Any] = client.sanitize_for_serialization
    for obj in rendered:
        version = obj["apiVersion"].rpartition("/")[2]
        # The generated decoder behind deserialize(), whose public signature changed across client
        # versions (a response object, later the body text); this one has stayed the same.
        model = client._ApiClient__deserialize(obj, f"{version.capitalize()}{obj['kind']}")  # type: ignore[attr-defined]
        assert encode(model) == obj, obj["kind"]


# --- the Deployment ------------------------------------------------------------------------------


def test_deployment_shape(rendered: list[Obj], pod_spec: Obj) -> None:
    deployment = one(rendered, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["selector"]["matchLabels"] == POD_LABELS
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert POD_LABELS.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    anti = pod_spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [t["podAffinityTerm"]["topologyKey"] for t in anti] == ["kubernetes.io/hostname"]
    assert anti[0]["podAffinityTerm"]["labelSelector"]["matchLabels"] == POD_LABELS
    (spread,) = pod_spec["topologySpreadConstraints"]
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"
    assert spread["labelSelector"]["matchLabels"] == POD_LABELS


def test_pod_security(pod_spec: Obj, container: Obj, rendered: list[Obj]) -> None:
    assert pod_spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "runAsGroup": 65532,
        "fsGroup": 65532,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert container["securityContext"] == {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    # Token only in this pod, not in whatever else might run as the account.
    assert pod_spec["automountServiceAccountToken"] is True
    assert one(rendered, "ServiceAccount")["automountServiceAccountToken"] is False
    assert pod_spec["serviceAccountName"] == one(rendered, "ServiceAccount")["metadata"]["name"]
    assert (
        one(rendered, "Namespace")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    )


def test_critical_priority_is_admitted_by_the_quota(pod_spec: Obj, rendered: list[Obj]) -> None:
    quota = one(rendered, "ResourceQuota")["spec"]
    (expr,) = quota["scopeSelector"]["matchExpressions"]
    assert (expr["scopeName"], expr["operator"]) == ("PriorityClass", "In")
    assert pod_spec["priorityClassName"] in expr["values"]
    assert int(quota["hard"]["pods"]) >= 3  # two replicas and a surge pod


def test_container_args_probes_and_resources(container: Obj) -> None:
    assert container["image"] == f"trainguard:{__version__}"
    assert container["args"] == [
        "serve",
        *("--tls-cert", "/certs/tls.crt", "--tls-key", "/certs/tls.key"),
        *("--policies", "/etc/trainguard/policies", "--config", "/etc/trainguard/config.yaml"),
        *("--in-cluster", "--ca-bundle", "/certs/ca.crt", "--inject-ca-bundle"),
        *("--metrics-port", "9443"),
    ]
    pod_namespace = {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}
    assert pod_namespace in container["env"]
    assert container["ports"] == [
        {"name": "https", "containerPort": 8443, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9443, "protocol": "TCP"},
    ]
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "https", "scheme": "HTTPS"}
    assert container["resources"] == {
        "requests": {"cpu": "200m", "memory": "192Mi"},
        "limits": {"cpu": "2", "memory": "384Mi"},  # from tests/bench/bench_abuse.py's measured peak
    }


def test_volumes_are_the_tls_secret_and_the_generated_config_maps(
    pod_spec: Obj, container: Obj, rendered: list[Obj]
) -> None:
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "trainguard-tls"
    config_maps = {o["metadata"]["name"] for o in rendered if o["kind"] == "ConfigMap"}
    for name in ("policies", "config"):
        assert volumes[name]["configMap"]["name"] in config_maps  # the hash-suffixed generated name
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/certs"]["name"] == "tls" and "subPath" not in mounts["/certs"]  # rotation reaches the pod
    assert mounts["/etc/trainguard/policies"]["name"] == "policies"
    assert mounts["/etc/trainguard/config.yaml"] == {
        "name": "config",
        "mountPath": "/etc/trainguard/config.yaml",
        "subPath": "config.yaml",
        "readOnly": True,
    }
    assert mounts["/tmp"]["name"] == "tmp"


def test_service_and_pdb_select_the_pods(rendered: list[Obj], container: Obj) -> None:
    service = one(rendered, "Service")["spec"]
    assert service["selector"] == POD_LABELS
    assert service["ports"] == [
        {"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"},
        {"name": "metrics", "port": 9443, "targetPort": "metrics", "protocol": "TCP"},
    ]
    assert {p["name"] for p in container["ports"]} >= {"https"}
    pdb = one(rendered, "PodDisruptionBudget")["spec"]
    assert pdb == {"minAvailable": 1, "selector": {"matchLabels": POD_LABELS}}


# --- RBAC ----------------------------------------------------------------------------------------

SELF_REGISTER = "trainguard-self-register"
READ = ["get", "list", "watch"]


def named(objects: list[Obj], kind: str, name: str) -> Obj:
    (found,) = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


def grants(role: Obj) -> dict[tuple[str, str], list[str]]:
    """(API group, resource) -> verbs, for the rules that name no resourceNames."""
    return {
        (group, resource): sorted(rule["verbs"])
        for rule in role["rules"]
        if "resourceNames" not in rule
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }


def test_the_base_role_reads_what_the_caches_watch_and_nothing_else(rendered: list[Obj]) -> None:
    from kubernetes import client

    from webhook.cluster import ClusterCaches

    watched = ClusterCaches(client.ApiClient(), on_change=lambda *_: None).caches
    assert grants(named(rendered, "ClusterRole", "trainguard")) == {
        ("scheduling.k8s.io", "priorityclasses"): READ,
        ("trainer.kubeflow.org", "trainingruntimes"): READ,
        ("trainer.kubeflow.org", "clustertrainingruntimes"): READ,
        ("trainguard.dev", "policyexceptions"): READ,
    }
    # The code and the role agree: every watch has its grant, every grant its watch.
    assert sorted(watched) == sorted(r for _, r in grants(named(rendered, "ClusterRole", "trainguard")))


WEBHOOK_CONFIGURATIONS = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")


def service_account_rules(objects: list[Obj]) -> list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]:
    """(group, resource, resourceNames, verbs) of every rule bound to trainguard's service account."""
    subject = {"kind": "ServiceAccount", "name": "trainguard", "namespace": NAMESPACE}
    bound = {
        (b["roleRef"]["kind"], b["roleRef"]["name"])
        for b in objects
        if b["kind"] in ("ClusterRoleBinding", "RoleBinding") and subject in b["subjects"]
    }
    return sorted(
        (group, resource, tuple(rule.get("resourceNames") or ()), tuple(sorted(rule["verbs"])))
        for role in objects
        if (role["kind"], role["metadata"]["name"]) in bound
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    )


def test_the_default_install_writes_only_the_ca_bundle_of_its_own_two_configurations(
    rendered: list[Obj],
) -> None:
    writes = [r for r in service_account_rules(rendered) if set(r[3]) - set(READ)]
    assert writes == [
        ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", ("trainguard",), ("get", "patch")),
        (
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            ("trainguard",),
            ("get", "patch"),
        ),
    ]
    # The names RBAC allows are the names of the configurations the install itself creates.
    created = sorted(
        (o["kind"], o["metadata"]["name"]) for o in rendered if o["kind"].endswith("Configuration")
    )
    assert created == [
        ("MutatingWebhookConfiguration", "trainguard"),
        ("ValidatingWebhookConfiguration", "trainguard"),
    ]
    (container,) = one(rendered, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--self-register" not in container["args"] and "--inject-ca-bundle" in container["args"]


def test_no_unnamed_write_and_no_create_in_the_default_install(rendered: list[Obj]) -> None:
    for group, resource, names, verbs in service_account_rules(rendered):
        assert "create" not in verbs, (group, resource)
        if set(verbs) - set(READ):
            assert names, (group, resource, verbs)
        if group == "admissionregistration.k8s.io":
            assert names == ("trainguard",) and "list" not in verbs and "watch" not in verbs


@pytest.mark.parametrize("resource", WEBHOOK_CONFIGURATIONS)
def test_self_registration_is_the_only_create_and_an_opt_in(
    rendered_with_self_registration: list[Obj], resource: str
) -> None:
    rules = [
        r
        for r in service_account_rules(rendered_with_self_registration)
        if r[:2] == ("admissionregistration.k8s.io", resource)
    ]
    assert rules == [
        ("admissionregistration.k8s.io", resource, (), ("create",)),
        ("admissionregistration.k8s.io", resource, ("trainguard",), ("get", "patch")),
        ("admissionregistration.k8s.io", resource, ("trainguard",), ("get", "patch", "update")),
    ]
    role = named(rendered_with_self_registration, "ClusterRole", SELF_REGISTER)
    assert {g for r in role["rules"] for g in r["apiGroups"]} == {"admissionregistration.k8s.io"}
    (container,) = one(rendered_with_self_registration, "Deployment")["spec"]["template"]["spec"][
        "containers"
    ]
    assert container["args"][-1] == "--self-register"


@pytest.mark.parametrize("name", ["trainguard"])
def test_bindings_grant_the_roles_to_the_service_account(rendered: list[Obj], name: str) -> None:
    binding = named(rendered, "ClusterRoleBinding", name)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": named(rendered, "ClusterRole", name)["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "trainguard", "namespace": NAMESPACE}]
    assert [b["metadata"]["name"] for b in rendered if b["kind"].endswith("Binding")] == [name]


# --- PolicyException administrators -------------------------------------------------------------

AGGREGATE = "trainguard.dev/aggregate-to-policy-admin"
BUILT_IN_AGGREGATION = tuple(f"rbac.authorization.k8s.io/aggregate-to-{r}" for r in ("admin", "edit", "view"))


def test_policy_admin_aggregates_the_exception_rules(rendered: list[Obj]) -> None:
    admin = named(rendered, "ClusterRole", "trainguard-policy-admin")
    assert admin["aggregationRule"] == {"clusterRoleSelectors": [{"matchLabels": {AGGREGATE: "true"}}]}
    aggregated = [
        r
        for r in rendered
        if r["kind"] == "ClusterRole" and r["metadata"].get("labels", {}).get(AGGREGATE) == "true"
    ]
    assert [r["metadata"]["name"] for r in aggregated] == ["trainguard-policyexceptions-admin"]
    (rule,) = aggregated[0]["rules"]
    assert (rule["apiGroups"], rule["resources"]) == (["trainguard.dev"], ["policyexceptions"])
    assert {"create", "update", "patch", "delete"} <= set(rule["verbs"])


@pytest.mark.parametrize("label", BUILT_IN_AGGREGATION)
def test_no_built_in_role_gets_write_access_to_exceptions(rendered: list[Obj], label: str) -> None:
    """`edit` (and `admin`, `view`) aggregate ClusterRoles by label: none in the install carries one."""
    assert [r["metadata"]["name"] for r in rendered if label in r["metadata"].get("labels", {})] == []


# --- NetworkPolicy -------------------------------------------------------------------------------


def test_the_network_policy_gives_each_peer_its_own_port(rendered: list[Obj], container: Obj) -> None:
    """The API server reaches the admission port only, scrapers the metrics port only: the server
    answers /metrics on the metrics port alone (`--metrics-port`), so no peer reaches both."""
    policy = one(rendered, "NetworkPolicy")
    template = one(rendered, "Deployment")["spec"]["template"]
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = container["args"]
    assert args[args.index("--metrics-port") + 1] == str(ports["metrics"])
    for rule in policy["spec"]["ingress"]:
        assert rule["from"], "a rule without peers would admit every source"
    api_server, metrics = policy["spec"]["ingress"]
    assert api_server["ports"] == [{"port": ports["https"], "protocol": "TCP"}]
    assert {p["ipBlock"]["cidr"] for p in api_server["from"]} == {"0.0.0.0/0", "::/0"}
    assert metrics["ports"] == [{"port": ports["metrics"], "protocol": "TCP"}]
    assert metrics["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    ]


def test_the_mtls_component_sets_the_client_ca(tmp_path: Path) -> None:
    objects = with_component(tmp_path / "overlay", "mtls")
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["args"][-2:] == ["--client-ca", "/certs/ca.crt"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/certs" in mounts


# --- drift ---------------------------------------------------------------------------------------


def test_webhook_configurations_match_the_renderer() -> None:
    """deploy/webhook-configurations.yaml is `trainguard webhook-config` output; regenerate it with
    `trainguard webhook-config > deploy/webhook-configurations.yaml`."""
    expected = webhookconfig.dump(webhookconfig.render())
    assert (DEPLOY / "webhook-configurations.yaml").read_text() == expected


def test_rendered_webhook_configurations_point_at_the_service(rendered: list[Obj]) -> None:
    service = one(rendered, "Service")
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        (hook,) = one(rendered, kind)["webhooks"]
        ref = hook["clientConfig"]["service"]
        assert (ref["name"], ref["namespace"], ref["port"]) == (
            service["metadata"]["name"],
            service["metadata"]["namespace"],
            service["spec"]["ports"][0]["port"],
        )
        assert "caBundle" not in hook["clientConfig"]  # filled in by the server; apply -k leaves it alone
        (selector,) = hook["namespaceSelector"]["matchExpressions"]
        assert NAMESPACE in selector["values"]


def policy_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())


def policy_drift(root: Path) -> list[str]:
    """What differs between root/policies and its copies in root/deploy/policies; empty: nothing."""
    source = policy_files(root / "policies")
    copies = [n for n in policy_files(root / "deploy" / "policies") if n != "kustomization.yaml"]
    problems = [f"deploy/policies/{n}: not in policies/" for n in sorted(set(copies) - set(source))]
    problems += [f"policies/{n}: no copy in deploy/policies/" for n in sorted(set(source) - set(copies))]
    for name in sorted(set(source) & set(copies)):
        if (root / "deploy" / "policies" / name).read_bytes() != (root / "policies" / name).read_bytes():
            problems.append(f"deploy/policies/{name} differs from policies/{name}")
    kustomization = yaml.safe_load((root / "deploy" / "policies" / "kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    if (generator["name"], generator["files"]) != ("trainguard-policies", source):
        problems.append(f"deploy/policies/kustomization.yaml lists {generator['files']}, not {source}")
    return problems


def test_deploy_policies_are_copies_of_policies() -> None:
    """kustomize reads nothing outside deploy/, symlinks included: deploy/policies/ holds copies."""
    assert policy_files(ROOT / "policies"), "policies/ holds no policy file"
    assert policy_drift(ROOT) == [], "run deploy/sync-policies.sh"


def test_sync_script_repairs_drift_and_is_idempotent(tmp_path: Path) -> None:
    for part in ("policies", "deploy"):
        shutil.copytree(ROOT / part, tmp_path / part)
    policies = tmp_path / "deploy" / "policies"
    (policies / "stale.yaml").write_text("gone after sync\n")
    (tmp_path / "policies" / "new-policy.yaml").write_text("kind: TrainingPolicy\n")
    script = tmp_path / "deploy" / "sync-policies.sh"
    subprocess.run(["sh", str(script)], check=True, timeout=60)
    assert not (policies / "stale.yaml").exists()
    assert policy_drift(tmp_path) == []
    before = {p.name: p.read_bytes() for p in policies.iterdir()}
    subprocess.run(["sh", str(script)], check=True, timeout=60)
    assert {p.name: p.read_bytes() for p in policies.iterdir()} == before


def test_policies_config_map_holds_every_policy(rendered: list[Obj]) -> None:
    data = one(rendered, "ConfigMap", "trainguard-policies")["data"]
    assert sorted(data) == policy_files(ROOT / "policies")
    for name, text in data.items():
        assert text == (ROOT / "policies" / name).read_text()


def test_config_map_holds_a_valid_platform_config(rendered: list[Obj]) -> None:
    data = one(rendered, "ConfigMap", "trainguard-config")["data"]
    assert sorted(data) == ["config.yaml"]
    assert load_config(DEPLOY / "config.yaml").raw == load_config().raw  # as shipped: the defaults


def test_image_tag_is_the_package_version() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": "trainguard", "newName": "trainguard", "newTag": __version__}]


# --- the image -----------------------------------------------------------------------------------


def instructions(path: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Containerfile, continuation lines joined, comments dropped."""
    joined = path.read_text().replace("\\\n", " ")
    lines = [
        line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


CHECKS: list[Any] = [
    pytest.param(
        lambda i: [a for k, a in i if k == "FROM"] == ["python:3.11-slim AS build", "python:3.11-slim"],
        id="base",
    ),
    pytest.param(lambda i: [a for k, a in i if k == "USER"] == ["65532:65532"], id="non-root"),
    pytest.param(
        lambda i: i[-2:] == [("ENTRYPOINT", '["trainguard"]'), ("CMD", '["--help"]')], id="entrypoint"
    ),
    pytest.param(
        lambda i: any(k == "RUN" and "pip install" in a and ".whl" in a for k, a in i), id="installs-wheel"
    ),
    pytest.param(lambda i: ("EXPOSE", "8443") in i, id="port"),
]


@pytest.mark.parametrize("check", CHECKS)
def test_containerfile(check: Callable[[list[tuple[str, str]]], bool]) -> None:
    assert check(instructions(DEPLOY / "Containerfile"))


def test_user_comes_after_the_last_install() -> None:
    steps = instructions(DEPLOY / "Containerfile")
    last_run = max(i for i, (k, _) in enumerate(steps) if k == "RUN")
    assert [k for k, _ in steps[last_run:]].index("USER") > 0

"""trainguard's ValidatingWebhookConfiguration and MutatingWebhookConfiguration, as plain dicts.

Pure rendering: `trainguard webhook-config` prints `render()`'s objects, the server creates or
patches the same objects when it registers itself, and `deploy/webhook-configurations.yaml` is
the rendering with default options and no caBundle (tests/test_deploy.py checks it for drift).
"""

from __future__ import annotations

import json
import textwrap
import urllib.parse
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import yaml

from webhook import certs, install_names, kinds
from webhook.accelerators import split_names
from webhook.config import PlatformConfig, load_config
from webhook.errors import TrainguardError
from webhook.nodelevel import CRITICAL_PRIORITY_CLASSES

FailurePolicy = Literal["Fail", "Ignore"]
OutputFormat = Literal["yaml", "json"]

API_VERSION = "admissionregistration.k8s.io/v1"
VALIDATING_WEBHOOK = "validate.trainguard.dev"
MUTATING_WEBHOOK = "mutate.trainguard.dev"
VALIDATE_PATH, MUTATE_PATH = "/validate", "/mutate"

# Label and annotation domains whose keys change a decision even on a CPU-only object: trainguard's
# own (tier, role, checkpoint spec, topology SLO) and the gang and queue machinery (Kueue queue and
# pod-group keys, coscheduling pod-group label, Volcano group-name annotation and volcano.sh keys).
DECISION_KEY_PREFIXES = (
    "trainguard.dev/",
    "kueue.x-k8s.io/",
    "scheduling.x-k8s.io/",
    "scheduling.k8s.io/",
    "volcano.sh/",
)
# Command-line and environment hints of a distributed PyTorch launch (torchrun-consistency and
# class B/C detection look at them, GPUs or not: gloo runs multi-node on CPUs).
TORCH_LAUNCH_HINTS = ("torchrun", "torch.distributed")
TORCH_ENV_PREFIX = "PET_"

# Which objects the plain-CPU matchCondition may skip, per webhook: (API group, resource).
PLAIN_CPU_VALIDATING: tuple[tuple[str, str], ...] = (
    ("", "pods"),
    ("apps", "deployments"),
    ("apps", "statefulsets"),
)
# Not Pods: mutate-class-label labels every training Pod, whatever it requests; Deployments and
# StatefulSets are inference, which no default mutation touches.
PLAIN_CPU_MUTATING: tuple[tuple[str, str], ...] = (("apps", "deployments"), ("apps", "statefulsets"))

# Why each matchCondition exists. The API server calls the webhook only when every condition is
# true; these texts head the YAML output, since the objects themselves have no place for comments.
EXPLANATIONS = {
    "not-trainguard-itself": (
        "trainguard's own service account creates no workloads; skipping it keeps the webhook from "
        "ever waiting on itself"
    ),
    "not-node-level": (
        "a Pod that requests no accelerator (GPU, MIG slice, TPU, Gaudi, Neuron) and no DRA claim and "
        "is owned by a DaemonSet, has priority class system-node-critical or system-cluster-critical, "
        "or tolerates every taint (operator Exists, no key): a node agent (CNI, CSI, device plugin) "
        "must start even while the webhook is down, on the webhook's own node too. A Pod of these "
        "shapes that asks for accelerators is decided like any other. The engine leaves the same "
        "Pods alone as well (webhook/nodelevel.py)"
    ),
    "not-plain-cpu-infrastructure": (
        "a Pod, Deployment or StatefulSet (validating) or a Deployment or StatefulSet (mutating) that "
        "requests no extended resource (GPU or other accelerator) and no DRA claim, carries no "
        "trainguard, Kueue or gang label or annotation, launches no torchrun, targets no pool (node "
        "selector, node affinity, pool or wildcard toleration) and has no tier priority class: no "
        "default policy decides it. The mutating webhook still sees every Pod, because every training "
        "Pod gets the trainguard.dev/class label, CPU or not"
    ),
}


class WebhookConfigError(TrainguardError):
    """Options that cannot make a valid webhook configuration."""


def render(
    *,
    ca_bundle: bytes | None = None,
    service: str = install_names.SERVICE,
    namespace: str = install_names.NAMESPACE,
    port: int = install_names.SERVICE_PORT,
    url: str | None = None,
    name: str = install_names.CONFIGURATIONS,
    service_account: str = install_names.SERVICE_ACCOUNT,
    validating_failure_policy: FailurePolicy = "Fail",
    mutating_failure_policy: FailurePolicy = "Ignore",
    timeout_seconds: int = 5,
    excluded_namespaces: Iterable[str] = (),
    platform: PlatformConfig | None = None,
    skip_plain_cpu: bool = True,
) -> list[dict[str, Any]]:
    """The ValidatingWebhookConfiguration and the MutatingWebhookConfiguration, in that order.

    `ca_bundle` is the CA's PEM; None leaves `caBundle` out (the server fills it when it registers
    itself). `url` replaces the Service reference (a webhook outside the cluster). `namespace` is
    trainguard's own namespace: excluded from admission and home of `service_account`.
    """
    _check_options(port, url, timeout_seconds, validating_failure_policy, mutating_failure_policy)
    platform = platform or load_config()
    bundle = certs.ca_bundle(ca_bundle) if ca_bundle is not None else None
    excluded = [*excluded_namespaces, *platform.excluded_namespaces]

    def webhook(
        hook_name: str, path: str, policy: FailurePolicy, plain: Sequence[tuple[str, str]]
    ) -> dict[str, Any]:
        # Built afresh for each webhook: no object is shared, so a caller may edit one of them.
        return {
            "name": hook_name,
            "clientConfig": client_config(path, service, namespace, port, url, bundle),
            "rules": rules(),
            "matchPolicy": "Equivalent",
            "namespaceSelector": namespace_selector(namespace, excluded),
            "matchConditions": match_conditions(
                namespace, service_account, platform, plain if skip_plain_cpu else ()
            ),
            "failurePolicy": policy,
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": timeout_seconds,
        }

    validating = webhook(VALIDATING_WEBHOOK, VALIDATE_PATH, validating_failure_policy, PLAIN_CPU_VALIDATING)
    mutating = webhook(MUTATING_WEBHOOK, MUTATE_PATH, mutating_failure_policy, PLAIN_CPU_MUTATING)
    # Another webhook (Kueue's, for one) may change the object after us: look again then, so that
    # the decision is taken on what will be stored. Our mutations are idempotent.
    mutating["reinvocationPolicy"] = "IfNeeded"
    return [
        _configuration("ValidatingWebhookConfiguration", name, validating),
        _configuration("MutatingWebhookConfiguration", name, mutating),
    ]


def rules() -> list[dict[str, Any]]:
    """One rule per API group of `kinds.KINDS`, CREATE and UPDATE, every version the table lists.

    A group's rule is the product of its versions and resources, so it may name a pair that does
    not exist (pytorchjobs in v2beta1); the API server never sends such a request, so it is harmless.
    """
    versions: dict[str, dict[str, None]] = {}
    resources: dict[str, set[str]] = {}
    for info in kinds.KINDS:
        versions.setdefault(info.group, {}).update(dict.fromkeys(info.versions))
        resources.setdefault(info.group, set()).add(info.plural)
    return [
        {
            "apiGroups": [group],
            "apiVersions": list(versions[group]),
            "resources": sorted(resources[group]),
            "operations": ["CREATE", "UPDATE"],
            "scope": "*",
        }
        for group in sorted(versions)
    ]


def namespace_selector(namespace: str, excluded: Iterable[str] = ()) -> dict[str, Any]:
    """Exclude kube-system, trainguard's own namespace (its pods must start without it) and `excluded`."""
    names = sorted({"kube-system", namespace, *excluded})
    return {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": names}]
    }


def client_config(
    path: str, service: str, namespace: str, port: int, url: str | None, bundle: str | None
) -> dict[str, Any]:
    """A Service reference, or a URL for a webhook that runs outside the cluster."""
    config: dict[str, Any]
    if url is not None:
        config = {"url": url.rstrip("/") + path}
    else:
        config = {"service": {"name": service, "namespace": namespace, "path": path, "port": port}}
    if bundle is not None:
        config["caBundle"] = bundle
    return config


def match_conditions(
    namespace: str,
    service_account: str,
    platform: PlatformConfig,
    plain_cpu_resources: Sequence[tuple[str, str]] = PLAIN_CPU_VALIDATING,
) -> list[dict[str, str]]:
    """The CEL matchConditions; `EXPLANATIONS` says why each one is safe.

    `plain_cpu_resources` lists the (group, resource) pairs skipped when plain CPU; empty: none.
    """
    username = f"system:serviceaccount:{namespace}:{service_account}"
    conditions = [
        {"name": "not-trainguard-itself", "expression": f"request.userInfo.username != {_q(username)}"},
        # Always there, whatever else is skipped: without it the webhook could block its own recovery.
        {"name": "not-node-level", "expression": _not_node_level(platform)},
    ]
    if plain_cpu_resources:
        conditions.append(
            {
                "name": "not-plain-cpu-infrastructure",
                "expression": _not_plain_cpu(platform, plain_cpu_resources),
            }
        )
    return conditions


def dump(objects: Sequence[dict[str, Any]], output: OutputFormat = "yaml") -> str:
    """YAML stream (headed by the matchConditions' explanations) or a JSON `List`."""
    if output == "json":
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}, indent=2) + "\n"
    docs = [yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=100) for obj in objects]
    return _header(objects) + "---\n".join(docs)


def _not_plain_cpu(platform: PlatformConfig, resources: Sequence[tuple[str, str]]) -> str:
    tier_classes = sorted(
        {str(n) for names in (platform.raw["tiers"]["priorityClasses"] or {}).values() for n in names or ()}
    )
    kind = " ||\n ".join(
        f"(request.resource.group == {_q(group)} && request.resource.resource == {_q(resource)})"
        for group, resource in resources
    )
    # On UPDATE the old object must be plain too: removing a GPU or a label is a decision to see.
    plain = (
        "(request.operation == 'UPDATE' ? [object, oldObject] : [object]).all(o,\n"
        # A Deployment or StatefulSet is judged by its pod template, a Pod by itself.
        "  [has(o.spec) && has(o.spec.template) ? o.spec.template : o].all(t,\n"
        + _indent(_plain_metadata(), 4)
        + " &&\n"
        + _indent(_plain_pod_spec([platform.pool_label_key], [platform.pool_taint_key], tier_classes), 4)
        + "))"
    )
    return "!(\n" + _indent(f"({kind}) &&\n{plain}", 2) + "\n)"


def _not_node_level(platform: PlatformConfig) -> str:
    """CEL twin of `nodelevel.node_level_reason`: false for a node-level Pod (on UPDATE, old and new)."""
    owned = (
        "(has(o.metadata) && has(o.metadata.ownerReferences) && o.metadata.ownerReferences.exists(r,\n"
        "  has(r.kind) && r.kind == 'DaemonSet' && has(r.apiVersion) && r.apiVersion.startsWith('apps/') &&\n"
        "  has(r.controller) && r.controller == true))"
    )
    agent = (
        "[has(s.priorityClassName) ? s.priorityClassName : ''].exists(p, p in "
        f"{_list(CRITICAL_PRIORITY_CLASSES)}) ||\n"
        "(has(s.tolerations) && s.tolerations.exists(tol,\n"
        "  (!has(tol.key) || tol.key == '') && has(tol.operator) && tol.operator == 'Exists'))"
    )
    shape = "(" + owned + " ||\n" + agent + ")"
    return (
        "!(\n"
        "  request.resource.group == '' && request.resource.resource == 'pods' &&\n"
        "  (request.operation == 'UPDATE' ? [object, oldObject] : [object]).all(o,\n"
        "    [has(o.spec) ? o.spec : {}].all(s,\n"
        + _indent(shape + " &&\n" + _no_accelerators(platform), 6)
        + "))\n)"
    )


def _no_accelerators(platform: PlatformConfig) -> str:
    exact, prefixes = split_names(platform.accelerators)
    accelerator = " ||\n      ".join(
        [f"n in {_list(sorted(exact))}", *(f"n.startsWith({_q(p)})" for p in sorted(prefixes))]
    )
    return (
        "((has(s.containers) && type(s.containers) == list ? s.containers : []) +\n"
        " (has(s.initContainers) ? s.initContainers : [])).all(c,\n"
        "  [has(c.resources) && has(c.resources.requests) ? c.resources.requests : {},\n"
        "   has(c.resources) && has(c.resources.limits) ? c.resources.limits : {}]\n"
        f"    .all(r, !r.exists(n, {accelerator})) &&\n"
        "  !(has(c.resources) && has(c.resources.claims))) &&\n"
        "!has(s.resourceClaims)"
    )


def _plain_metadata() -> str:
    return (
        "[o, t].all(m, !has(m.metadata) ||\n"
        "  [has(m.metadata.labels) ? m.metadata.labels : {},\n"
        "   has(m.metadata.annotations) ? m.metadata.annotations : {}]\n"
        "    .all(keys, !keys.exists(k,\n"
        f"      {_list(DECISION_KEY_PREFIXES)}\n"
        "        .exists(p, k.startsWith(p)))))"
    )


def _plain_pod_spec(pool_labels: list[str], pool_taints: list[str], tier_classes: list[str]) -> str:
    def hints(var: str) -> str:
        return " || ".join(f"{var}.contains({_q(h)})" for h in TORCH_LAUNCH_HINTS)

    container = (
        "[has(c.resources) && has(c.resources.requests) ? c.resources.requests : {},\n"
        " has(c.resources) && has(c.resources.limits) ? c.resources.limits : {}]\n"
        # Extended resources are domain-prefixed (nvidia.com/gpu, amd.com/gpu, google.com/tpu, …);
        # cpu, memory, ephemeral-storage and hugepages-* are not.
        "  .all(r, !r.exists(n, n.contains('/'))) &&\n"
        "!(has(c.resources) && has(c.resources.claims)) &&\n"
        "[has(c.command) ? c.command : [], has(c.args) ? c.args : []]\n"
        f"  .all(l, !l.exists(a, {hints('a')})) &&\n"
        # PET_* names, and values: the kubelet expands $(VAR) in commands, so a launcher may hide there.
        "!(has(c.env) && c.env.exists(e,\n"
        f"  (has(e.name) && e.name.startsWith({_q(TORCH_ENV_PREFIX)})) ||\n"
        f"  (has(e.value) && ({hints('e.value')}))))"
    )
    spec = [
        # `containers` has no omitempty in the API types: it may arrive as null, hence the type test.
        "((has(s.containers) && type(s.containers) == list ? s.containers : []) +\n"
        " (has(s.initContainers) ? s.initContainers : [])).all(c,\n" + _indent(container, 2) + ")",
        "!has(s.resourceClaims)",
        f"!(has(s.nodeSelector) && s.nodeSelector.exists(k, k in {_list(pool_labels)}))",
        "!(has(s.affinity) && has(s.affinity.nodeAffinity))",
        # A toleration without a key tolerates every taint, the training pool's among them.
        "!(has(s.tolerations) && s.tolerations.exists(tol,\n"
        f"  !has(tol.key) || tol.key == '' || tol.key in {_list(pool_taints)}))",
    ]
    if tier_classes:
        spec.append(f"!(has(s.priorityClassName) && s.priorityClassName in {_list(tier_classes)})")
    return "[has(t.spec) ? t.spec : {}].all(s,\n" + _indent(" &&\n".join(spec), 2) + ")"


def _configuration(kind: str, name: str, webhook: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "trainguard"}},
        "webhooks": [webhook],
    }


def _check_options(
    port: int, url: str | None, timeout: int, validating: FailurePolicy, mutating: FailurePolicy
) -> None:
    if not 1 <= port <= 65535:
        raise WebhookConfigError(f"--port must be within 1..65535, got {port}")
    # The API server's own limits (admissionregistration validation).
    if not 1 <= timeout <= 30:
        raise WebhookConfigError(f"--timeout must be within 1..30 seconds, got {timeout}")
    for option, policy in (("validating", validating), ("mutating", mutating)):
        if policy not in ("Fail", "Ignore"):
            raise WebhookConfigError(f"--{option}-failure-policy must be Fail or Ignore, got {policy!r}")
    if url is not None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "https" or not parts.hostname:
            raise WebhookConfigError(f"--url must be https://HOST[:PORT][/PATH], got {url!r}")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise WebhookConfigError(f"--url must not carry a query, fragment or user info: {url!r}")
        if parts.path.rstrip("/").endswith(("/validate", "/mutate")):
            # The endpoints are appended: a URL that names one would register /validate/validate.
            raise WebhookConfigError(
                f"--url is the server's base URL (e.g. https://10.0.0.5:8443); /validate and /mutate "
                f"are appended: got {url!r}"
            )


def _header(objects: Sequence[dict[str, Any]]) -> str:
    lines = ["# trainguard admission webhooks, rendered by `trainguard webhook-config`."]
    webhooks = [w for obj in objects for w in obj.get("webhooks", ())]
    if any("caBundle" not in w.get("clientConfig", {}) for w in webhooks):
        lines.append("# caBundle is left out: the trainguard server fills it in when it registers itself.")
    names = dict.fromkeys(c["name"] for w in webhooks for c in w.get("matchConditions", ()))
    if names:
        lines.append("# matchConditions (the API server calls the webhook only when all are true):")
        for cond in names:
            text = f"{cond}: {EXPLANATIONS.get(cond, '(no explanation)')}"
            lines += textwrap.wrap(text, 98, initial_indent="#   ", subsequent_indent="#     ")
    return "\n".join(lines) + "\n"


def _q(text: str) -> str:
    # A CEL string literal. Names and keys are plain ASCII, quoted 'so'; anything else takes the
    # JSON form, whose escapes CEL shares.
    if text.isascii() and text.isprintable() and not set("'\\") & set(text):
        return f"'{text}'"
    return json.dumps(text)


def _list(items: Iterable[str]) -> str:
    return "[" + ", ".join(_q(i) for i in items) + "]"


def _indent(text: str, n: int) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the CEL expressions) as literal blocks, readable in review."""

    def ignore_aliases(self, data: Any) -> bool:
        return True  # objects a caller built may share parts: write them out, never as &anchors


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)

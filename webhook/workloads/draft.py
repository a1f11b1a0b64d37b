"""What every adapter shares: the adapt context, the Draft it fills, and small readers.

An adapter reads its API's fields into a `Draft` (pod groups, gang, elastic range, restarts, …);
`classify.finish()` turns the Draft into the `Workload` that policies see. The readers here check
types as they go, so that a value that makes an object undecidable (replicas "abc", a template
that is a list) becomes an `InputError` naming the field, and everything else is read leniently.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.config import PlatformConfig, parse_duration
from webhook.errors import InputError
from webhook.fieldreader import type_name as type_name
from webhook.fields import at as at
from webhook.fields import escape as escape
from webhook.fields import pointer_to_path
from webhook.kinds import KindInfo, Role
from webhook.workloads.model import (
    Checkpoint,
    ElasticRange,
    Owner,
    PodGroup,
    Restarts,
    TopologyConstraint,
    WorkloadClass,
)
from webhook.workloads.torchrun.limits import WorkloadBudget

# Keys trainguard reads on workloads.
TIER_LABEL = "trainguard.dev/tier"
ROLE_LABEL = "trainguard.dev/role"
CLASS_LABEL = "trainguard.dev/class"
TOPOLOGY_SLO = "trainguard.dev/topology-slo"
CHECKPOINT_INTERVAL = "trainguard.dev/checkpoint-interval"
CHECKPOINT_URI = "trainguard.dev/checkpoint-uri"
CHECKPOINT_OWNER = "trainguard.dev/checkpoint-owner"

# Kueue.
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
ELASTIC_JOB = "kueue.x-k8s.io/elastic-job"
JOB_MIN_PARALLELISM = "kueue.x-k8s.io/job-min-parallelism"
POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_TOTAL = "kueue.x-k8s.io/pod-group-total-count"
TAS_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
TAS_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
TAS_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
TAS_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
TAS_SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"

# scheduler-plugins coscheduling: pods join the PodGroup named by this label.
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"

VALID_CLASSES: frozenset[str] = frozenset(("A", "B", "C"))
VALID_ROLES: frozenset[str] = frozenset(("training", "inference"))
VALID_TIERS: frozenset[str] = frozenset(("guaranteed", "preemptible"))


# (id of a container object, where it is read, the launch budget then) -> (that object, the
# TrainJob trainer block it was read with, the Container read, the launch work it spent).
ContainerMemo = dict[tuple[Any, ...], tuple[Any, Any, Any, int]]


@dataclass(frozen=True)
class AdaptContext:
    """What an adapter may know beyond the object itself."""

    config: PlatformConfig
    # (Cluster)TrainingRuntimes known to the caller: (namespace, name) for a TrainingRuntime,
    # (None, name) for a ClusterTrainingRuntime; the value is the object.
    runtimes: Mapping[tuple[str | None, str], dict[str, Any]] = field(default_factory=dict)
    priority_classes: Mapping[str, int] = field(default_factory=dict)  # PriorityClass name -> value
    namespace: str | None = None  # default namespace for objects without one
    # Steps of launch-line reading allowed before raising torchrun.Deferred (None: the caps only).
    launch_allowance: int | None = None
    # Containers read earlier in the same review, by the identity of their object (see
    # podtemplate.remembered_container); None: every container is read afresh.
    containers: ContainerMemo | None = None


# --------------------------------------------------------------------------------------------
# Field paths


def join(path: str, suffix: str) -> str:
    return f"{path}.{suffix}" if path else suffix


def annotation_path(key: str) -> str:
    return f"metadata.annotations['{key}']"


# --------------------------------------------------------------------------------------------
# Typed readers


def mapping(value: Any, where: str) -> dict[str, Any]:
    """A mapping field; absent or null reads as empty."""
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    raise InputError(f"{where} must be a mapping, got {type_name(value)}", field=where)


def sequence(value: Any, where: str) -> list[Any]:
    """A list field; absent or null reads as empty."""
    if value is None:
        return []
    if isinstance(value, list):
        return value
    raise InputError(f"{where} must be a list, got {type_name(value)}", field=where)


def count(value: Any, where: str, default: int) -> int:
    """A non-negative integer such as replicas; a numeric string is accepted."""
    if value is None:
        return default
    if type(value) is int:
        if value < 0:
            raise InputError(f"{where} must not be negative, got {value}", field=where)
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
    elif isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    raise InputError(f"{where} must be a non-negative integer, got {value!r}", field=where)


def optional_count(value: Any, where: str) -> int | None:
    return None if value is None else count(value, where, 0)


def workload_name(meta: dict[str, Any]) -> str:
    """The name a workload is known by: its metadata's name, else its generateName (the API server
    has not made one yet), else ""."""
    return text(meta.get("name")) or text(meta.get("generateName")) or ""


def text(value: Any) -> str | None:
    """A string field; scalars are rendered, anything else reads as absent."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return None


def str_map(value: Any, where: str) -> dict[str, str]:
    """labels / annotations / nodeSelector: a fresh dict of strings (never aliases the object)."""
    if not value:
        if value is None or isinstance(value, dict):
            return {}
        raise InputError(f"{where} must be a mapping, got {type_name(value)}", field=where)
    if not isinstance(value, dict):
        raise InputError(f"{where} must be a mapping, got {type_name(value)}", field=where)
    out = value.copy()
    for k, v in out.items():
        if not isinstance(v, str):
            out[k] = text(v) or ""
    return out


def job_pods(job_spec: dict[str, Any], where: str) -> int:
    """Pods a batch Job runs at once: parallelism (default 1), at most completions."""
    parallelism = count(job_spec.get("parallelism"), f"{where}.parallelism", 1)
    completions = optional_count(job_spec.get("completions"), f"{where}.completions")
    return min(parallelism, completions) if completions is not None else parallelism


def kueue_gangs(info: KindInfo, api_version: str) -> bool:
    """Whether a Kueue queue label admits this kind as one whole workload.

    Kueue has no Volcano Job integration, integrates mpi-operator's kubeflow.org/v2beta1 MPIJob but
    not the training operator's v1, and makes every labelled bare Pod its own one-pod Workload: only
    a pod group (read by the Pod adapter) gangs bare pods.
    """
    if info.group == "batch.volcano.sh" or info.kind == "Pod":
        return False
    return not (info.kind == "MPIJob" and api_version == "kubeflow.org/v1")


# --------------------------------------------------------------------------------------------
# The Draft


@dataclass(slots=True, eq=False)
class Draft:
    """A Workload under construction: adapters fill it, classify.finish() completes it."""

    obj: dict[str, Any]
    ctx: AdaptContext
    info: KindInfo
    name: str
    namespace: str | None
    labels: dict[str, str]
    annotations: dict[str, str]
    spec: dict[str, Any]
    groups: list[PodGroup] = field(default_factory=list)
    # Per group: (object label or None for this object, JSON pointer of the template in it).
    sources: list[tuple[str | None, str]] = field(default_factory=list)
    mechanisms: list[str] = field(default_factory=list)
    min_available: int | None = None
    min_field: str | None = None
    queue_name: str | None = None
    elastic: ElasticRange | None = None
    elastic_forced: bool = False  # declared elastic even when min == max (Kueue elastic-job)
    elastic_declared: bool = False  # the kind-level view spoke; torchrun does not override it
    constraints: list[TopologyConstraint] = field(default_factory=list)
    restarts: Restarts = Restarts()  # frozen: one shared default
    priority_class: str | None = None  # workload-level priority class, if the API has one
    class_pods: int | None = None  # pods that decide A/B when not all groups count (TrainJob)
    total_pods: int | None = None  # overrides the sum over groups (a bare Pod stands for N)
    total_gpus: int | None = None
    klass: WorkloadClass | None = None  # decided by the adapter (member pods, bare pods)
    role: Role | None = None
    owner: Owner | None = None
    kueue_managed: bool = False
    group_name: str | None = None  # a bare pod's group
    patch_pool_targets: list[dict[str, str]] = field(default_factory=list)  # from TrainJob runtimePatches
    gaps: list[dict[str, str]] = field(default_factory=list)
    group_count_errors: list[dict[str, str]] = field(default_factory=list)  # a bare pod's Kueue group
    # Groups whose pods no gang of the workload includes (a RayJob's submitter), by index.
    outside_gang: set[int] = field(default_factory=set)
    unknown_runtime: str | None = None
    # The work left for reading this workload's launch lines (every container draws on it).
    launch_budget: WorkloadBudget = field(default_factory=WorkloadBudget)

    @classmethod
    def start(cls, obj: dict[str, Any], ctx: AdaptContext, info: KindInfo) -> Draft:
        meta = mapping(obj.get("metadata"), "metadata")
        spec = mapping(obj.get("spec"), "spec")
        labels = str_map(meta.get("labels"), "metadata.labels")
        annotations = str_map(meta.get("annotations"), "metadata.annotations")
        name = workload_name(meta)
        namespace = text(meta.get("namespace")) or ctx.namespace
        d = cls(obj, ctx, info, name, namespace, labels, annotations, spec)
        if ctx.launch_allowance is not None:
            d.launch_budget.allowance = ctx.launch_allowance
        queue = labels.get(QUEUE_LABEL)
        if queue and info.group != "batch.volcano.sh":  # Kueue has no Volcano Job integration
            d.queue_name = queue
            if kueue_gangs(info, text(obj.get("apiVersion")) or ""):
                d.gang("kueue")
        return d

    def gang(self, mechanism: str, minimum: int | None = None, where: str | None = None) -> None:
        """Record a gang mechanism; the first declared minimum wins."""
        if mechanism not in self.mechanisms:
            self.mechanisms.append(mechanism)
        if minimum is not None and self.min_available is None:
            self.min_available = minimum
            self.min_field = where

    def constraint(self, source: str, key: str, required: bool, group: str | None = None) -> None:
        self.constraints.append(TopologyConstraint(source, key, required, group))


# --------------------------------------------------------------------------------------------
# Shared readers for annotations and pod-template facts


def parse_checkpoint(annotations: dict[str, str]) -> Checkpoint:
    interval = annotations.get(CHECKPOINT_INTERVAL)
    uri = annotations.get(CHECKPOINT_URI)
    owner = annotations.get(CHECKPOINT_OWNER)
    if interval is None and uri is None and owner is None:
        return _NO_CHECKPOINT
    # Values come from objects: only short ones are remembered.
    if len(interval or "") + len(uri or "") + len(owner or "") <= 1024:
        return _remembered_checkpoint(interval, uri, owner)
    return _read_checkpoint(interval, uri, owner)


def _read_checkpoint(interval: str | None, uri: str | None, owner: str | None) -> Checkpoint:
    scheme = authority = path = None
    if uri and "://" in uri:
        head, rest = uri.split("://", 1)
        scheme = head.lower() or None
        authority, slash, tail = rest.partition("/")
        path = slash + tail
    return Checkpoint(
        interval=interval,
        interval_seconds=parse_duration(interval) if interval else None,
        uri=uri,
        uri_scheme=scheme,
        uri_authority=authority,
        uri_path=path,
        owner=owner,
        declared=True,
    )


# A workload's checkpoint annotations are the same on each admission of it (and its pods'): the
# Checkpoint is frozen, so one is shared rather than the duration and URI parsed again.
_remembered_checkpoint = functools.lru_cache(maxsize=1024)(_read_checkpoint)
_NO_CHECKPOINT = Checkpoint()


def best_effort(labels: dict[str, str], annotations: dict[str, str]) -> bool:
    value = annotations.get(TOPOLOGY_SLO) or labels.get(TOPOLOGY_SLO)
    return value is not None and value.strip().lower() == "best-effort"


_TAS_ANNOTATIONS: tuple[tuple[str, str, bool], ...] = (
    (TAS_REQUIRED, "kueue-tas-required", True),
    (TAS_PREFERRED, "kueue-tas-preferred", False),
    (TAS_SLICE_REQUIRED, "kueue-tas-slice-required", True),
)


def tas_constraints(d: Draft, annotations: dict[str, str], group: str) -> None:
    """Kueue Topology-Aware Scheduling annotations on a pod template."""
    if not annotations:
        return
    for key, source, required in _TAS_ANNOTATIONS:
        value = annotations.get(key)
        if value:
            d.constraint(source, value, required, group)
    if annotations.get(TAS_UNCONSTRAINED, "").strip().lower() == "true":
        # TAS accounting without placement: an explicit choice, recorded so nothing adds a
        # second TAS annotation (Kueue rejects conflicting ones).
        d.constraint("kueue-tas-unconstrained", "", False, group)
    raw = annotations.get(TAS_SLICE_CONSTRAINTS)
    if raw:
        try:
            layers = json.loads(raw)
        except ValueError:
            layers = None
        if isinstance(layers, list):
            for layer in layers:
                if isinstance(layer, dict) and isinstance(layer.get("topology"), str):
                    d.constraint("kueue-tas-slice-required", layer["topology"], True, group)
        else:
            d.constraint("kueue-tas-slice-required", raw, True, group)


def volcano_network_topology(
    d: Draft, value: Any, where: str, group: str | None = None, source: str = "volcano-network-topology"
) -> None:
    """Volcano `networkTopology{mode, highestTierAllowed | highestTierName}`."""
    nt = mapping(value, where)
    if not nt:
        return
    tier = text(nt.get("highestTierName")) or text(nt.get("highestTierAllowed")) or ""
    mode = (text(nt.get("mode")) or "hard").lower()
    d.constraint(source, tier, mode != "soft", group)


def pool_targets(d: Draft) -> tuple[dict[str, str], ...]:
    """Every nodeSelector, required node-affinity `In` value and toleration on the pool keys."""
    label_key = taint_key = ""
    out: list[dict[str, str]] = []
    for group, (source, pointer) in zip(d.groups, d.sources, strict=True):
        if not (group.node_selector or group.required_node_terms or group.tolerations):
            continue
        if not label_key:
            label_key, taint_key = d.ctx.config.pool_label_key, d.ctx.config.pool_taint_key
        hits = pool_hits(
            group.node_selector, group.required_node_terms, group.tolerations, label_key, taint_key
        )
        if hits:
            base = pointer_to_path(pointer)
            for pool, suffix, via in hits:
                entry = {"pool": pool, "field": join(base, suffix), "via": via}
                if source is not None:
                    entry["object"] = source
                out.append(entry)
    if d.patch_pool_targets:
        out += d.patch_pool_targets
    return tuple(out)


def pool_hits(
    node_selector: dict[str, str],
    terms: tuple[tuple[dict[str, Any], ...], ...],
    tolerations: tuple[dict[str, Any], ...],
    label_key: str,
    taint_key: str,
) -> list[tuple[str, str, str]]:
    """(pool, field suffix in the pod template, via) for each way a pod spec targets a pool."""
    hits: list[tuple[str, str, str]] = []
    value = node_selector.get(label_key)
    if value is not None:
        # The key itself, not the whole selector: reports point at the line that is wrong.
        hits.append((value, f"spec.nodeSelector[{label_key}]", "nodeSelector"))
    for t, term in enumerate(terms):
        for e, expr in enumerate(term):
            if expr.get("key") == label_key and expr.get("operator") == "In":
                suffix = (
                    "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                    f".nodeSelectorTerms[{t}].matchExpressions[{e}]"
                )
                for v in expr.get("values") or ():
                    hits.append((str(v), suffix, "affinity"))
    for i, tol in enumerate(tolerations):
        key = tol.get("key")
        op = tol.get("operator") or "Equal"
        if key == taint_key:
            pool = "*" if op == "Exists" or tol.get("value") is None else str(tol.get("value"))
        elif not key and op == "Exists":
            pool = "*"  # tolerates every taint, the pool taints included
        else:
            continue
        hits.append((pool, f"spec.tolerations[{i}]", "toleration"))
    return hits

"""Read a pod template (or a Pod) into a PodGroup: containers, accelerators, placement, torchrun.

Every adapter calls `read_template()` once per template. Besides returning the PodGroup it records
on the Draft what a template declares for the whole workload: Kueue TAS annotations, pod
affinity topology keys, and a Workload-Aware Scheduling pod group.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any, NoReturn

from webhook.accelerators import AcceleratorTest, accelerators_of
from webhook.errors import InputError
from webhook.fields import pointer_to_path
from webhook.workloads.draft import (
    ContainerMemo,
    Draft,
    tas_constraints,
    text,
    type_name,
)
from webhook.workloads.model import Container, PodGroup
from webhook.workloads.torchrun import WorkloadBudget, parse_container

_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?$")
_SUFFIX = {
    None: Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def read_template(
    d: Draft,
    template: Any,
    pointer: str,
    name: str,
    replicas: int,
    *,
    restart_policy: str | None = None,
    patchable: bool = True,
    source: str | None = None,
    source_pointer: str | None = None,
    trainer: dict[str, Any] | None = None,
    metadata: tuple[dict[str, str], dict[str, str]] | None = None,
) -> PodGroup:
    """Append the PodGroup for the template found at `pointer` (a Pod: the object itself, "").

    For a template that lives in another object (a TrainJob's runtime), `patchable` is False,
    `source` names that object and `source_pointer` locates the template in it; `trainer` is the
    TrainJob's `spec.trainer`, which overrides the runtime's `node` container. `metadata` passes
    labels and annotations already read (a Pod's own).
    """
    where = source_pointer if source_pointer is not None else pointer
    if template is None:
        template = {}
    elif type(template) is not dict:
        _not_a(template, "a mapping", source, where)
    if metadata is not None:
        labels, annotations = metadata
    else:
        meta = template.get("metadata")
        if meta:
            if type(meta) is not dict:
                _not_a(meta, "a mapping", source, where + "/metadata")
            labels = _str_map(meta.get("labels"), source, where, "/metadata/labels")
            annotations = _str_map(meta.get("annotations"), source, where, "/metadata/annotations")
        else:
            labels, annotations = {}, {}
    spec = template.get("spec")
    if spec is None:
        spec = {}
    elif type(spec) is not dict:
        _not_a(spec, "a mapping", source, where + "/spec")
    get = spec.get

    raw = get("containers")
    containers: tuple[Container, ...] = ()
    gpus = 0
    if raw:
        if type(raw) is not list:
            _not_a(raw, "a list", source, where + "/spec/containers")
        base = f"{pointer}/spec/containers/" if patchable else None
        out = []
        memo = d.ctx.containers
        gpu = accelerators_of(d.ctx.config)
        for i, c in enumerate(raw):
            at = f"{base}{i}" if base else ""
            if memo is None:
                container = _container(c, at, source, where, i, trainer, d.launch_budget, gpu)
            else:
                container = remembered_container(memo, c, at, source, where, i, trainer, d.launch_budget, gpu)
            gpus += container.gpus
            out.append(container)
        containers = tuple(out)
    init = get("initContainers")
    if init:
        gpus = _with_init_containers(gpus, init, source, where, accelerators_of(d.ctx.config))

    affinity = get("affinity")
    terms: tuple[tuple[dict[str, Any], ...], ...] = ()
    topology_keys: tuple[str, ...] = ()
    if affinity:
        if type(affinity) is not dict:
            _not_a(affinity, "a mapping", source, where + "/spec/affinity")
        terms = required_node_terms(affinity)
        topology_keys = pod_affinity(d, affinity, name)

    tolerations = get("tolerations")
    if tolerations and type(tolerations) is not list:
        _not_a(tolerations, "a list", source, where + "/spec/tolerations")
    grace = get("terminationGracePeriodSeconds")
    group = PodGroup(
        name=name,
        replicas=replicas,
        template_pointer=pointer if patchable else "",
        containers=containers,
        gpus_per_pod=gpus,
        labels=labels,
        annotations=annotations,
        priority_class_name=_opt_text(get("priorityClassName")),
        scheduler_name=_opt_text(get("schedulerName")),
        node_selector=_str_map(get("nodeSelector"), source, where, "/spec/nodeSelector"),
        required_node_terms=terms,
        tolerations=tuple(t for t in tolerations if type(t) is dict) if tolerations else (),
        termination_grace_period_seconds=(
            grace if grace is None or type(grace) is int else _grace(grace, source, where)
        ),
        pod_affinity_topology_keys=topology_keys,
        restart_policy=restart_policy or _opt_text(get("restartPolicy")),
        patchable=patchable,
        source_field=_field(source, source_pointer) if source and source_pointer else "",
    )
    d.groups.append(group)
    d.sources.append((source, where))
    if annotations:
        tas_constraints(d, annotations, name)
    sg = get("schedulingGroup")
    if (sg and type(sg) is dict and sg.get("podGroupName")) or get("workloadRef"):
        d.gang("workload-api")
    return group


def _field(source: str | None, pointer: str) -> str:
    path = pointer_to_path(pointer)
    return f"{source}:{path}" if source else path


def _not_a(value: Any, expected: str, source: str | None, pointer: str) -> NoReturn:
    where = _field(source, pointer)
    raise InputError(f"{where} must be {expected}, got {type_name(value)}", field=where)


def _opt_text(value: Any) -> str | None:
    return value if value is None or type(value) is str else text(value)


def _str_map(value: Any, source: str | None, where: str, suffix: str) -> dict[str, str]:
    if not value:
        if value is None or type(value) is dict:
            return {}
        _not_a(value, "a mapping", source, where + suffix)
    if type(value) is not dict:
        _not_a(value, "a mapping", source, where + suffix)
    out: dict[str, str] = value.copy()
    for k, v in out.items():
        if type(v) is not str:
            out[k] = text(v) or ""
    return out


def remembered_container(
    memo: ContainerMemo,
    c: Any,
    pointer: str,
    source: str | None,
    where: str,
    index: int,
    trainer: dict[str, Any] | None,
    budget: WorkloadBudget,
    gpu: AcceleratorTest,
) -> Container:
    """_container(), or the Container it returned for this very object earlier in the review.

    A review that mutates and then validates adapts its object twice, and a mutation copies only
    what it changes (the Patcher copies on write): a container it left alone is the same object
    the first adaptation read, and reading it again (its environment, its launch line) would give
    the same Container. It does only while the launch budget stands where it stood then, so that
    is part of the key, and a reuse charges the budget what the first reading spent. The memo
    holds each object it keys by id, so no id is reused while it lives: one review.
    """
    key = (id(c), pointer, source, where, index, id(trainer), budget.remaining, budget.allowance)
    known = memo.get(key)
    if known is not None and known[0] is c and known[1] is trainer:
        budget.remaining -= known[3]
        container: Container = known[2]
        return container
    before = budget.remaining
    container = _container(c, pointer, source, where, index, trainer, budget, gpu)
    memo[key] = (c, trainer, container, before - budget.remaining)
    return container


def _container(
    c: Any,
    pointer: str,
    source: str | None,
    where: str,
    index: int,
    trainer: dict[str, Any] | None,
    budget: WorkloadBudget,
    gpu: AcceleratorTest,
) -> Container:
    # The container in its source object; made only for an env or resources to read (the
    # error messages name it), not for every container.
    loc = ""
    if type(c) is not dict:
        _not_a(c, "a mapping", source, f"{where}/spec/containers/{index}")
    get = c.get
    name = get("name")
    if type(name) is not str:
        name = text(name) or ""
    command, args, env_list, resources = get("command"), get("args"), get("env"), get("resources")
    if env_list or resources:
        loc = f"{where}/spec/containers/{index}"
    env_source, env_loc = source, loc
    res_source, res_loc = source, loc + "/resources" if resources else ""
    if trainer is not None and name == "node":
        # A TrainJob's spec.trainer overrides the runtime's trainer container; on the TrainJob it
        # is patchable at /spec/trainer.
        pointer = "/spec/trainer"
        if trainer.get("command") is not None:
            command = trainer["command"]
        if trainer.get("args") is not None:
            args = trainer["args"]
        extra = trainer.get("env")
        if extra:
            if type(extra) is not list:
                _not_a(extra, "a list", None, "/spec/trainer/env")
            env_list = [*env_list, *extra] if type(env_list) is list else extra
            env_source, env_loc = None, "/spec/trainer"
        if trainer.get("resourcesPerNode") is not None:
            resources = trainer["resourcesPerNode"]
            res_source, res_loc = None, "/spec/trainer/resourcesPerNode"
    accelerators = _accelerators(resources, res_source, res_loc, gpu) if resources else {}
    gpus = 0
    for v in accelerators.values():
        gpus += v
    cmd = _strings(command)
    arg = _strings(args)
    env = _env(env_list, env_source, env_loc) if env_list else {}
    return Container(
        name=name,
        pointer=pointer,
        gpus=gpus,
        accelerators=accelerators,
        command=cmd,
        args=arg,
        env=env,
        torchrun=parse_container(cmd, arg, env, container_index=index, budget=budget),
    )


def _strings(value: Any) -> tuple[str, ...]:
    if not value:
        return ()
    if type(value) is list:
        out = tuple(value)
        for v in out:
            if type(v) is not str:
                return tuple(v if type(v) is str else (text(v) or "") for v in out)
        return out
    if type(value) is str:
        return (value,)
    return ()


def _env(value: Any, source: str | None, where: str) -> dict[str, str | None]:
    if type(value) is not list:
        _not_a(value, "a list", source, where + "/env")
    out: dict[str, str | None] = {}
    for e in value:
        if type(e) is dict:
            name = e.get("name")
            if type(name) is str:
                v = e.get("value")
                if type(v) is str:
                    out[name] = v
                elif e.get("valueFrom") is not None:
                    out[name] = None  # resolved by the kubelet: unknown here
                else:
                    out[name] = text(v) or ""
    return out


def _accelerators(resources: Any, source: str | None, where: str, gpu: AcceleratorTest) -> dict[str, int]:
    """Accelerator counts from a `resources` object at `where`: limits, else requests."""
    if type(resources) is not dict:
        _not_a(resources, "a mapping", source, where)
    out: dict[str, int] = {}
    for part in ("limits", "requests"):
        values = resources.get(part)
        if not values:
            continue
        if type(values) is not dict:
            _not_a(values, "a mapping", source, f"{where}/{part}")
        for key, value in values.items():
            if gpu(key) and key not in out:
                out[key] = (
                    value
                    if type(value) is int and value >= 0
                    else _devices(value, key, source, f"{where}/{part}")
                )
    return out


def _devices(value: Any, key: str, source: str | None, where: str) -> int:
    """A whole number of devices from a Kubernetes quantity."""
    if type(value) is int and value >= 0:
        return value
    if isinstance(value, str):
        s = value.strip()
        if s.isdigit():
            return int(s)
        m = _QUANTITY.match(s)
        if m:
            try:
                amount = Decimal(m.group(1)) * _SUFFIX[m.group(2)]
            except InvalidOperation:  # pragma: no cover - the regex admits only numbers
                amount = Decimal("0.5")
            if amount == amount.to_integral_value():
                return int(amount)
    elif isinstance(value, float) and value.is_integer() and value >= 0:
        return int(value)
    raise InputError(
        f"{key} must be a whole number of devices, got {value!r}",
        field=f"{_field(source, where)}['{key}']",
    )


def _with_init_containers(gpus: int, init: Any, source: str | None, where: str, gpu: AcceleratorTest) -> int:
    """Effective devices per pod: sidecars add to the app containers, plain init containers run alone."""
    if type(init) is not list:
        _not_a(init, "a list", source, where + "/spec/initContainers")
    sidecars = 0
    peak = 0
    for i, c in enumerate(init):
        if type(c) is not dict or not c.get("resources"):
            continue
        resources = c["resources"]
        n = sum(_accelerators(resources, source, f"{where}/spec/initContainers/{i}/resources", gpu).values())
        if c.get("restartPolicy") == "Always":
            sidecars += n
        else:
            peak = max(peak, sidecars + n)
    return max(gpus + sidecars, peak)


def _grace(value: Any, source: str | None, where: str) -> int | None:
    if value is None:
        return None
    if type(value) is int:
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise InputError(
        f"terminationGracePeriodSeconds must be an integer, got {value!r}",
        field=_field(source, where + "/spec/terminationGracePeriodSeconds"),
    )


def required_node_terms(affinity: dict[str, Any]) -> tuple[tuple[dict[str, Any], ...], ...]:
    na = affinity.get("nodeAffinity")
    if not isinstance(na, dict):
        return ()
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(req, dict):
        return ()
    terms = req.get("nodeSelectorTerms")
    if not isinstance(terms, list):
        return ()
    return tuple(
        tuple(e for e in (t.get("matchExpressions") or ()) if isinstance(e, dict))
        for t in terms
        if isinstance(t, dict)
    )


def pod_affinity(d: Draft, affinity: dict[str, Any], group: str) -> tuple[str, ...]:
    """Topology keys of pod (anti-)affinity terms; pod affinity also constrains placement."""
    keys: list[str] = []
    for kind, together in (("podAffinity", True), ("podAntiAffinity", False)):
        pa = affinity.get(kind)
        if not isinstance(pa, dict):
            continue
        for required, terms_key in (
            (True, "requiredDuringSchedulingIgnoredDuringExecution"),
            (False, "preferredDuringSchedulingIgnoredDuringExecution"),
        ):
            terms = pa.get(terms_key)
            if not isinstance(terms, list):
                continue
            for term in terms:
                if not isinstance(term, dict):
                    continue
                if not required:
                    term = term.get("podAffinityTerm")
                    if not isinstance(term, dict):
                        continue
                key = term.get("topologyKey")
                if not isinstance(key, str) or not key:
                    continue
                if key not in keys:
                    keys.append(key)
                if together:
                    d.constraint("pod-affinity", key, required, group)
    return tuple(keys)

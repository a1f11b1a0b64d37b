"""Cross-kind decisions: class, role, tier; and `finish()`, which turns a Draft into a Workload.

- Class: C when the workload declares an elastic range (min < max); else B when more than one pod
  runs the job; else A. An adapter may decide the class itself (bare and member pods).
- Role: the `trainguard.dev/role` label, else what the adapter found, else the kind's default.
- Tier: the `trainguard.dev/tier` label; else the platform's mapping of the priority class (or the
  Kueue WorkloadPriorityClass); else C is preemptible and A/B guaranteed. An invalid label keeps
  `tier_source: label-invalid` so that a policy can say so.
"""

from __future__ import annotations

from typing import cast

from webhook.config import PlatformConfig
from webhook.fields import pointer_to_path, walk
from webhook.kinds import Role
from webhook.workloads.claims import multi_node_launch, tier_conflicts
from webhook.workloads.draft import (
    COSCHEDULING_LABEL,
    KUEUE_PRIORITY_LABEL,
    ROLE_LABEL,
    TIER_LABEL,
    VALID_ROLES,
    VALID_TIERS,
    Draft,
    best_effort,
    join,
    parse_checkpoint,
    pool_targets,
)
from webhook.workloads.model import (
    ElasticRange,
    Gang,
    PodGroup,
    Tier,
    Topology,
    Workload,
    WorkloadClass,
)


def class_of(pods: int, elastic: ElasticRange | None, forced: bool = False) -> WorkloadClass:
    if elastic is not None and (forced or elastic.min < elastic.max):
        return "C"
    return "B" if pods > 1 else "A"


def tier_of(
    labels: dict[str, str], klass: WorkloadClass, priority_class: str | None, config: PlatformConfig
) -> tuple[Tier, str]:
    declared = labels.get(TIER_LABEL)
    if declared in VALID_TIERS:
        return cast(Tier, declared), "label"
    tier = config.tier_for_priority_class(priority_class)
    if tier not in VALID_TIERS:
        tier = _tier_for_kueue_class(labels.get(KUEUE_PRIORITY_LABEL), config)
    if tier in VALID_TIERS:
        source = "priority-class"
    else:
        tier, source = ("preemptible" if klass == "C" else "guaranteed"), "default"
    if declared is not None:
        source = "label-invalid"
    return cast(Tier, tier), source


def _tier_for_kueue_class(name: str | None, config: PlatformConfig) -> str | None:
    if not name:
        return None
    tier = config.tier_for_priority_class(name)
    if tier is not None:
        return tier
    assigned = config.raw.get("tiers", {}).get("kueuePriorityClass") or {}
    for t, wpc in assigned.items():
        if wpc == name:
            return str(t)
    return None


def role_of(d: Draft) -> Role:
    declared = d.labels.get(ROLE_LABEL)
    if declared in VALID_ROLES:
        return cast(Role, declared)
    return d.role or d.info.role


def torchrun_elastic(groups: list[PodGroup]) -> ElasticRange | None:
    """The first torchrun `--nnodes MIN:MAX` with MIN < MAX among the workload's containers."""
    for g in groups:
        for c in g.containers:
            t = c.torchrun
            lo, hi = (t.nnodes_min, t.nnodes_max) if t is not None else (None, None)
            if lo is not None and hi is not None and lo < hi:
                return ElasticRange(lo, hi, pointer_to_path(c.pointer), launcher=True)
    return None


def template_field(d: Draft, index: int, suffix: str) -> str:
    """Dotted path of `suffix` in the index-th pod template, prefixed by its object when elsewhere."""
    source, pointer = d.sources[index]
    path = join(pointer_to_path(pointer), suffix)
    return f"{source}:{path}" if source else path


def coscheduling(d: Draft) -> None:
    """scheduler-plugins gangs pods, whatever created them: a gang only when every template joins.

    Templates that stamp out no pods, or whose pods stay outside the workload's gang, do not
    count. When some templates carry the label and others do not, the others escape the gang:
    each is recorded as a gap naming the template and what it lacks.
    """
    live = labelled = 0
    outside = d.outside_gang
    for i, g in enumerate(d.groups):
        if g.replicas > 0 and i not in outside:
            live += 1
            if g.labels.get(COSCHEDULING_LABEL):
                labelled += 1
    if not labelled:
        return
    if labelled == live:
        d.gang("coscheduling")
        return
    for i, g in enumerate(d.groups):
        if g.replicas > 0 and i not in outside and not g.labels.get(COSCHEDULING_LABEL):
            d.gaps.append(
                {
                    "group": g.name,
                    "field": template_field(d, i, "metadata.labels"),
                    "problem": f"lacks label {COSCHEDULING_LABEL} that the other templates carry",
                }
            )


def gang_scheduler_gaps(d: Draft, scheduler: str) -> bool:
    """Record templates that pin another scheduler than the gang's; True when none does.

    A gang scheduler fills in its name only where a template names none: a template that pins
    another (default-scheduler) is placed outside the gang.
    """
    clean = True
    for i, g in enumerate(d.groups):
        name = g.scheduler_name
        if g.replicas > 0 and name and name != scheduler:
            clean = False
            d.gaps.append(
                {
                    "group": g.name,
                    "field": template_field(d, i, "spec.schedulerName"),
                    "problem": (
                        f"pins {name}, so its pods escape the {scheduler} gang: remove it or set {scheduler}"
                    ),
                }
            )
    return clean


def finish(d: Draft) -> Workload:
    coscheduling(d)
    groups = tuple(d.groups)
    # One pass for the sums and the first template priority class.
    pods = gpus = 0
    template_priority = None
    for g in groups:
        pods += g.replicas
        gpus += g.replicas * g.gpus_per_pod
        if template_priority is None and g.priority_class_name:
            template_priority = g.priority_class_name
    total_pods = pods if d.total_pods is None else d.total_pods
    total_gpus = gpus if d.total_gpus is None else d.total_gpus
    elastic = d.elastic
    if elastic is None and not d.elastic_declared:
        elastic = torchrun_elastic(d.groups)
    klass = d.klass or class_of(
        d.class_pods if d.class_pods is not None else total_pods, elastic, d.elastic_forced
    )
    priority_class = d.priority_class
    if priority_class is None:
        priority_class = template_priority
    tier, tier_source = tier_of(d.labels, klass, priority_class, d.ctx.config)
    suspend_path = d.info.suspend_path
    suspended = None
    if d.info.suspend_tokens is not None:
        suspended = walk(d.obj, d.info.suspend_tokens) is True
    return Workload(
        api_version=d.obj.get("apiVersion") or "",
        kind=d.obj.get("kind") or "",
        namespace=d.namespace,
        name=d.name,
        role=role_of(d),
        klass=klass,
        tier=tier,
        tier_source=tier_source,
        groups=groups,
        total_pods=total_pods,
        total_gpus=total_gpus,
        gang=Gang(
            tuple(d.mechanisms),
            d.min_available,
            d.min_field,
            d.queue_name,
            d.group_name,
            tuple(d.gaps),
            tuple(d.group_count_errors),
        ),
        elastic=elastic,
        checkpoint=parse_checkpoint(d.annotations),
        topology=Topology(tuple(d.constraints), best_effort(d.labels, d.annotations)),
        restarts=d.restarts,
        labels=d.labels,
        annotations=d.annotations,
        pool_targets=pool_targets(d),
        suspend_path=suspend_path,
        suspended=suspended,
        priority_class=priority_class,
        owner=d.owner,
        kueue_managed=d.kueue_managed,
        unknown_runtime=d.unknown_runtime,
        multi_node_launch=multi_node_launch(groups, total_pods),
        tier_conflicts=tier_conflicts(groups, tier, tier_source, d.priority_class, d.ctx.config),
    )

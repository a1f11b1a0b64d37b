"""The facts a tenant's claims are checked against (DESIGN §1, "Claims are checked against facts").

Labels a tenant controls (`trainguard.dev/role`, `trainguard.dev/tier`) select which policies
apply. Policies refuse a claim that the workload's own shape contradicts; this module states that
shape: whether the launch spans nodes, and which pod templates run under a priority class the
platform maps to another tier than the label says.
"""

from __future__ import annotations

from collections.abc import Sequence

from webhook.config import PlatformConfig
from webhook.fields import pointer_to_path
from webhook.workloads.model import PodGroup, TierConflict, TorchrunSpec
from webhook.workloads.torchrun.mpi import mpi_launch


def multi_node_launch(groups: Sequence[PodGroup], total_pods: int) -> str | None:
    """The first launch fact that makes this a multi-node job, in words; None when none does.

    torchrun `--nnodes` above 1 or a MIN:MAX range (from the flag, `PET_NNODES` or the training
    operator), or an MPI launcher in a workload of more than one pod. An unknown value (a `$VAR`
    the env does not define) states nothing.
    """
    mpi: str | None = None
    for g in groups:
        for c in g.containers:
            t = c.torchrun
            if t is not None and _multi_node(t):
                where = pointer_to_path(c.pointer)
                source = t.sources.get("nnodes")
                if source == "env":
                    return f"PET_NNODES={t.nnodes} in {where}.env"
                if source == "operator":
                    return f"{t.nnodes} nodes from {t.injected.get('nnodes', 'the training operator')}"
                return f"torchrun --nnodes={t.nnodes} in {where}"
            if mpi is None and total_pods > 1:
                launcher = _mpi_launcher(c.command, c.args, c.env, c.mpirun_np)
                if launcher is not None:
                    mpi = f"{launcher} in {pointer_to_path(c.pointer)} across {total_pods} pods"
    return mpi


def _multi_node(t: TorchrunSpec) -> bool:
    if t.standalone or t.nnodes_min is None or t.nnodes_max is None:
        return False
    return t.nnodes_max > 1 or t.nnodes_min != t.nnodes_max


def _mpi_launcher(
    command: tuple[str, ...], args: tuple[str, ...], env: dict[str, str | None], np: int | None
) -> str | None:
    launch = mpi_launch(command, args, env)
    if launch is not None:
        return launch[0]
    return "mpirun" if np is not None else None


def tier_conflicts(
    groups: Sequence[PodGroup],
    tier: str,
    tier_source: str,
    workload_class: str | None,
    config: PlatformConfig,
) -> tuple[TierConflict, ...]:
    """Where the tier label disagrees with a priority class the platform maps to a tier.

    Only a label can disagree: a tier derived from the class agrees with it by definition. A class
    the platform does not map leaves the label alone. `workload_class` is a class the workload
    sets for all its pods (a PyTorchJob's runPolicy, a Volcano Job's spec), besides its templates'.
    """
    if tier_source != "label":
        return ()
    out: list[TierConflict] = []
    if workload_class:
        mapped = config.tier_for_priority_class(workload_class)
        if mapped is not None and mapped != tier:
            out.append(TierConflict("", workload_class, mapped, ""))
    for g in groups:
        name = g.priority_class_name
        mapped = config.tier_for_priority_class(name) if name else None
        if name and mapped is not None and mapped != tier:
            prefix = pointer_to_path(g.template_pointer) + "." if g.template_pointer else ""
            out.append(TierConflict(g.name, name, mapped, f"{prefix}spec.priorityClassName"))
    return tuple(out)

"""Launch values a training operator injects: PET_* entries the pod gets but the manifest does not show.

The training operator (PyTorchJob) and Trainer (TrainJob) append PET_NNODES / PET_NPROC_PER_NODE to
the trainer containers' env from fields of the job; a plain `torchrun train.py` reads them. The
adapters compute the values (they know the fields); this module re-reads the launch of each
container that runs torch with them. A container that does not launch torch is left alone: the
entries feed a launch, they do not make one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from webhook.workloads.model import Container, PodGroup
from webhook.workloads.torchrun import WorkloadBudget, parse_container
from webhook.workloads.torchrun.spec import Injected

__all__ = ["Injected", "inject"]


def inject(
    groups: list[PodGroup],
    injected: Mapping[str, Injected],
    wanted: Callable[[PodGroup, Container], bool],
    budget: WorkloadBudget,
) -> None:
    """Replace, in `groups`, each wanted torch-launching container by its view with `injected` env."""
    if not injected:
        return
    for gi, group in enumerate(groups):
        containers = list(group.containers)
        changed = False
        for ci, c in enumerate(containers):
            if c.torchrun is None or c.torchrun.launcher == "env" or not wanted(group, c):
                continue
            spec = parse_container(
                c.command, c.args, c.env, injected=injected, container_index=ci, budget=budget
            )
            containers[ci] = replace(c, torchrun=spec)
            changed = True
        if changed:
            groups[gi] = replace(group, containers=tuple(containers))

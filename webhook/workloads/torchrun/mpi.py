"""The process count an MPI launch line asks for: `mpirun -np N` (also `-n`, `--np`, `-c`, `mpiexec`,
`orterun`), in exec form or inside a shell script, with the same kubelet expansion, wrappers, shell
and caps as a torch launch. None when there is no such launch or N is not a number we can see.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from webhook.workloads.model import Container, PodGroup
from webhook.workloads.torchrun import kubelet
from webhook.workloads.torchrun.environ import Environ
from webhook.workloads.torchrun.found import Found
from webhook.workloads.torchrun.launcher import SHELLS, base, unwrap
from webhook.workloads.torchrun.limits import MAX_ARGV_BYTES, MAX_ENV_ENTRIES, MAX_WORDS, Meter, OverLimit
from webhook.workloads.torchrun.shell import ShellState, ShellSyntaxError, Unfollowable, run_script

MPI_LAUNCHERS = frozenset({"mpirun", "mpiexec", "orterun"})
_NP = frozenset({"-np", "-n", "--np", "--n", "-c"})


def mpirun_np(command: Sequence[str], args: Sequence[str], env: Mapping[str, str | None]) -> int | None:
    launch = mpi_launch(command, args, env)
    return None if launch is None else _np(launch[1])


def mpi_launch(
    command: Sequence[str], args: Sequence[str], env: Mapping[str, str | None]
) -> tuple[str, tuple[str, ...]] | None:
    """The container's MPI launcher (mpirun, mpiexec, orterun) and its arguments; None when it
    launches none we can see."""
    words = (*command, *args)
    if not any(w for w in words if "mpi" in w or "orterun" in w):
        return None  # the common case: one substring test per word
    if len(words) > MAX_WORDS or sum(map(len, words)) > MAX_ARGV_BYTES or len(env) > MAX_ENV_ENTRIES:
        return None
    meter = Meter()
    try:
        expanded = [kubelet.expand(w, env, meter) for w in words]
        found = _find(expanded, Environ(env), 0, meter)
    except (OverLimit, ShellSyntaxError, Unfollowable):
        return None
    if found is None or found.argv is None:
        return None
    return found.launcher, tuple(found.argv)


def _find(argv: list[str], env: Environ, depth: int, meter: Meter) -> Found | None:
    i = unwrap(argv, 0, env, meter)
    if i >= len(argv):
        return None
    b = base(argv[i])
    if b in MPI_LAUNCHERS:
        return Found(b, tuple(argv[i + 1 :]), {})
    if b in SHELLS and b != "busybox":
        j = i + 1
        while j < len(argv) and argv[j].startswith("-") and "c" not in argv[j]:
            j += 1
        if j + 1 < len(argv) and argv[j].startswith("-") and "c" in argv[j]:
            inner = ShellState.inheriting(env, meter)
            return run_script(argv[j + 1], inner, depth + 1, meter, _find)
    return None


def _np(argv: Sequence[str]) -> int | None:
    for k, a in enumerate(argv):
        name, eq, value = a.partition("=")
        if eq and name in ("--np", "-np", "--n"):
            return int(value) if value.isdigit() else None
        if a in _NP and k + 1 < len(argv):
            return int(argv[k + 1]) if argv[k + 1].isdigit() else None
    return None


def set_mpirun_np(groups: list[PodGroup], wanted: Callable[[PodGroup, Container], bool]) -> None:
    """Fill Container.mpirun_np, in `groups`, for each wanted container (the MPI launchers)."""
    for gi, group in enumerate(groups):
        if any(wanted(group, c) for c in group.containers):
            containers = tuple(
                replace(c, mpirun_np=mpirun_np(c.command, c.args, c.env)) if wanted(group, c) else c
                for c in group.containers
            )
            groups[gi] = replace(group, containers=containers)

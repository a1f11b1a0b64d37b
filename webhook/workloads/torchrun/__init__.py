"""What a container's torchrun launch line and PET_* environment say about the job's shape.

Pure Python: the webhook never imports torch. The parser reproduces what torch itself does with the
same input, and `tests/torch/` holds it to that against torch's own `get_args_parser()`. The path
of one container, one module per step:

1. `kubelet`: Kubernetes builds the argv, `command + args` (an empty `command` means the image's
   entrypoint, which we cannot see; `args` are then taken as the argv when they start with a
   launcher), and expands `$(VAR)` from the container's env. Without a shell nobody expands
   `$VAR`: torch receives it as written (and rejects `--nnodes=$N`, as we do).
2. `launcher`: finds `torchrun` / `python -m torch.distributed.run|launch`, looking through
   wrappers (`exec`, `env NAME=…`, `timeout 5`, `nice`, …) and into shells;
3. `shell`: a shell (`sh -c`, `bash -lc`, …) runs its script: lexed like POSIX sh and walked
   command by command (`environ` is the environment each command starts with);
4. `options`: the launcher's argv read the way torch's argparse parser does, `PET_<DEST>`
   environment values standing in for absent flags;
5. `spec`: the resulting TorchrunSpec (unknown values are never guessed: `unknown` has the markers).

`limits` holds every cap: each step is linear in its input, and past a cap the facts are unknown,
with `TorchrunSpec.limit` saying why (the `launch-limits` policy shows it as a warning).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from webhook.workloads.model import TorchrunSpec
from webhook.workloads.torchrun import kubelet
from webhook.workloads.torchrun.environ import Environ
from webhook.workloads.torchrun.found import Found
from webhook.workloads.torchrun.launcher import find_launch, launcher_word
from webhook.workloads.torchrun.limits import (
    MAX_ARGV_BYTES,
    MAX_CONTAINERS,
    MAX_ENV_ENTRIES,
    MAX_WORDS,
    Deferred,
    Meter,
    OverLimit,
    WorkloadBudget,
    over,
)
from webhook.workloads.torchrun.shell import Unfollowable, mentions_launcher
from webhook.workloads.torchrun.spec import Injected, LaunchParse, evaluate, spec_of
from webhook.workloads.torchrun.unknown import ARGV, INVALID, LIMIT

__all__ = [
    "ARGV",
    "INVALID",
    "LIMIT",
    "Deferred",
    "Injected",
    "LaunchParse",
    "WorkloadBudget",
    "parse_container",
    "parse_launch",
]


def parse_container(
    command: Sequence[str],
    args: Sequence[str],
    env: Mapping[str, str | None],
    *,
    injected: Mapping[str, Injected] | None = None,
    container_index: int = 0,
    budget: WorkloadBudget | None = None,
) -> TorchrunSpec | None:
    """The container's torchrun view, or None when it neither launches torchrun nor sets PET_NNODES /
    PET_NPROC_PER_NODE (then the launcher is "env").

    `injected`: PET_* entries the training operator adds to this container (they override the
    container's own, as the kubelet lets the last entry of a name win); they feed a launch, but do
    not make one. `container_index`: the container's place in its pod (limits.MAX_CONTAINERS).
    `budget`: the work its workload has left (limits.MAX_WORKLOAD_WORK), charged with this parse.
    """
    # parse_launch's spec, without building the LaunchParse around it: this runs for every
    # container of every admitted object.
    return _metered(budget, lambda m: _parse(command, args, env, injected, container_index, m, spec_of))[0]


def parse_launch(
    command: Sequence[str],
    args: Sequence[str],
    env: Mapping[str, str | None],
    *,
    injected: Mapping[str, Injected] | None = None,
    container_index: int = 0,
    budget: WorkloadBudget | None = None,
) -> LaunchParse:
    """Like parse_container, with the launched argv, the reason for an INVALID verdict and the work spent."""
    parsed, work = _metered(
        budget, lambda m: _parse(command, args, env, injected, container_index, m, evaluate)
    )
    return parsed if parsed is not None else LaunchParse(spec=None, work=work)


_T = TypeVar("_T")
# What a found launch becomes: evaluate (a LaunchParse) or spec_of (its spec alone).
_Finish = Callable[[Found, Meter, "Mapping[str, Injected] | None", "str | None"], _T]


def _metered(budget: WorkloadBudget | None, parse: Callable[[Meter], _T]) -> tuple[_T, int]:
    """`parse` on a meter of the workload's budget, charged even when it raises; and the work it took."""
    meter = budget.meter() if budget is not None else Meter()
    try:
        return parse(meter), meter.work
    finally:
        if budget is not None:
            budget.spent(meter)


def _parse(
    command: Sequence[str],
    args: Sequence[str],
    env: Mapping[str, str | None],
    injected: Mapping[str, Injected] | None,
    container_index: int,
    meter: Meter,
    finish: _Finish[_T],
) -> _T | None:
    """`finish` of the container's launch, or None when it has none (no launcher, no PET_* of its own)."""
    own_pet = "PET_NNODES" in env or "PET_NPROC_PER_NODE" in env
    if not command and not args and not own_pet and container_index < MAX_CONTAINERS:
        return None  # the image's own entrypoint (a sidecar's, often): no launch line to read
    words = (*command, *args)
    limit = _over_a_cap(words, env, container_index)
    if limit is None:
        full = {**env, **{k: v.value for k, v in injected.items()}} if injected else env
        try:
            found = _find(command, words, full, meter)
            if found is None:
                if not own_pet:
                    return None
                found = Found(launcher="env", argv=(), env=_pet(env))
            return finish(found, meter, injected, None)
        except OverLimit as e:
            limit = str(e)
    # Past a cap: nothing more is read than a scan for a launcher's name.
    launcher = next((m for m in map(mentions_launcher, words) if m), None)
    if launcher is None and not own_pet:
        return None
    return finish(Found(launcher or "env", None, {}), meter, None, limit)


def _over_a_cap(words: Sequence[str], env: Mapping[str, str | None], container_index: int) -> str | None:
    if container_index >= MAX_CONTAINERS:
        return f"its pod has more than {MAX_CONTAINERS} containers (container #{container_index + 1})"
    if len(words) > MAX_WORDS:
        return over("command + args", len(words), MAX_WORDS, "words")
    size = sum(map(len, words))
    if size > MAX_ARGV_BYTES:
        return over("command + args", size, MAX_ARGV_BYTES, "characters")
    if len(env) > MAX_ENV_ENTRIES:
        return over("env", len(env), MAX_ENV_ENTRIES, "entries")
    return None


def _find(
    command: Sequence[str], words: Sequence[str], env: Mapping[str, str | None], meter: Meter
) -> Found | None:
    # Without a "$" there is nothing for the kubelet to expand (and nothing charged, as there).
    dollar = "$" in "".join(words)
    expanded = [kubelet.expand(w, env, meter) for w in words] if dollar else list(words)
    if not expanded or not (command or launcher_word(expanded[0])):
        return None
    try:
        return find_launch(expanded, Environ(env), 0, meter)
    except Unfollowable as e:
        return Found(e.launcher, None, _pet(env)) if e.launcher else None


def _pet(env: Mapping[str, str | None]) -> dict[str, str | None]:
    return {k: v for k, v in env.items() if k.startswith("PET_")}

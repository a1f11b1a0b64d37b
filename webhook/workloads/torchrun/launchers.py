"""`accelerate launch` and `deepspeed`: the node and process counts their launch lines state.

Both start torch's distributed processes themselves, so their counts are the same facts as
torchrun's `--nnodes` / `--nproc-per-node`, recorded in a TorchrunSpec whose `launcher` names them:

- `accelerate launch` (also `accelerate-launch`, `python -m accelerate.commands.launch`):
  `--num_machines` is the node count; `--num_processes` is the process count *across all
  machines*, so the per-node count is `num_processes / num_machines` (known only when both are
  given and it divides). `--multi_gpu`, `--machine_rank` and the other options are read only to
  find the training script. A count left off the command line comes from accelerate's config
  file, which the image holds: unknown here, never a default.
- `deepspeed` (also `python -m deepspeed.launcher.runner`): `--num_nodes` and `--num_gpus`
  (`--num_accelerators`) per node. With a `--hostfile` (and without `--no_ssh` / `--node_rank`)
  one pod starts the processes of every host over ssh, pdsh or MPI, so nothing it states is about
  the pod that runs it: both counts are unknown. `--include` / `--exclude` pick GPUs by hand: the
  per-node count is unknown.

What is read is bounded like torchrun's: one step per word, charged to the same meter, up to the
training script (everything after it belongs to the script).
"""

from __future__ import annotations

from collections.abc import Sequence

from webhook.workloads.model import TorchrunSpec
from webhook.workloads.torchrun.limits import Meter
from webhook.workloads.torchrun.unknown import ARGV, INVALID, LIMIT, UNK

ACCELERATE = "accelerate"
DEEPSPEED = "deepspeed"
LAUNCHERS = frozenset({ACCELERATE, DEEPSPEED})
MODULES = {"accelerate.commands.launch": ACCELERATE, "deepspeed.launcher.runner": DEEPSPEED}

# Options that take no value (store_true); every other option takes one. Names with "_".
_ACCELERATE_FLAGS = frozenset(
    {
        "h",
        "help",
        "q",
        "quiet",
        "m",
        "module",
        "cpu",
        "multi_gpu",
        "tpu",
        "ipex",
        "mps",
        "use_xpu",
        "use_deepspeed",
        "use_fsdp",
        "use_megatron_lm",
        "no_python",
        "debug",
        "same_network",
        "tpu_use_cluster",
        "tpu_use_sudo",
        "downcast_bf16",
        "dynamo_use_fullgraph",
        "dynamo_use_dynamic",
        "dynamo_use_regional_compilation",
        "enable_cpu_affinity",
        "use_parallelism_config",
    }
)
_DEEPSPEED_FLAGS = frozenset(
    {
        "h",
        "help",
        "module",
        "no_python",
        "no_local_rank",
        "no_ssh",
        "no_ssh_check",
        "force_multi",
        "save_pid",
        "elastic_training",
        "bind_cores_to_rank",
        "enable_each_rank_log",
    }
)
_DEEPSPEED_SHORT = {"H": "hostfile", "i": "include", "e": "exclude"}


def read(launcher: str, argv: Sequence[str] | None, meter: Meter, limit: str | None) -> TorchrunSpec:
    """The counts an accelerate or deepspeed launch line states (None where it does not)."""
    if argv is None:
        unread = (ARGV, LIMIT) if limit is not None else (ARGV,)
        return TorchrunSpec(launcher=launcher, unresolved=unread, limit=limit)
    flags = _ACCELERATE_FLAGS if launcher == ACCELERATE else _DEEPSPEED_FLAGS
    options, complete = _options(argv, flags, meter)
    if launcher == ACCELERATE:
        nodes, per_node, error = _accelerate(options)
    else:
        nodes, per_node, error = _deepspeed(options)
    markers: list[str] = []
    if error is not None:
        markers.append(INVALID)
    if not complete:
        markers.append(ARGV)
    nodes_int = _int(nodes)
    per_node_int = _int(per_node)
    sources: dict[str, str] = {}
    if nodes is not None:
        sources["nnodes"] = "flag"
    if per_node is not None:
        sources["nproc_per_node"] = "flag"
    return TorchrunSpec(
        launcher=launcher,
        nnodes=nodes,
        nnodes_min=nodes_int,
        nnodes_max=nodes_int,
        nproc_per_node=per_node,
        nproc_per_node_int=per_node_int,
        sources=sources,
        unresolved=tuple(markers),
    )


def _accelerate(options: dict[str, str | None]) -> tuple[str | None, str | None, str | None]:
    machines, processes = options.get("num_machines"), options.get("num_processes")
    error = _not_positive(machines, "--num_machines") or _not_positive(processes, "--num_processes")
    m, p = _int(machines), _int(processes)
    if m is None:
        return None, None, error
    per_node = str(p // m) if p is not None and p % m == 0 else None
    if p is not None and p % m:
        error = error or f"--num_processes={p} is not a multiple of --num_machines={m}"
    return str(m), per_node, error


def _deepspeed(options: dict[str, str | None]) -> tuple[str | None, str | None, str | None]:
    per_pod = "no_ssh" in options or "node_rank" in options or "hostfile" not in options
    if not per_pod:  # one pod starts every host's processes: nothing here is about this pod
        return None, None, None
    nodes = options.get("num_nodes")
    gpus = options.get("num_gpus", options.get("num_accelerators"))
    if "include" in options or "exclude" in options:
        gpus = None
    error = _not_positive(nodes, "--num_nodes") or _not_positive(gpus, "--num_gpus")
    return (nodes if _int(nodes) else None), (gpus if _int(gpus) else None), error


def _options(argv: Sequence[str], flags: frozenset[str], meter: Meter) -> tuple[dict[str, str | None], bool]:
    """The options before the training script (a later one wins, as in argparse), and whether
    every option up to the script was read (not when an option's own name is unknown text)."""
    out: dict[str, str | None] = {}
    i, n = 0, len(argv)
    while i < n:
        meter.charge(1)
        word = argv[i]
        if UNK in word:
            return out, False
        if word == "--" or not word.startswith("-") or word == "-":
            break  # the training script (or what runs it)
        name, eq, value = word.lstrip("-").partition("=")
        name = name.replace("-", "_")
        if not word.startswith("--"):
            name = _DEEPSPEED_SHORT.get(name, name)
        if eq or name in flags:
            out[name] = value if eq else None
            i += 1
            continue
        if i + 1 >= n:
            return out, False
        out[name] = argv[i + 1]  # unknown text in a value makes that value unknown, not the rest
        i += 2
    return out, True


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value > 0 else None


def _not_positive(text: str | None, flag: str) -> str | None:
    if text is None or UNK in text or _int(text) is not None:
        return None
    return f"{flag}={text} is not a positive integer"

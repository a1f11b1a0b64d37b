"""torch's launcher options and its argparse parser, reproduced.

torch/distributed/run.py `get_args_parser()` (torch 2.15) on Python 3.11's argparse: `--flag=value`
and `--flag value`, dash and underscore spellings, unique-prefix abbreviations (`--nproc_per` is
`--nproc_per_node`, but `--nproc` is ambiguous and torch exits, because both spellings are separate
option strings), clustered short options (`-mr3`); parsing stops at the training script, yet every
later argument is still checked for ambiguity (argparse classifies them all first), so
`torchrun train.py --lo x` fails in torch as it does here. `PET_<DEST>` environment values stand in
for absent flags (a flag overrides the env); the boolean ones (`PET_STANDALONE`, …) must be integers.

Hand-written rather than built on `argparse` itself: argparse exits the process (or, with
`exit_on_error=False`, still exits on some errors), prints, and cannot carry text we cannot know.
Each argument is classified once (a dict lookup of its prefix) and consumed once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from webhook.workloads.torchrun.limits import Meter
from webhook.workloads.torchrun.unknown import UNK as _UNK

# torch's option table (torch/distributed/run.py get_args_parser, torch 2.15)


@dataclass(frozen=True, slots=True)
class _Opt:
    strings: tuple[str, ...]
    dest: str
    takes_value: bool = True
    type: str = "str"  # "str" | "int" | "float" | "list"
    choices: tuple[str, ...] | None = None
    env: bool = True  # action=env / check_env: falls back to PET_<DEST>
    exits: bool = False  # -h/--help, --print-completion: print and exit, never launch
    checked: bool = False  # a value has a type or choices to check (_convert has work to do)


def _o(
    *strings: str,
    takes_value: bool = True,
    type: str = "str",
    choices: tuple[str, ...] | None = None,
    env: bool = True,
    exits: bool = False,
) -> _Opt:
    # argparse's dest: the first long option string, dashes turned into underscores.
    longs = [s for s in strings if s.startswith("--")]
    dest = (longs[0] if longs else strings[0]).lstrip("-").replace("-", "_")
    return _Opt(strings, dest, takes_value, type, choices, env, exits, type != "str" or choices is not None)


_RUN_OPTIONS: tuple[_Opt, ...] = (
    _o("-h", "--help", takes_value=False, env=False, exits=True),
    _o("--nnodes"),
    _o("--nproc-per-node", "--nproc_per_node"),
    _o("--rdzv-backend", "--rdzv_backend"),
    _o("--rdzv-endpoint", "--rdzv_endpoint"),
    _o("--rdzv-id", "--rdzv_id"),
    _o("--rdzv-conf", "--rdzv_conf"),
    _o("--standalone", takes_value=False),
    _o("--max-restarts", "--max_restarts", type="int"),
    _o("--monitor-interval", "--monitor_interval", type="float"),
    _o("--start-method", "--start_method", choices=("spawn", "fork", "forkserver")),
    _o("--event-log-handler", "--event_log_handler"),
    _o("--role"),
    _o("-m", "--module", takes_value=False),
    _o("--no-python", "--no_python", takes_value=False),
    _o("--run-path", "--run_path", takes_value=False),
    _o("--log-dir", "--log_dir"),
    _o("-r", "--redirects"),
    _o("-t", "--tee"),
    _o("--log-line-prefix-template", "--log_line_prefix_template"),
    _o("--local-ranks-filter", "--local_ranks_filter"),
    _o("--duplicate-stdout-filters", "--duplicate_stdout_filters", type="list"),
    _o("--duplicate-stderr-filters", "--duplicate_stderr_filters", type="list"),
    _o("--node-rank", "--node_rank", type="int"),
    _o("--master-addr", "--master_addr"),
    _o("--master-port", "--master_port", type="int"),
    _o("--local-addr", "--local_addr"),
    _o("--logs-specs", "--logs_specs", env=False),
    _o(
        "--numa-binding", "--numa_binding", env=False, choices=("node", "socket", "exclusive", "core-complex")
    ),
    _o("--signals-to-handle", "--signals_to_handle"),
    _o("--shutdown-timeout", "--shutdown_timeout", type="int"),
    _o("--virtual-local-rank", "--virtual_local_rank", takes_value=False),
    _o("--print-completion", "--print_completion", env=False, exits=True, choices=("bash", "zsh", "tcsh")),
)
# torch.distributed.launch: the same parser plus its legacy flag.
_LAUNCH_OPTIONS: tuple[_Opt, ...] = (
    *_RUN_OPTIONS,
    _o("--use-env", "--use_env", takes_value=False, env=False),
)


def _option_map(options: tuple[_Opt, ...]) -> dict[str, _Opt]:
    return {s: o for o in options for s in o.strings}


def _prefix_map(options: dict[str, _Opt]) -> dict[str, tuple[str, ...]]:
    """Every prefix of every long option string -> the option strings it abbreviates, in order."""
    out: dict[str, list[str]] = {}
    for s in options:
        if s.startswith("--"):
            for i in range(2, len(s) + 1):
                out.setdefault(s[:i], []).append(s)
    return {k: tuple(v) for k, v in out.items()}


def _env_options(options: dict[str, _Opt]) -> tuple[tuple[_Opt, str], ...]:
    """(option, PET_<DEST>) for each option that reads the environment, once per dest."""
    seen: dict[str, tuple[_Opt, str]] = {}
    for o in options.values():
        if o.env and o.dest not in seen:
            seen[o.dest] = (o, f"PET_{o.dest.upper()}")
    return tuple(seen.values())


_OPTION_MAPS = {
    "torchrun": _option_map(_RUN_OPTIONS),
    "torch.distributed.run": _option_map(_RUN_OPTIONS),
    "torch.distributed.launch": _option_map(_LAUNCH_OPTIONS),
    "env": _option_map(_RUN_OPTIONS),
}
_PREFIX_MAPS = {k: _prefix_map(v) for k, v in _OPTION_MAPS.items()}
_ENV_OPTIONS = {k: _env_options(v) for k, v in _OPTION_MAPS.items()}
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class TorchExit(Exception):
    """torch's parser (or launch-time checks) would stop here."""

    def __init__(self, message: str, fld: str | None = None) -> None:
        super().__init__(message)
        self.field = fld


_Classified = tuple[str, _Opt | None, str, str | None]  # (pattern, action, option_string, explicit)


def _classify(word: str, options: dict[str, _Opt], prefixes: dict[str, tuple[str, ...]]) -> _Classified:
    """argparse's _parse_optional: 'A' positional, 'O' option (action None: unknown), 'U' unknowable."""
    if not word or word[0] not in "-" + _UNK:
        return ("A", None, "", None)
    if word[0] == _UNK:
        return ("U", None, "", None)
    if word in options:
        return ("O", options[word], word, None)
    if len(word) == 1:
        return ("A", None, "", None)
    if "=" in word:
        name, explicit = word.split("=", 1)
        if name in options:
            return ("O", options[name], name, explicit)
    # _get_option_tuples: unique prefixes of long options (allow_abbrev), short option + its value.
    matches: list[tuple[_Opt, str, str | None]] = []
    if word[1] == "-":
        prefix, eq, value = word.partition("=")
        if _UNK in prefix:
            return ("U", None, "", None)
        matches = [(options[s], s, value if eq else None) for s in prefixes.get(prefix, ())]
    elif word[1] == _UNK:
        return ("U", None, "", None)
    elif word[:2] in options:  # a short option with its value glued on (`-r3`); no long one starts so
        matches.append((options[word[:2]], word[:2], word[2:]))
    if len(matches) > 1:
        names = ", ".join(s for _, s, _ in matches)
        raise TorchExit(f"ambiguous option: {word} could match {names}".replace(_UNK, "…"))
    if len(matches) == 1:
        opt, option_string, explicit_arg = matches[0]
        return ("O", opt, option_string, explicit_arg)
    if _NEGATIVE_NUMBER.match(word) or " " in word:
        return ("A", None, "", None)
    if _UNK in word:
        return ("U", None, "", None)
    return ("O", None, word, None)


def _convert(opt: _Opt, value: str, from_env: bool) -> None:
    """argparse type conversion (and, for command-line values, the choices check)."""
    if _UNK in value:
        return
    try:
        if opt.type == "int":
            int(value)
        elif opt.type == "float":
            float(value)
    except ValueError:
        raise TorchExit(
            f"argument {'/'.join(opt.strings)}: invalid {opt.type} value: {value!r}", opt.dest
        ) from None
    if not from_env and opt.choices is not None and value not in opt.choices:
        raise TorchExit(f"argument {'/'.join(opt.strings)}: invalid choice: {value!r}", opt.dest)


@dataclass(slots=True)
class Values:
    values: dict[str, tuple[str | bool, str]] = field(default_factory=dict)  # dest -> (value, source)
    unknown: set[str] = field(default_factory=set)  # dests whose value we cannot know
    argv_unknown: bool = False


# How argparse reads a word depends only on the word and the launcher's option table, and the same
# launch lines come back with every pod of a job: words are remembered per launcher, short ones
# only and a bounded number of them (then the rest are classified each time, as before).
_CLASSIFIED: dict[str, dict[str, _Classified]] = {k: {} for k in _OPTION_MAPS}
_MAX_CLASSIFIED = 4096
_MAX_CLASSIFIED_WORD = 256


_DASHDASH: _Classified = ("-", None, "", None)
_POSITIONAL: _Classified = ("A", None, "", None)


def _classify_all(
    argv: Sequence[str],
    options: dict[str, _Opt],
    prefixes: dict[str, tuple[str, ...]],
    known: dict[str, _Classified],
    meter: Meter,
) -> list[_Classified]:
    """argparse's reading of every word, in order (after `--`, all positional), remembered in `known`."""
    classified: list[_Classified] = []
    for k, word in enumerate(argv):
        meter.charge(1 + len(word))  # classifying reads the word a fixed number of times
        if word == "--":
            classified.append(_DASHDASH)
            classified.extend(_POSITIONAL for _ in argv[k + 1 :])
            break
        reading = known.get(word)
        if reading is None:
            reading = _classify(word, options, prefixes)
            if len(word) <= _MAX_CLASSIFIED_WORD and len(known) < _MAX_CLASSIFIED:
                known[word] = reading
        classified.append(reading)
    return classified


def _remembered(argv: Sequence[str], known: dict[str, _Classified], meter: Meter) -> list[_Classified] | None:
    """_classify_all when every word read is remembered and the meter has room for all of them: the
    same readings and the same charge, made at once. None otherwise (then _classify_all, word by
    word, charges up to the word that fails, as before)."""
    n = len(argv)
    stop = argv.index("--") if "--" in argv else n
    head = argv[:stop]
    cost = len(head) + sum(map(len, head))
    if stop < n:
        cost += 3  # `--` itself, charged 1 + 2
    if meter.work + cost > meter.budget:
        return None
    classified: list[_Classified | None] = list(map(known.get, head))
    if None in classified:
        return None
    meter.charge(cost)
    if stop < n:
        classified.append(_DASHDASH)
        classified.extend([_POSITIONAL] * (n - stop - 1))
    return cast(list[_Classified], classified)


def parse_argv(argv: Sequence[str], launcher: str, out: Values, meter: Meter) -> None:
    """torch's parser over argv; raises TorchExit where torch exits."""
    options = _OPTION_MAPS[launcher]
    classified = _remembered(argv, _CLASSIFIED[launcher], meter)
    if classified is None:
        classified = _classify_all(argv, options, _PREFIX_MAPS[launcher], _CLASSIFIED[launcher], meter)

    values, unknown = out.values, out.unknown

    def store(opt: _Opt, value: str | None) -> None:
        """The option's value (None: a flag, stored as True)."""
        values[opt.dest] = (True if value is None else value, "flag")
        if value is not None and opt.checked:
            _convert(opt, value, from_env=False)
        if opt.exits:
            raise TorchExit(f"{'/'.join(opt.strings)} prints and exits")
        if value is not None and _UNK in value:
            unknown.add(opt.dest)
        else:
            unknown.discard(opt.dest)

    extras: list[str] = []
    i, script = 0, False
    while i < len(argv):
        pattern, opt, option_string, explicit = classified[i]
        if pattern == "U":
            out.argv_unknown = True
            return
        if pattern in ("A", "-"):
            if pattern == "-":
                if i + 1 >= len(argv):
                    extras.append("--")
                    break
                i += 1
            script = True
            break
        if opt is None:
            extras.append(argv[i])
            i += 1
            continue
        while True:
            if explicit is not None:
                if not opt.takes_value and option_string[1] != "-" and explicit != "":
                    store(opt, None)
                    if explicit[0] == _UNK:
                        out.argv_unknown = True
                        return
                    option_string = "-" + explicit[0]
                    explicit = explicit[1:] or None
                    if option_string not in options:
                        raise TorchExit(f"argument {opt.strings[0]}: ignored explicit argument")
                    opt = options[option_string]
                    continue
                if opt.takes_value:
                    store(opt, explicit)
                    i += 1
                    break
                raise TorchExit(f"argument {'/'.join(opt.strings)}: ignored explicit argument {explicit!r}")
            if not opt.takes_value:
                store(opt, None)
                i += 1
                break
            if i + 1 < len(argv) and classified[i + 1][0] in ("A", "U"):
                store(opt, argv[i + 1])
                i += 2
                break
            raise TorchExit(f"argument {'/'.join(opt.strings)}: expected one argument")
    if not script:
        raise TorchExit("the following arguments are required: training_script, training_script_args")
    if extras:
        raise TorchExit(f"unrecognized arguments: {' '.join(extras)}")


def apply_env(launcher: str, env: Mapping[str, str | None], out: Values) -> None:
    """PET_<DEST> fallbacks, as torch's env / check_env actions read them."""
    if not env:
        return
    for opt, name in _ENV_OPTIONS[launcher]:
        if name not in env:
            continue
        value = env[name]
        if not opt.takes_value:  # check_env: bool(int(value)) when the parser is built
            if value is None or _UNK in value:
                if opt.dest not in out.values:
                    out.unknown.add(opt.dest)
                continue
            try:
                flag = bool(int(value))
            except ValueError:
                raise TorchExit(f"{name}={value!r} is not an integer", opt.dest) from None
            if opt.dest not in out.values:
                out.values[opt.dest] = (flag, "env")
            continue
        if opt.dest in out.values:
            continue  # a flag overrides the env
        if value is None or _UNK in value:
            out.unknown.add(opt.dest)
            out.values[opt.dest] = ("", "env")
            continue
        _convert(opt, value, from_env=True)
        out.values[opt.dest] = (value, "env")

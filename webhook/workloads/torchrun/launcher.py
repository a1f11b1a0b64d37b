"""Finding the torch launch in one command's argv.

The launcher is `torchrun`, `python -m torch.distributed.run` or `python -m torch.distributed.launch`
(with interpreter flags such as `-u`, `-X dev`, `-W ignore` before `-m`), or a Python interpreter
running the torchrun console script or `run.py` by path; or `accelerate launch` / `deepspeed`
(also as `python -m` modules), whose counts `launchers` reads. Wrappers are looked through (`exec`,
`env NAME=…`, `nohup`, `time`, `timeout 5`, `nice -n 5`, …) and shells followed (`sh -c SCRIPT`).

The argv is walked with one index: a wrapper moves the index past its own options, nothing is
sliced until the launch is found, so `timeout 5 timeout 5 …` costs one step per word.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from webhook.workloads.torchrun.environ import Environ
from webhook.workloads.torchrun.found import Found
from webhook.workloads.torchrun.launchers import ACCELERATE, DEEPSPEED
from webhook.workloads.torchrun.launchers import MODULES as OTHER_MODULES
from webhook.workloads.torchrun.limits import Meter
from webhook.workloads.torchrun.shell import NAME, ShellState, run_script
from webhook.workloads.torchrun.unknown import UNK

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "busybox"})
_PYTHON = re.compile(r"python(\d+(\.\d+)*)?")
MODULES = ("torch.distributed.run", "torch.distributed.launch")


def base(word: str) -> str:
    return word[word.rfind("/") + 1 :]  # no list built; the word itself when it has no "/"


def launcher_word(word: str) -> bool:
    """Could this word start a launch (as `args[0]` when the image's entrypoint is unknown)?"""
    b = base(word)
    return (
        b == "torchrun"
        or b in _OTHER_LAUNCHERS
        or b in SHELLS
        or b in _WRAPPERS
        or _PYTHON.fullmatch(b) is not None
    )


# Console scripts of the other launchers: the word, and the subcommand it needs ("" for none).
_OTHER_LAUNCHERS = {
    "accelerate": (ACCELERATE, "launch"),
    "accelerate-launch": (ACCELERATE, ""),
    "deepspeed": (DEEPSPEED, ""),
}


def _may_launch(head: str) -> bool:
    """Whether find_launch reads past a command's first word (else it returns None at once)."""
    return UNK not in head and launcher_word(head)


def find_launch(argv: Sequence[str], env: Environ, depth: int, meter: Meter) -> Found | None:
    """The torch launch in one command's argv (following wrappers and nested shells).

    `env` is the command's environment; wrappers such as `env -i` edit it in place.
    """
    i, n = 0, len(argv)
    while i < n:
        meter.charge(1)
        head = argv[i]
        if UNK in head:
            return None
        b = base(head)
        if b == "torchrun":
            return Found("torchrun", tuple(argv[i + 1 :]), env.pet(meter))
        other = _OTHER_LAUNCHERS.get(b)
        if other is not None:
            launcher, sub = other
            if not sub:
                return Found(launcher, tuple(argv[i + 1 :]), {})
            if i + 1 < n and argv[i + 1] == sub:
                return Found(launcher, tuple(argv[i + 2 :]), {})
            return None  # `accelerate config`, `accelerate env`, …: no launch
        wrapper = _WRAPPERS.get(b)
        if wrapper is not None:
            i = wrapper(argv, i + 1, env, meter)
            continue
        if b in SHELLS:
            return _find_in_shell(argv, i, env, depth, meter)
        if _PYTHON.fullmatch(b):
            return _find_in_python(argv, i + 1, env, meter)
        return None
    return None


def unwrap(argv: Sequence[str], i: int, env: Environ, meter: Meter) -> int:
    """The index of the command that the wrappers from argv[i] on finally run."""
    while i < len(argv):
        meter.charge(1)
        wrapper = _WRAPPERS.get(base(argv[i]))
        if wrapper is None:
            return i
        i = wrapper(argv, i + 1, env, meter)
    return i


def _find_in_python(argv: Sequence[str], start: int, env: Environ, meter: Meter) -> Found | None:
    i, n = start, len(argv)
    while i < n:
        meter.charge(1)
        a = argv[i]
        if UNK in a:
            return None
        if a == "--":
            i += 1
            break
        if a == "-":
            return None  # the program comes from stdin
        if a.startswith("--"):
            i += 2 if a == "--check-hash-based-pycs" else 1
            continue
        if a.startswith("-") and len(a) > 1:
            j = 1
            while j < len(a):
                ch = a[j]
                if ch in "cmWX":
                    value = a[j + 1 :]
                    consumed = 1
                    if not value:
                        if i + 1 >= n:
                            return None
                        value, consumed = argv[i + 1], 2
                    if ch == "c":
                        return None
                    if ch == "m":
                        if value in MODULES:
                            return Found(value, tuple(argv[i + consumed :]), env.pet(meter))
                        if value in OTHER_MODULES:
                            return Found(OTHER_MODULES[value], tuple(argv[i + consumed :]), {})
                        return None
                    i += consumed - 1
                    break
                j += 1
            i += 1
            continue
        break
    if i < n:
        script = argv[i].replace("\\", "/")
        if base(script) == "torchrun":  # the console script, run by an explicit interpreter
            return Found("torchrun", tuple(argv[i + 1 :]), env.pet(meter))
        for module in MODULES:
            if script.endswith(module.replace(".", "/") + ".py"):
                return Found(module, tuple(argv[i + 1 :]), env.pet(meter))
    return None


def _find_in_shell(argv: Sequence[str], start: int, env: Environ, depth: int, meter: Meter) -> Found | None:
    """`sh -c SCRIPT [NAME [ARGS…]]`: follow SCRIPT with the (exported) environment it inherits."""
    i, n = start + 1, len(argv)
    if base(argv[start]) == "busybox":
        if i >= n or base(argv[i]) not in SHELLS - {"busybox"}:
            return None
        i += 1
    has_c = False
    while i < n:
        meter.charge(1)
        a = argv[i]
        if UNK in a:
            return None
        if a in ("--rcfile", "--init-file"):
            i += 2
            continue
        if a == "--" or a == "-":
            i += 1
            break
        if a.startswith("--"):
            i += 1
            continue
        if a[:1] in "-+" and len(a) > 1:
            has_c = has_c or "c" in a[1:]
            i += 1 + a.count("o", 1) + a.count("O", 1)  # -o/-O take the next argument
            continue
        break
    if not has_c or i >= n:
        return None  # a script file or stdin: not visible to us
    script = argv[i]
    inner = ShellState.inheriting(env, meter)
    if i + 1 < n:
        inner.set_params(list(argv[i + 2 :]), argv[i + 1])
    return run_script(script, inner, depth + 1, meter, find_launch, _may_launch)


# A wrapper reads its own options from argv[start:] and returns the index of the wrapped command.
_Wrapper = Callable[[Sequence[str], int, Environ, Meter], int]


def _skipper(with_value: frozenset[str] = frozenset()) -> _Wrapper:
    """A wrapper whose options come first (`nice -n 5 CMD`, `timeout -s KILL 5 CMD`)."""

    def skip(argv: Sequence[str], i: int, env: Environ, meter: Meter) -> int:
        while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
            meter.charge(1)
            if argv[i] == "--":
                return i + 1
            i += 2 if argv[i] in with_value else 1
        return i

    return skip


def _none(argv: Sequence[str], i: int, env: Environ, meter: Meter) -> int:
    return i


def _wrap_env(argv: Sequence[str], i: int, env: Environ, meter: Meter) -> int:
    n = len(argv)
    while i < n:
        meter.charge(1)
        a = argv[i]
        if a in ("-i", "--ignore-environment", "-"):
            env.clear()
        elif a in ("-u", "--unset"):
            env.unset(argv[i + 1] if i + 1 < n else "")
            i += 1
        elif a.startswith("--unset="):
            env.unset(a.split("=", 1)[1])
        elif a in ("-C", "--chdir", "-S", "--split-string"):
            i += 1
        elif a == "--":
            i += 1
            continue
        elif a.startswith("-") and len(a) > 1:
            pass
        elif "=" in a and NAME.fullmatch(a.split("=", 1)[0]):
            name, value = a.split("=", 1)
            env.set(name, None if UNK in value else value)
        else:
            break
        i += 1
    return i


_skip_timeout = _skipper(frozenset({"-s", "--signal", "-k", "--kill-after"}))


def _wrap_timeout(argv: Sequence[str], i: int, env: Environ, meter: Meter) -> int:
    return _skip_timeout(argv, i, env, meter) + 1  # then the duration


_WRAPPERS: dict[str, _Wrapper] = {
    "exec": _skipper(frozenset({"-a"})),
    "env": _wrap_env,
    "nohup": _none,
    "command": _skipper(),
    "builtin": _none,
    "time": _skipper(),
    "nice": _skipper(frozenset({"-n", "--adjustment"})),
    "stdbuf": _skipper(frozenset({"-i", "-o", "-e"})),
    "setsid": _skipper(),
    "timeout": _wrap_timeout,
}

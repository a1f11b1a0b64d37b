"""What a container's torchrun launch line and PET_* environment say about the job's shape.

Pure Python: the webhook never imports torch. The parser reproduces what torch itself does with the
same input, and `tests/torch/` holds it to that against torch's own `get_args_parser()`:

1. Kubernetes builds the argv: `command + args` (an empty `command` means the image's entrypoint,
   which we cannot see; `args` are then taken as the argv when they start with a launcher), and the
   kubelet expands `$(VAR)` from the container's env (`$$` escapes a `$`). Without a shell nobody
   expands `$VAR`: torch receives it as written (and rejects `--nnodes=$N`, as we do).
2. A shell (`sh -c`, `bash -lc`, `bash -xc`, …) runs its script: we lex it like POSIX sh (quotes,
   escapes, `\\` line continuations, comments, here-documents, `;` `&&` `||` `|` `&` and newlines),
   walk its simple commands in order, track `NAME=value` / `export NAME=value`, expand `$VAR`,
   `${VAR}`, `${VAR:-default}`, `$1`, `"$@"` and split unquoted expansions into fields. The first
   command that launches torch is the launch line (conditions are not evaluated). `exec`,
   `env NAME=…`, `nohup`, `time`, … and `NAME=value` prefixes are looked through; a nested
   `bash -c "…"` and `eval` are followed. Scripts over 64 KiB are not lexed (admission latency).
3. The launcher: `torchrun`, `python -m torch.distributed.run`, `python -m torch.distributed.launch`
   (with interpreter flags such as `-u`, `-X dev`, `-W ignore` before `-m`).
4. Its argv is parsed the way torch 2.15's `argparse` parser does on Python 3.11: `--flag=value` and
   `--flag value`, dash and underscore spellings, unique-prefix abbreviations (`--nproc_per` is
   `--nproc_per_node`, but `--nproc` is ambiguous and torch exits, because both spellings are
   separate option strings), clustered short options (`-mr3`), parsing stops at the training script,
   yet every later argument is still checked for ambiguity (argparse classifies them all first), so
   `torchrun train.py --lo x` fails in torch as it does here.
5. `PET_<DEST>` environment values stand in for absent flags (a flag overrides the env); the
   boolean ones (`PET_STANDALONE`, …) must be integers.

Unknown values (a `valueFrom` env entry, a variable the container's env does not define, which the
image or `envFrom` may, a command substitution) are never guessed: the field is left None and its
name is listed in `TorchrunSpec.unresolved`. Two more entries may appear there:

- `"argv"` (ARGV): part of the launch line itself is unknown (e.g. `torchrun $EXTRA_ARGS train.py`),
  so any field may be overridden by what we could not see;
- `"invalid"` (INVALID): torch would refuse this launch line (SystemExit from its parser, a bad
  `--nnodes` range, a negative `--max-restarts`); the offending field, when there is one, is listed
  too and its typed value is None. `parse_launch()` returns the reason as text.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from webhook.workloads.model import TorchrunSpec

__all__ = ["ARGV", "INVALID", "LaunchParse", "parse_container", "parse_launch"]

INVALID = "invalid"
ARGV = "argv"

# Stands for a part of a word whose text we cannot know. NUL cannot occur in a real argv.
_UNK = "\x00"

# The fields of TorchrunSpec that the parser fills, in report order.
_FIELDS = ("nnodes", "nproc_per_node", "standalone", "rdzv_backend", "max_restarts")


# --------------------------------------------------------------------------------------------------
# torch's option table (torch/distributed/run.py get_args_parser, torch 2.15)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Opt:
    strings: tuple[str, ...]
    dest: str
    takes_value: bool = True
    type: str = "str"  # "str" | "int" | "float" | "list"
    choices: tuple[str, ...] | None = None
    env: bool = True  # action=env / check_env: falls back to PET_<DEST>
    exits: bool = False  # -h/--help, --print-completion: print and exit, never launch


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
    return _Opt(strings, dest, takes_value, type, choices, env, exits)


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
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LaunchParse:
    """The spec plus what was found on the way: the argv torch would receive and why it is invalid."""

    spec: TorchrunSpec | None
    # The arguments after the launcher (what torch's parser gets), NUL marking unknown text;
    # None when there is no launch line (env-only) or it could not be followed.
    argv: tuple[str, ...] | None = None
    # The environment of the launched process as far as it matters (PET_* names only).
    env: dict[str, str | None] = field(default_factory=dict)
    error: str | None = None  # why torch would reject it (set iff INVALID in spec.unresolved)


def parse_container(
    command: Sequence[str], args: Sequence[str], env: Mapping[str, str | None]
) -> TorchrunSpec | None:
    """The container's torchrun view, or None when it neither launches torchrun nor sets PET_NNODES /
    PET_NPROC_PER_NODE (then the launcher is "env")."""
    return parse_launch(command, args, env).spec


def parse_launch(command: Sequence[str], args: Sequence[str], env: Mapping[str, str | None]) -> LaunchParse:
    """Like parse_container, with the launched argv and the reason for an INVALID verdict."""
    env = dict(env)
    words = [_kubelet_expand(w, env) for w in (*command, *args)]
    found: _Found | None = None
    if words and (command or _launcher_word(words[0])):
        try:
            found = _find_launch(words, _ShellState.from_env(env), depth=0)
        except _Unfollowable as e:
            found = _Found(launcher=e.launcher, argv=None, env=_pet_env(env)) if e.launcher else None
    if found is None:
        pet = _pet_env(env)
        if "PET_NNODES" not in pet and "PET_NPROC_PER_NODE" not in pet:
            return LaunchParse(spec=None)
        found = _Found(launcher="env", argv=(), env=pet)
    return _evaluate(found)


# --------------------------------------------------------------------------------------------------
# Kubernetes $(VAR) expansion (k8s.io/kubernetes third_party/forked/golang/expansion)
# --------------------------------------------------------------------------------------------------


def _kubelet_expand(text: str, env: Mapping[str, str | None]) -> str:
    if "$(" not in text and "$$" not in text:
        return text  # nothing for the kubelet to do
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "$" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":  # escaped operator
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close < 0:  # incomplete reference: kept as is
                out.append("$(")
                i += 2
                continue
            name = text[i + 2 : close]
            if name in env:
                value = env[name]
                out.append(value if value is not None else _UNK)
            elif _ENV_NAME.match(name):
                # The kubelet leaves an undefined reference as is, but envFrom (which we do not see)
                # may define it, and in a script `$(name)` is a command substitution: unknown.
                out.append(_UNK)
            else:
                out.append(text[i : close + 1])  # `$((1+2))` and the like: left to the shell
            i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


# --------------------------------------------------------------------------------------------------
# Finding the launch line
# --------------------------------------------------------------------------------------------------

_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "busybox"})
_PYTHON = re.compile(r"^python(\d+(\.\d+)*)?$")
_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_MAX_DEPTH = 8  # nested shells and evals followed
_MAX_SCRIPT = 64 * 1024  # longer scripts are not lexed (admission latency): a launch in them is ARGV


@dataclass(slots=True)
class _Found:
    launcher: str
    argv: tuple[str, ...] | None  # None: the launch line could not be followed
    env: dict[str, str | None]


class _Unfollowable(Exception):
    """A launch (or a script) we can see but not follow; launcher set when we know it is torch."""

    def __init__(self, launcher: str | None) -> None:
        super().__init__(launcher)
        self.launcher = launcher


def _base(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _launcher_word(word: str) -> bool:
    base = _base(word)
    return base == "torchrun" or base in _SHELLS or bool(_PYTHON.match(base)) or base in _WRAPPERS


def _pet_env(env: Mapping[str, str | None]) -> dict[str, str | None]:
    return {k: v for k, v in env.items() if k.startswith("PET_")}


def _find_launch(words: Sequence[str], state: _ShellState, depth: int) -> _Found | None:
    """The torch launch in one command's argv (following wrappers and nested shells)."""
    argv = list(words)
    env = state.exported_env()
    while argv:
        head = argv[0]
        if _UNK in head:
            return None
        base = _base(head)
        if base == "torchrun":
            return _Found("torchrun", tuple(argv[1:]), _pet_env(env))
        if base in _WRAPPERS:
            argv = _WRAPPERS[base](argv[1:], env)
            continue
        if base in _SHELLS:
            return _find_in_shell(argv, env, depth)
        if _PYTHON.match(base):
            return _find_in_python(argv[1:], env)
        return None
    return None


def _find_in_python(rest: list[str], env: dict[str, str | None]) -> _Found | None:
    i = 0
    while i < len(rest):
        a = rest[i]
        if _UNK in a:
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
                        if i + 1 >= len(rest):
                            return None
                        value, consumed = rest[i + 1], 2
                    if ch == "c":
                        return None
                    if ch == "m":
                        if value in _MODULES:
                            return _Found(value, tuple(rest[i + consumed :]), _pet_env(env))
                        return None
                    i += consumed - 1
                    break
                j += 1
            i += 1
            continue
        break
    if i < len(rest):
        script = rest[i].replace("\\", "/")
        if _base(script) == "torchrun":  # the console script, run by an explicit interpreter
            return _Found("torchrun", tuple(rest[i + 1 :]), _pet_env(env))
        for module in _MODULES:
            if script.endswith(module.replace(".", "/") + ".py"):
                return _Found(module, tuple(rest[i + 1 :]), _pet_env(env))
    return None


def _find_in_shell(argv: list[str], env: dict[str, str | None], depth: int) -> _Found | None:
    """`sh -c SCRIPT [NAME [ARGS…]]`: follow SCRIPT with the (exported) environment it inherits."""
    if depth >= _MAX_DEPTH:
        return None
    i = 1
    if _base(argv[0]) == "busybox":
        if len(argv) < 2 or _base(argv[1]) not in _SHELLS - {"busybox"}:
            return None
        i = 2
    has_c = False
    while i < len(argv):
        a = argv[i]
        if _UNK in a:
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
            i += 1 + sum(a[1:].count(ch) for ch in "oO")  # -o/-O take the next argument
            continue
        break
    if not has_c or i >= len(argv):
        return None  # a script file or stdin: not visible to us
    script = argv[i]
    params = argv[i + 1 :]
    inner = _ShellState.from_env(env)
    inner.params = params[1:]
    inner.arg0 = params[0] if params else None
    return _run_script(script, inner, depth + 1)


def _skip_options(rest: list[str], with_value: frozenset[str] = frozenset()) -> list[str]:
    i = 0
    while i < len(rest) and rest[i].startswith("-") and rest[i] != "-":
        if rest[i] == "--":
            return rest[i + 1 :]
        i += 2 if rest[i] in with_value else 1
    return rest[i:]


def _wrap_env(rest: list[str], env: dict[str, str | None]) -> list[str]:
    i = 0
    while i < len(rest):
        a = rest[i]
        if a in ("-i", "--ignore-environment", "-"):
            env.clear()
        elif a in ("-u", "--unset"):
            env.pop(rest[i + 1] if i + 1 < len(rest) else "", None)
            i += 1
        elif a.startswith("--unset="):
            env.pop(a.split("=", 1)[1], None)
        elif a in ("-C", "--chdir", "-S", "--split-string"):
            i += 1
        elif a == "--":
            i += 1
            continue
        elif a.startswith("-") and len(a) > 1:
            pass
        elif "=" in a and _NAME.match(a.split("=", 1)[0]):
            name, value = a.split("=", 1)
            env[name] = None if _UNK in value else value
        else:
            break
        i += 1
    return rest[i:]


def _wrap_timeout(rest: list[str], env: dict[str, str | None]) -> list[str]:
    rest = _skip_options(rest, frozenset({"-s", "--signal", "-k", "--kill-after"}))
    return rest[1:]  # the duration


_WRAPPERS = {
    "exec": lambda rest, env: _skip_options(rest, frozenset({"-a"})),
    "env": _wrap_env,
    "nohup": lambda rest, env: rest,
    "command": lambda rest, env: _skip_options(rest),
    "builtin": lambda rest, env: rest,
    "time": lambda rest, env: _skip_options(rest),
    "nice": lambda rest, env: _skip_options(rest, frozenset({"-n", "--adjustment"})),
    "stdbuf": lambda rest, env: _skip_options(rest, frozenset({"-i", "-o", "-e"})),
    "setsid": lambda rest, env: _skip_options(rest),
    "timeout": _wrap_timeout,
}


# --------------------------------------------------------------------------------------------------
# A small POSIX shell: lexer + sequential walk over simple commands
# --------------------------------------------------------------------------------------------------

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=")
_KEYWORDS = frozenset({"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}"})
_SEPARATORS = frozenset({";", "&&", "||", "&", "|", "|&", ";;", "(", ")", "\n"})
_IFS = re.compile(r"[ \t\n]+")


_LITERAL_RUN = re.compile(r"[^ \t\r\n\\'\"`$<>;&|()]+")


class _ShellSyntaxError(Exception):
    pass


# A word is a list of parts: (kind, payload, quoted)
#   kind "lit": payload is text;  "var": payload is (name, op, default-text);  "unk": payload ignored;
#   "at": "$@" / "$*" (payload is "@" or "*").
_Part = tuple[str, object, bool]


@dataclass(slots=True)
class _Word:
    parts: list[_Part]

    def literal(self) -> str | None:
        """The text when the word is one unquoted literal (keywords, redirection targets)."""
        if len(self.parts) == 1 and self.parts[0][0] == "lit" and not self.parts[0][2]:
            return str(self.parts[0][1])
        return None

    def assignment(self) -> str | None:
        if self.parts and self.parts[0][0] == "lit" and not self.parts[0][2]:
            m = _ASSIGN.match(str(self.parts[0][1]))
            if m:
                return m.group(1)
        return None


_Token = tuple[str, object]  # ("word", _Word) | ("op", str) | ("redir", str)
_AddPart = Callable[[str, object, bool], None]


class _Lexer:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.tokens: list[_Token] = []
        self.heredocs: list[tuple[str, bool]] = []

    def error(self, msg: str) -> _ShellSyntaxError:
        return _ShellSyntaxError(f"{msg} at offset {self.i}")

    def run(self) -> list[_Token]:
        s = self.s
        parts: list[_Part] | None = None

        def add(kind: str, payload: object, quoted: bool) -> None:
            nonlocal parts
            if parts is None:
                parts = []
            if kind == "lit" and not quoted and parts and parts[-1][0] == "lit" and not parts[-1][2]:
                parts[-1] = ("lit", str(parts[-1][1]) + str(payload), False)
            else:
                parts.append((kind, payload, quoted))

        def end_word() -> None:
            nonlocal parts
            if parts is not None:
                self.tokens.append(("word", _Word(parts)))
                parts = None

        while self.i < len(s):
            c = s[self.i]
            if c in " \t\r":
                end_word()
                self.i += 1
            elif c == "\n":
                end_word()
                self.tokens.append(("op", "\n"))
                self.i += 1
                self._read_heredocs()
            elif c == "#" and parts is None:
                nl = s.find("\n", self.i)
                self.i = len(s) if nl < 0 else nl
            elif c == "\\":
                if self.i + 1 < len(s):
                    if s[self.i + 1] != "\n":
                        add("lit", s[self.i + 1], True)
                    self.i += 2
                else:
                    add("lit", "\\", True)
                    self.i += 1
            elif c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise self.error("unterminated single quote")
                add("lit", s[self.i + 1 : end], True)
                self.i = end + 1
            elif c == '"':
                self.i += 1
                add("lit", "", True)  # "" is a word of its own
                self._double_quoted(add)
            elif c == "`":
                self._backtick()
                add("unk", None, False)
            elif c == "$":
                self._dollar(add, quoted=False)
            elif c in "<>" or (c == "&" and s[self.i + 1 : self.i + 2] == ">"):
                if parts is not None and len(parts) == 1 and parts[0][0] == "lit" and not parts[0][2]:
                    parts = None if str(parts[0][1]).isdigit() else parts  # an io number: 2>&1
                end_word()
                self._redirection()
            elif c in ";&|()":
                end_word()
                op = c
                two = s[self.i : self.i + 2]
                if two in ("&&", "||", ";;", "|&"):
                    op = two
                self.tokens.append(("op", op))
                self.i += len(op)
            else:
                m = _LITERAL_RUN.match(s, self.i)
                assert m is not None
                add("lit", m.group(), False)
                self.i = m.end()
        end_word()
        return self.tokens

    def _redirection(self) -> None:
        s = self.s
        for op in ("<<<", "<<-", "&>>", "<<", ">>", "<&", ">&", "<>", ">|", "&>", "<", ">"):
            if s.startswith(op, self.i):
                self.i += len(op)
                break
        if op in ("<<", "<<-"):
            while self.i < len(s) and s[self.i] in " \t":
                self.i += 1
            j = self.i
            while j < len(s) and s[j] not in " \t\r\n;&|()<>":
                j += 1
            delim = s[self.i : j].replace("'", "").replace('"', "").replace("\\", "")
            self.heredocs.append((delim, op == "<<-"))
            self.i = j
            return  # the delimiter is consumed here, not a word
        self.tokens.append(("redir", op))

    def _read_heredocs(self) -> None:
        for delim, strip_tabs in self.heredocs:
            while self.i < len(self.s):
                nl = self.s.find("\n", self.i)
                line = self.s[self.i : len(self.s) if nl < 0 else nl]
                self.i = len(self.s) if nl < 0 else nl + 1
                if (line.lstrip("\t") if strip_tabs else line) == delim:
                    break
        self.heredocs = []

    def _double_quoted(self, add: _AddPart) -> None:
        s = self.s
        while True:
            if self.i >= len(s):
                raise self.error("unterminated double quote")
            c = s[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\" and self.i + 1 < len(s) and s[self.i + 1] in '$`"\\\n':
                if s[self.i + 1] != "\n":
                    add("lit", s[self.i + 1], True)
                self.i += 2
            elif c == "$":
                self._dollar(add, quoted=True)
            elif c == "`":
                self._backtick()
                add("unk", None, True)
            else:
                j = self.i + 1
                while j < len(s) and s[j] not in '"\\$`':
                    j += 1
                add("lit", s[self.i : j], True)
                self.i = j

    def _backtick(self) -> None:
        j = self.i + 1
        while j < len(self.s) and self.s[j] != "`":
            j += 2 if self.s[j] == "\\" else 1
        if j >= len(self.s):
            raise self.error("unterminated backquote")
        self.i = j + 1

    def _matching(self, start: int, open_: str, close: str) -> int:
        """Index of the `close` matching the `open_` just before `start`, skipping quotes."""
        depth, j, s = 1, start, self.s
        while j < len(s):
            c = s[j]
            if c == "\\":
                j += 2
                continue
            if c == "'":
                k = s.find("'", j + 1)
                if k < 0:
                    break
                j = k + 1
                continue
            if c == '"':
                j += 1
                while j < len(s) and s[j] != '"':
                    j += 2 if s[j] == "\\" else 1
                j += 1
                continue
            if c == open_:
                depth += 1
            elif c == close:
                depth -= 1
                if depth == 0:
                    return j
            j += 1
        raise self.error(f"unterminated {open_}")

    def _dollar(self, add: _AddPart, quoted: bool) -> None:
        s, i = self.s, self.i
        nxt = s[i + 1] if i + 1 < len(s) else ""
        if nxt == "(":
            self.i = self._matching(i + 2, "(", ")") + 1
            add("unk", None, quoted)
        elif nxt == "{":
            end = self._matching(i + 2, "{", "}")
            self.i = end + 1
            add(*_brace_expansion(s[i + 2 : end]), quoted)
        elif nxt == "'" and not quoted:
            self.i = i + 2
            add("lit", self._ansi_c(), True)
        elif nxt == '"' and not quoted:
            self.i = i + 2
            add("lit", "", True)
            self._double_quoted(add)
        elif nxt and (nxt.isalpha() or nxt == "_"):
            j = i + 1
            while j < len(s) and (s[j].isalnum() or s[j] == "_"):
                j += 1
            add("var", (s[i + 1 : j], "", ""), quoted)
            self.i = j
        elif nxt and nxt in "@*":
            add("at", nxt, quoted)
            self.i = i + 2
        elif nxt and (nxt.isdigit() or nxt in "#?$!-"):
            add("var", (nxt, "", ""), quoted)
            self.i = i + 2
        else:
            add("lit", "$", quoted)
            self.i = i + 1

    def _ansi_c(self) -> str:
        s, out = self.s, list[str]()
        simple = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "f": "\f", "v": "\v"}
        while True:
            if self.i >= len(s):
                raise self.error("unterminated $'")
            c = s[self.i]
            if c == "'":
                self.i += 1
                return "".join(out)
            if c == "\\" and self.i + 1 < len(s):
                e = s[self.i + 1]
                self.i += 2
                if e in simple:
                    out.append(simple[e])
                elif e == "x":
                    m = re.match(r"[0-9A-Fa-f]{1,2}", s[self.i :])
                    if m:
                        out.append(chr(int(m.group(), 16)))
                        self.i += m.end()
                    else:
                        out.append("\\x")
                else:
                    out.append(e if e in "\\'\"?" else "\\" + e)
            else:
                out.append(c)
                self.i += 1


def _brace_expansion(inner: str) -> tuple[str, object]:
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|\d+|[@*#?$!-])(?:(:?[-=+?])(.*))?", inner, re.S)
    if not m:
        return ("unk", None)
    name, op, default = m.group(1), m.group(2) or "", m.group(3) or ""
    if name in "@*" and not op:
        return ("at", name)
    return ("var", (name, op, default))


@dataclass(slots=True)
class _ShellState:
    vars: dict[str, str | None]  # None: set, but to something we cannot know
    exported: set[str]
    params: list[str] = field(default_factory=list)  # $1, $2, …
    arg0: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str | None]) -> _ShellState:
        return cls(vars=dict(env), exported=set(env))

    def exported_env(self) -> dict[str, str | None]:
        return {k: self.vars.get(k) for k in self.exported if k in self.vars}

    def lookup(self, name: str) -> tuple[bool, str | None]:
        """(known, value): value None when unset."""
        if name.isdigit():
            if name == "0":
                return (self.arg0 is not None and _UNK not in self.arg0, self.arg0)
            idx = int(name) - 1
            value = self.params[idx] if idx < len(self.params) else None
            return (value is None or _UNK not in value, value)
        if name == "#":
            return (True, str(len(self.params)))
        if not _NAME.match(name) or name not in self.vars:
            return (False, None)  # specials, or from the image / envFrom: unknown
        value = self.vars[name]
        return (value is not None and _UNK not in value, value)


def _default_text(text: str) -> str | None:
    """The text of a ${VAR:-default} word when it is a plain literal."""
    if re.search(r"[$`\\'\"]", text):
        return None
    return text


def _expand_var(payload: object, state: _ShellState) -> str | None:
    """The value of a parameter expansion, None when unknown."""
    name, op, default = cast(tuple[str, str, str], payload)
    known, value = state.lookup(name)
    if not known:
        return None
    if not op:
        return value or ""
    unset = value is None
    empty = unset or value == ""
    trigger = empty if op.startswith(":") else unset
    kind = op[-1]
    if kind in "-=":
        return _default_text(default) if trigger else value
    if kind == "+":
        return "" if trigger else _default_text(default)
    return value if not trigger else None  # ${VAR:?msg}: the shell would exit


def _expand_word(word: _Word, state: _ShellState, split: bool = True) -> list[str]:
    """Fields of a word after parameter expansion and field splitting (no globbing)."""
    others = [p for p in word.parts if p != ("at", "@", True)]
    if len(others) < len(word.parts) and all(p[0] == "lit" and p[1] == "" for p in others):
        return list(state.params)  # "$@": one field per parameter, none when there are none
    fields: list[str] = []
    cur: list[str] = []
    started = False

    def emit() -> None:
        nonlocal cur, started
        if started:
            fields.append("".join(cur))
        cur, started = [], False

    def append(text: str) -> None:
        nonlocal started
        cur.append(text)
        started = True

    for kind, payload, quoted in word.parts:
        if kind == "lit":
            append(str(payload))
            continue
        if kind == "unk":
            append(_UNK)
            continue
        value: str | None
        if kind == "at":
            if quoted and payload == "@":
                for k, param in enumerate(state.params):
                    if k:
                        emit()
                    append(param)
                continue
            value = " ".join(state.params)
        else:
            value = _expand_var(payload, state)
        if value is None:
            append(_UNK)  # unknown: taken as one field
        elif quoted or not split:
            append(value)
        else:
            for k, piece in enumerate(_IFS.split(value)):
                if k:
                    emit()
                if piece:
                    append(piece)
    emit()
    return fields


def _simple_commands(tokens: list[_Token]) -> Iterator[list[_Token]]:
    cur: list[_Token] = []
    for tok in tokens:
        if tok[0] == "op" and tok[1] in _SEPARATORS:
            if cur:
                yield cur
            cur = []
        else:
            cur.append(tok)
    if cur:
        yield cur


def _run_script(script: str, state: _ShellState, depth: int) -> _Found | None:
    try:
        if len(script) > _MAX_SCRIPT:
            raise _ShellSyntaxError(f"script longer than {_MAX_SCRIPT} characters")
        tokens = _Lexer(script).run()
    except _ShellSyntaxError:
        launcher = _mentions_launcher(script)
        if launcher:
            raise _Unfollowable(launcher) from None
        return None
    for cmd in _simple_commands(tokens):
        words: list[_Word] = []
        skip_next = False
        for kind, payload in cmd:
            if skip_next:
                skip_next = False
                continue
            if kind == "redir":
                skip_next = True
            elif kind == "word":
                assert isinstance(payload, _Word)
                words.append(payload)
        while words and words[0].literal() in _KEYWORDS:
            words.pop(0)
        assigns: list[tuple[str, str | None]] = []
        while words and words[0].assignment():
            name = words[0].assignment()
            assert name is not None
            value = _join_fields(_expand_word(words[0], state, split=False))
            assigns.append((name, value[len(name) + 1 :] if value is not None else None))
            words.pop(0)
        if not words:
            for name, value in assigns:
                state.vars[name] = value
            continue
        head = words[0].literal()
        if head in ("export", "readonly", "declare", "typeset", "local"):
            _declare(head, words[1:], state)
            continue
        if head == "unset":
            for w in words[1:]:
                lit = w.literal()
                if lit and not lit.startswith("-"):
                    state.vars.pop(lit, None)
                    state.exported.discard(lit)
            continue
        argv = [f for w in words for f in _expand_word(w, state)]
        if not argv:
            continue
        cmd_state = _ShellState(
            vars={**state.vars, **dict(assigns)},
            exported=state.exported | {n for n, _ in assigns},
            params=state.params,
            arg0=state.arg0,
        )
        if argv[0] == "eval":
            found = _run_script(" ".join(argv[1:]), cmd_state, depth + 1) if depth < _MAX_DEPTH else None
        else:
            found = _find_launch(argv, cmd_state, depth)
        if found is not None:
            return found
    return None


def _join_fields(fields: list[str]) -> str | None:
    text = " ".join(fields)
    return None if _UNK in text else text


def _declare(builtin: str, words: list[_Word], state: _ShellState) -> None:
    exporting = builtin == "export"
    for w in words:
        lit = w.literal()
        if lit is not None and lit.startswith("-"):
            exporting = exporting or "x" in lit
            continue
        name = w.assignment()
        if name:
            value = _join_fields(_expand_word(w, state, split=False))
            state.vars[name] = value[len(name) + 1 :] if value is not None else None
        elif lit and _NAME.match(lit):
            name = lit
            state.vars.setdefault(name, None)
        else:
            continue
        if exporting:
            state.exported.add(name)


_MENTION = re.compile(r"(?:^|[\s;&|(/])(torchrun|torch\.distributed\.(?:run|launch))(?=$|[\s;&|)'\"])")


def _mentions_launcher(text: str) -> str | None:
    m = _MENTION.search(text)
    return m.group(1) if m else None


# --------------------------------------------------------------------------------------------------
# torch's argparse, reproduced
# --------------------------------------------------------------------------------------------------


class _TorchExit(Exception):
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
        raise _TorchExit(f"ambiguous option: {word} could match {names}".replace(_UNK, "…"))
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
        raise _TorchExit(
            f"argument {'/'.join(opt.strings)}: invalid {opt.type} value: {value!r}", opt.dest
        ) from None
    if not from_env and opt.choices is not None and value not in opt.choices:
        raise _TorchExit(f"argument {'/'.join(opt.strings)}: invalid choice: {value!r}", opt.dest)


@dataclass(slots=True)
class _Values:
    values: dict[str, tuple[str | bool, str]] = field(default_factory=dict)  # dest -> (value, source)
    unknown: set[str] = field(default_factory=set)  # dests whose value we cannot know
    argv_unknown: bool = False


def _parse_argv(argv: Sequence[str], launcher: str, out: _Values) -> None:
    """torch's parser over argv; raises _TorchExit where torch exits."""
    options, prefixes = _OPTION_MAPS[launcher], _PREFIX_MAPS[launcher]
    classified: list[_Classified] = []
    for k, word in enumerate(argv):
        if word == "--":
            classified.append(("-", None, "", None))
            classified.extend(("A", None, "", None) for _ in argv[k + 1 :])
            break
        classified.append(_classify(word, options, prefixes))

    def store(opt: _Opt, value: str | bool) -> None:
        out.values[opt.dest] = (value, "flag")
        if isinstance(value, str):
            _convert(opt, value, from_env=False)
        if opt.exits:
            raise _TorchExit(f"{'/'.join(opt.strings)} prints and exits")
        if isinstance(value, str) and _UNK in value:
            out.unknown.add(opt.dest)
        else:
            out.unknown.discard(opt.dest)

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
                    store(opt, True)
                    if explicit[0] == _UNK:
                        out.argv_unknown = True
                        return
                    option_string = "-" + explicit[0]
                    explicit = explicit[1:] or None
                    if option_string not in options:
                        raise _TorchExit(f"argument {opt.strings[0]}: ignored explicit argument")
                    opt = options[option_string]
                    continue
                if opt.takes_value:
                    store(opt, explicit)
                    i += 1
                    break
                raise _TorchExit(f"argument {'/'.join(opt.strings)}: ignored explicit argument {explicit!r}")
            if not opt.takes_value:
                store(opt, True)
                i += 1
                break
            if i + 1 < len(argv) and classified[i + 1][0] in ("A", "U"):
                store(opt, argv[i + 1])
                i += 2
                break
            raise _TorchExit(f"argument {'/'.join(opt.strings)}: expected one argument")
    if not script:
        raise _TorchExit("the following arguments are required: training_script, training_script_args")
    if extras:
        raise _TorchExit(f"unrecognized arguments: {' '.join(extras)}")


def _apply_env(launcher: str, env: Mapping[str, str | None], out: _Values) -> None:
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
                raise _TorchExit(f"{name}={value!r} is not an integer", opt.dest) from None
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


def _evaluate(found: _Found) -> LaunchParse:
    out = _Values()
    error: str | None = None
    bad_field: str | None = None
    if found.argv is None:
        out.argv_unknown = True
    elif found.launcher != "env":
        try:
            _parse_argv(found.argv, found.launcher, out)
        except _TorchExit as e:
            error, bad_field = str(e), e.field
    try:
        _apply_env(found.launcher, found.env, out)
    except _TorchExit as e:
        if error is None:
            error, bad_field = str(e), e.field

    def raw(dest: str) -> tuple[str | None, str | None]:
        if dest not in out.values or dest in out.unknown:
            return None, (out.values[dest][1] if dest in out.values else None)
        value, source = out.values[dest]
        return str(value), source

    sources: dict[str, str] = {}
    unknown: set[str] = set(out.unknown)

    nnodes, src = raw("nnodes")
    if src:
        sources["nnodes"] = src
    nnodes_min = nnodes_max = None
    if nnodes is not None:
        try:
            nnodes_min, nnodes_max = _min_max(nnodes)
        except _TorchExit as e:
            error = error or str(e)
            bad_field = bad_field or "nnodes"

    nproc, src = raw("nproc_per_node")
    if src:
        sources["nproc_per_node"] = src
    nproc_int: int | None = None
    if nproc is not None:
        try:
            nproc_int = int(nproc)
        except ValueError:
            nproc_int = None

    standalone = False
    if "standalone" in out.values:
        sources["standalone"] = out.values["standalone"][1]
        standalone = bool(out.values["standalone"][0]) and "standalone" not in unknown

    backend, src = raw("rdzv_backend")
    if src:
        sources["rdzv_backend"] = src

    restarts_raw, src = raw("max_restarts")
    max_restarts: int | None = None
    if src:
        sources["max_restarts"] = src
    if restarts_raw is not None:
        try:
            max_restarts = int(restarts_raw)
        except ValueError:
            max_restarts = None
        if max_restarts is not None and max_restarts < 0:
            error = error or f"max_restarts must be >= 0, got {max_restarts}"
            bad_field = bad_field or "max_restarts"
            max_restarts = None

    if bad_field == "nnodes":
        nnodes_min = nnodes_max = None
    if bad_field in _FIELDS:
        unknown.add(bad_field)
    markers: list[str] = []
    if error is not None:
        markers.append(INVALID)
    if out.argv_unknown:
        markers.append(ARGV)
    markers.extend(f for f in _FIELDS if f in unknown)
    spec = TorchrunSpec(
        launcher=found.launcher,
        nnodes=nnodes,
        nnodes_min=nnodes_min,
        nnodes_max=nnodes_max,
        nproc_per_node=nproc,
        nproc_per_node_int=nproc_int,
        standalone=standalone,
        rdzv_backend=backend,
        max_restarts=max_restarts,
        sources=sources,
        unresolved=tuple(markers),
    )
    return LaunchParse(spec=spec, argv=found.argv, env=dict(found.env), error=error)


def _min_max(nnodes: str) -> tuple[int, int]:
    """torch's parse_min_max_nnodes plus the launch-time check 0 < min <= max."""
    parts = nnodes.split(":")
    try:
        if len(parts) == 1:
            lo = hi = int(parts[0])
        elif len(parts) == 2:
            lo, hi = int(parts[0]), int(parts[1])
        else:
            raise _TorchExit(f'nnodes={nnodes} is not in "MIN:MAX" format', "nnodes")
    except ValueError:
        raise _TorchExit(f"nnodes={nnodes!r} is not an integer or MIN:MAX", "nnodes") from None
    if not 0 < lo <= hi:
        raise _TorchExit(f"nnodes={nnodes}: min_nodes must be > 0 and <= max_nodes", "nnodes")
    return lo, hi

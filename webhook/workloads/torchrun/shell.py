"""A small POSIX shell: enough of `sh -c SCRIPT` to find the command that launches torch.

The lexer handles quotes, escapes, `\\` line continuations, comments, here-documents, `$'…'`,
`$(…)`/backquotes (unknown text), `${…}` and the operators `;` `&&` `||` `|` `&` and newlines. The
interpreter walks the simple commands in order (conditions are not evaluated), tracks
`NAME=value` / `export` / `unset`, expands `$VAR`, `${VAR}`, `${VAR:-default}`, `$1`, `"$@"` and
splits unquoted expansions into fields; each command's argv goes to the launcher finder.

Hand-written because no maintained Python library lexes *and* expands POSIX sh (shlex splits words
but knows no operators, here-documents or parameter expansion). Every step is linear: the lexer
moves forward only (a `$(…)` region is scanned once to find its end, then skipped), literal text
is collected in lists and joined once, and expansions are charged to the Meter.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import cast

from webhook.workloads.torchrun.environ import Environ
from webhook.workloads.torchrun.found import Found
from webhook.workloads.torchrun.limits import MAX_DEPTH, MAX_SCRIPT_BYTES, Meter, OverLimit, over
from webhook.workloads.torchrun.unknown import UNK

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=")
_KEYWORDS = frozenset({"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}"})
_SEPARATORS = frozenset({";", "&&", "||", "&", "|", "|&", ";;", "(", ")", "\n"})
_IFS = re.compile(r"[ \t\n]+")
_LITERAL_RUN = re.compile(r"[^ \t\r\n\\'\"`$<>;&|()]+")
_BLANKS = re.compile(r"[ \t\r]+")
_NAME_CHARS = re.compile(r"\w*")  # what str.isalnum() or "_" accepts, character for character
_QUOTED_RUN = re.compile(r'[^"\\$`]+')  # inside double quotes: text up to the next special character
_WORD_END = frozenset(" \t\r\n;&|()")  # what ends a plain word (not `<>`: `2>` is an io number)
_SPECIAL_START = frozenset(" \t\r\n#\\'\"`$<>;&|()")  # what a literal run does not start with
_HEX = re.compile(r"[0-9A-Fa-f]{1,2}")
_BRACE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|\d+|[@*#?$!-])(?:(:?[-=+?])(.*))?", re.S)
_SHELL_META = re.compile(r"[$`\\'\"]")
_REDIRECTIONS = ("<<<", "<<-", "&>>", "<<", ">>", "<&", ">&", "<>", ">|", "&>", "<", ">")
# A script without quotes, escapes, expansions, redirections or comments is words and operators
# only: one regex splits it, into the tokens the lexer's loop would make one character at a time.
_NOT_PLAIN = re.compile(r"[\\'\"`$<>#]")
_PLAIN_TOKENS = re.compile(r"[^ \t\r\n;&|()]+|&&|\|\||;;|\|&|[;&|()\n]")
_OPERATORS = frozenset({";", "&", "|", "(", ")", "\n", "&&", "||", ";;", "|&"})
_ANSI = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "f": "\f", "v": "\v"}

# Finds the launch in one command's argv (launcher.find_launch); passed in to keep the modules acyclic.
FindLaunch = Callable[[list[str], Environ, int, Meter], Found | None]


class ShellSyntaxError(Exception):
    pass


class Unfollowable(Exception):
    """A launch (or a script) we can see but not follow; launcher set when we know it is torch."""

    def __init__(self, launcher: str | None) -> None:
        super().__init__(launcher)
        self.launcher = launcher


_MENTION_BEFORE = frozenset(" \t\r\n;&|(/'\"\\")  # what may precede a launcher's name
_MENTION_AFTER = frozenset(" \t\r\n;&|)'\"\\")  # and follow it: a word of its own, however quoted
_MENTIONED = ("torchrun", "torch.distributed.run", "torch.distributed.launch")


def mentions_launcher(text: str) -> str | None:
    """The launcher a text names as a word of its own, if any (str.find jumps: one pass)."""
    i = text.find("torch")
    while i >= 0:
        if i == 0 or text[i - 1] in _MENTION_BEFORE:
            for name in _MENTIONED:
                end = i + len(name)
                if text.startswith(name, i) and (end == len(text) or text[end] in _MENTION_AFTER):
                    return name
        i = text.find("torch", i + 5)
    return None


# A word is a list of parts: (kind, payload, quoted)
#   kind "lit": payload is text;  "var": payload is (name, op, default-text);  "unk": payload ignored;
#   "at": "$@" / "$*" (payload is "@" or "*").
Part = tuple[str, object, bool]


@dataclass(slots=True)
class Word:
    parts: list[Part]

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


Token = tuple[str, object]  # ("word", Word) | ("op", str) | ("redir", str)


class _WordBuilder:
    """The parts of the word being lexed; adjacent unquoted literals are joined once, at the end."""

    __slots__ = ("parts", "_run")

    def __init__(self) -> None:
        self.parts: list[Part] = []
        self._run: list[str] = []  # unquoted literal text not yet in parts

    def add(self, kind: str, payload: object, quoted: bool) -> None:
        if kind == "lit" and not quoted:
            self._run.append(str(payload))
            return
        self._flush()
        self.parts.append((kind, payload, quoted))

    def _flush(self) -> None:
        if self._run:
            self.parts.append(("lit", "".join(self._run), False))
            self._run = []

    def word(self) -> Word:
        self._flush()
        return Word(self.parts)

    def io_number(self) -> bool:
        """Only digits so far (`2` in `2>&1`): a file descriptor, not a word."""
        return not self.parts and "".join(self._run).isdigit()


AddPart = Callable[[str, object, bool], None]


class Lexer:
    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.tokens: list[Token] = []
        self.heredocs: list[tuple[str, bool]] = []

    def error(self, msg: str) -> ShellSyntaxError:
        return ShellSyntaxError(f"{msg} at offset {self.i}")

    def run(self) -> list[Token]:
        if _NOT_PLAIN.search(self.s) is None:
            return self.plain()
        return self.scan()

    def plain(self) -> list[Token]:
        """The tokens of a plain script (no character of _NOT_PLAIN): what scan() makes of it."""
        self.tokens = [
            ("op", t) if t in _OPERATORS else ("word", Word([("lit", t, False)]))
            for t in _PLAIN_TOKENS.findall(self.s)
        ]
        self.i = len(self.s)
        return self.tokens

    def scan(self) -> list[Token]:
        """The tokens of any script, one character (or literal run) at a time."""
        s = self.s
        builder: _WordBuilder | None = None

        def add(kind: str, payload: object, quoted: bool) -> None:
            nonlocal builder
            if builder is None:
                builder = _WordBuilder()
            builder.add(kind, payload, quoted)

        def end_word() -> None:
            nonlocal builder
            if builder is not None:
                self.tokens.append(("word", builder.word()))
                builder = None

        n = len(s)
        while self.i < n:
            c = s[self.i]
            if c not in _SPECIAL_START:  # literal text, the most common start: tested first
                m = _LITERAL_RUN.match(s, self.i)
                assert m is not None
                end = m.end()
                if builder is None and (end == n or s[end] in _WORD_END):
                    # A plain word, the common case: one token, no builder.
                    self.tokens.append(("word", Word([("lit", m.group(), False)])))
                else:
                    add("lit", m.group(), False)
                self.i = end
            elif c in " \t\r":
                end_word()
                self.i += 1
                if self.i < n and s[self.i] in " \t\r":  # a run of blanks (indentation): at once
                    blanks = _BLANKS.match(s, self.i)
                    if blanks is not None:
                        self.i = blanks.end()
            elif c == "\n":
                end_word()
                self.tokens.append(("op", "\n"))
                self.i += 1
                if self.heredocs:
                    self._read_heredocs()
            elif c == "#" and builder is None:
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
                if builder is not None and builder.io_number():
                    builder = None  # an io number: 2>&1
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
            else:  # "#" inside a word: literal text
                m = _LITERAL_RUN.match(s, self.i)
                assert m is not None
                add("lit", m.group(), False)
                self.i = m.end()
        end_word()
        return self.tokens

    def _redirection(self) -> None:
        s = self.s
        op = ""
        for op in _REDIRECTIONS:
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

    def _double_quoted(self, add: AddPart) -> None:
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
                # The first character is text whatever it is (a backslash before an ordinary one).
                text = _QUOTED_RUN.match(s, self.i + 1)
                j = text.end() if text is not None else self.i + 1
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

    def _dollar(self, add: AddPart, quoted: bool) -> None:
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
            name = _NAME_CHARS.match(s, i + 1)
            j = name.end() if name is not None else i + 1
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
                if e in _ANSI:
                    out.append(_ANSI[e])
                elif e == "x":
                    m = _HEX.match(s, self.i)  # at the position: never a copy of the rest
                    if m:
                        out.append(chr(int(m.group(), 16)))
                        self.i = m.end()
                    else:
                        out.append("\\x")
                else:
                    out.append(e if e in "\\'\"?" else "\\" + e)
            else:
                out.append(c)
                self.i += 1


def _brace_expansion(inner: str) -> tuple[str, object]:
    m = _BRACE.fullmatch(inner)
    if not m:
        return ("unk", None)
    name, op, default = m.group(1), m.group(2) or "", m.group(3) or ""
    if name in "@*" and not op:
        return ("at", name)
    return ("var", (name, op, default))


@dataclass(slots=True)
class ShellState:
    vars: dict[str, str | None]  # None: set, but to something we cannot know
    exported: set[str]
    params: list[str] = field(default_factory=list)  # $1, $2, …
    arg0: str | None = None
    params_size: int = 0  # characters in params: what one "$@" writes

    def set_params(self, params: list[str], arg0: str | None) -> None:
        self.params, self.arg0 = params, arg0
        self.params_size = sum(len(p) for p in params)

    @classmethod
    def inheriting(cls, env: Environ, meter: Meter) -> ShellState:
        """A new shell: every variable it inherits is exported. Bounded by limits.MAX_NESTED."""
        meter.nest()
        variables = env.materialize(meter)
        return cls(vars=variables, exported=set(variables))

    def environ(self, prefix: Mapping[str, str | None] | None = None) -> Environ:
        """The environment of a command this shell starts, with `NAME=value` prefixes applied."""
        env = Environ(self.vars, self.exported)
        for name, value in (prefix or {}).items():
            env.set(name, value)
        return env

    def lookup(self, name: str) -> tuple[bool, str | None]:
        """(known, value): value None when unset."""
        if name.isdigit():
            if name == "0":
                return (self.arg0 is not None and UNK not in self.arg0, self.arg0)
            idx = int(name) - 1
            value = self.params[idx] if idx < len(self.params) else None
            return (value is None or UNK not in value, value)
        if name == "#":
            return (True, str(len(self.params)))
        if name not in self.vars or not NAME.fullmatch(name):
            return (False, None)  # specials, or from the image / envFrom: unknown
        value = self.vars[name]
        return (value is not None and UNK not in value, value)


def _default_text(text: str) -> str | None:
    """The text of a ${VAR:-default} word when it is a plain literal."""
    if _SHELL_META.search(text):
        return None
    return text


def _expand_var(payload: object, state: ShellState) -> str | None:
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


def expand_word(word: Word, state: ShellState, meter: Meter, split: bool = True) -> list[str]:
    """Fields of a word after parameter expansion and field splitting (no globbing)."""
    meter.charge(len(word.parts))
    if len(word.parts) == 1 and word.parts[0][0] == "lit":
        return [str(word.parts[0][1])]  # literal text is one field, quoted or not
    if ("at", "@", True) in word.parts:
        others = [p for p in word.parts if p != ("at", "@", True)]
        if all(p[0] == "lit" and p[1] == "" for p in others):
            meter.charge(len(state.params) + state.params_size)
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
            append(UNK)
            continue
        value: str | None
        if kind == "at":
            meter.charge(len(state.params) + state.params_size)
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
            append(UNK)  # unknown: taken as one field
            continue
        meter.charge(len(value))  # an expansion writes its value: `$X $X …` is paid per copy
        if quoted or not split:
            append(value)
        else:
            for k, piece in enumerate(_IFS.split(value)):
                if k:
                    emit()
                if piece:
                    append(piece)
    emit()
    return fields


def _simple_commands(tokens: list[Token]) -> Iterator[tuple[int, list[Word]]]:
    """Each simple command: its number of tokens and its words (a redirection and its target dropped)."""
    words: list[Word] = []
    count, skip = 0, False
    for kind, payload in tokens:
        if kind == "op" and payload in _SEPARATORS:
            if count:
                yield count, words
            words, count, skip = [], 0, False
            continue
        count += 1
        if skip:
            skip = False
        elif kind == "redir":
            skip = True
        elif kind == "word":
            words.append(cast(Word, payload))
    if count:
        yield count, words


def _charge_ones(meter: Meter, units: int) -> None:
    """`units` charges of 1, as if made one by one: at once when they fit, else one at a time (so
    that the meter stops at the same count)."""
    if meter.work + units <= meter.budget:
        meter.charge(units)
    else:
        for _ in range(units):
            meter.charge(1)


def _argv(words: list[Word], state: ShellState, meter: Meter) -> list[str]:
    """The fields of the words, in order: expand_word of each (a plain literal word, the common
    case, read here without the call; its charge of 1 is made with its neighbours')."""
    argv: list[str] = []
    pending = 0
    for w in words:
        parts = w.parts
        if len(parts) == 1 and parts[0][0] == "lit":
            argv.append(cast(str, parts[0][1]))
            pending += 1
            continue
        if pending:
            _charge_ones(meter, pending)
            pending = 0
        argv.extend(expand_word(w, state, meter))
    if pending:
        _charge_ones(meter, pending)
    return argv


def lex(script: str, meter: Meter) -> list[Token]:
    """The script's tokens; OverLimit past MAX_SCRIPT_BYTES, ShellSyntaxError when it does not lex."""
    if len(script) > MAX_SCRIPT_BYTES:
        raise OverLimit(over("a shell script", len(script), MAX_SCRIPT_BYTES, "bytes"))
    # Each character is read by the lexer once, plus once more inside a `$(…)`/`${…}` region.
    meter.charge(2 * len(script))
    return Lexer(script).run()


def run_script(
    script: str,
    state: ShellState,
    depth: int,
    meter: Meter,
    find: FindLaunch,
    starts: Callable[[str], bool] | None = None,
) -> Found | None:
    """The first command of the script that launches torch (via `find`), or None.

    `starts`, when given, tells from a command's first word whether `find` could find anything
    there: when it says no, the command is passed by with the one step `find` would charge.
    """
    if depth > MAX_DEPTH:
        raise OverLimit(f"it nests shells more than {MAX_DEPTH} deep")
    try:
        tokens = lex(script, meter)
    except ShellSyntaxError:
        launcher = mentions_launcher(script)
        if launcher:
            raise Unfollowable(launcher) from None
        return None
    for count, words in _simple_commands(tokens):
        meter.charge(count)
        i = 0
        while i < len(words) and words[i].literal() in _KEYWORDS:
            i += 1
        assigns: dict[str, str | None] = {}
        while i < len(words):
            name = words[i].assignment()
            if name is None:
                break
            value = _join_fields(expand_word(words[i], state, meter, split=False))
            assigns[name] = value[len(name) + 1 :] if value is not None else None
            i += 1
        if i == len(words):
            state.vars.update(assigns)
            continue
        rest = words[i:]
        head = rest[0].literal()
        if head in ("export", "readonly", "declare", "typeset", "local"):
            _declare(head, rest[1:], state, meter)
            continue
        if head == "unset":
            for w in rest[1:]:
                lit = w.literal()
                if lit and not lit.startswith("-"):
                    state.vars.pop(lit, None)
                    state.exported.discard(lit)
            continue
        argv = _argv(rest, state, meter)
        if not argv:
            continue
        if argv[0] == "eval":
            found = _eval(" ".join(argv[1:]), state, assigns, depth, meter, find, starts)
        elif starts is not None and not starts(argv[0]):
            meter.charge(1)  # what `find` charges to look at a command that starts nothing
            continue
        else:
            found = find(argv, state.environ(assigns), depth, meter)
        if found is not None:
            return found
    return None


def _eval(
    script: str,
    state: ShellState,
    assigns: dict[str, str | None],
    depth: int,
    meter: Meter,
    find: FindLaunch,
    starts: Callable[[str], bool] | None,
) -> Found | None:
    """`eval`: the joined words run as a script in (a copy of) this shell, prefixes applied."""
    meter.nest()
    meter.charge(len(state.vars))
    inner = ShellState(
        vars={**state.vars, **assigns},
        exported=state.exported | set(assigns),
        params=state.params,
        arg0=state.arg0,
        params_size=state.params_size,
    )
    return run_script(script, inner, depth + 1, meter, find, starts)


def _join_fields(fields: list[str]) -> str | None:
    text = " ".join(fields)
    return None if UNK in text else text


def _declare(builtin: str, words: list[Word], state: ShellState, meter: Meter) -> None:
    exporting = builtin == "export"
    for w in words:
        lit = w.literal()
        if lit is not None and lit.startswith("-"):
            exporting = exporting or "x" in lit
            continue
        name = w.assignment()
        if name:
            value = _join_fields(expand_word(w, state, meter, split=False))
            state.vars[name] = value[len(name) + 1 :] if value is not None else None
        elif lit and NAME.fullmatch(lit):
            name = lit
            state.vars.setdefault(name, None)
        else:
            continue
        if exporting:
            state.exported.add(name)

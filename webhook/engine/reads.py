"""Which parts of each CEL variable the loaded policies read, found from their compiled sources.

Converting a Python value into a CEL runtime's form costs about a microsecond per node, on every
request, and most of `workload` and all of `object` go unread by the shipped policies. The engine
hands CEL only the paths some expression names: `workload.gang.queueName` keeps `gang` whole
(a chain keeps the whole value it ends on); a variable used bare (`object == oldObject`,
`object[k]`, `workload.?x`) keeps everything. String literals and comments are not reads.

A list is trimmed element by element where it is only iterated: in
`workload.groups.filter(g, g.patchable).map(g, g.containers.map(c, c.pointer))` each group keeps
`patchable` and `containers`, each container `pointer`. The macro's variable is followed through
the macro's own parentheses (an inner macro that binds the same name hides it); a filter's result
is followed into the macro after it, a literal index (`[0]`) and a policy variable that holds such
a result (`shortGrace: workload.groups.filter(...)`, optionally behind `cond ? [] :`) read the
element too. Anything else that uses an element or the list itself (a bare use, `in`, `==`, an
index that is not a number, another method) keeps it whole. A map that is iterated or sized
(its keys are the elements) is kept whole.

Reading the source rather than the checked AST: both runtimes give us an expression, neither
exposes its AST in a stable form, and this over-approximates safely (a name that looks read is
kept; nothing a policy reads is ever dropped).

What it accepts: any source that compiled (policy_reads runs after compile.py). What it refuses
to follow, it keeps whole, never drops: a chain that ends in anything but a field step, a
literal index or a macro it knows (another method, an index that is not a literal, `.?x`), a
bracket it cannot match, a variable used bare. Such a refusal costs conversion work on every
request, never a wrong decision.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# A path tree: {} keeps the whole value; {"gang": {}, "groups": {}} keeps those keys, whole.
# ELEMENT holds what is read of each element of a list ({"groups": {"*": {"name": {}}}}), and
# {"": {}} is a partial value of which no key is read (the elements of a list that is only sized).
Tree = dict[str, "Tree"]
ELEMENT = "*"
_PARTIAL = ""  # while building: a node holding this key is partial; without it, whole

_LITERALS = re.compile(
    r"""//[^\n]*"""  # a comment
    r"""|[rRbB]{0,2}(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")""",
    re.DOTALL,
)
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# a name that is not a field step (`.name`) nor the tail of a word or number
_NAME = re.compile(rf"(?<![\w.])({_IDENT})\b")
_STEP = re.compile(rf"\s*\.\s*({_IDENT})\b(\s*\()?")
_MACRO_VARIABLE = re.compile(rf"\s*({_IDENT})\s*,")
_SPACE = re.compile(r"\s*")
# m["key"] reads the same as m.key (`workload["class"]`: `class` is a reserved word in CEL)
_INDEX = re.compile(rf"""\[\s*(['"])({_IDENT})\1\s*\]""")
_MACROS = frozenset(("all", "exists", "exists_one", "map", "filter"))
_CLOSING = {"(": ")", "[": "]", "{": "}"}


# A literal kept by its number in the stripped text (_strip): `"3"` is the fourth literal. Digits
# only, so that no name is read in it and no literal index (`[0]`) is taken for it.
_KEPT = re.compile(r'"([0-9]+)"')
# `LITERAL in` where nothing before the literal binds tighter than `in` (so the literal alone is
# the key tested): the start of the scanned text, an opening bracket, a comma, `?`, `:`, `&&`, `||`
_KEY_IN = re.compile(r'(?:^|[(\[{,?:]|&&|\|\|)\s*"([0-9]+)"\s*in\s+$')
# What may follow a chain so that it is the whole right operand of `in`: the end, a closing
# bracket, a comma, `?`, `:`, `&&`, `||`, `==`, `!=` (anything binding tighter would take part)
_AFTER_OPERAND = re.compile(r"\s*(?:$|[)\]},?:]|&&|\|\||==|!=)")


def _strip(source: str) -> tuple[str, list[str]]:
    """`source` with every literal and comment replaced (literals are not reads), and the values
    of the plain string literals that may be a map's key (`"k" in m`, `m["k"]`): those become
    `"N"`, N their index in the list; the others `""`."""
    keys: list[str] = []

    def replace(found: re.Match[str]) -> str:
        text = found.group(0)
        value = text[1:-1]
        if (
            text[0] in "'\""
            and len(text) > 2
            and text[1] != text[0]  # an empty literal, or one of triple quotes
            and "\\" not in value
            and value != ELEMENT
        ):
            keys.append(value)
            return f'"{len(keys) - 1}"'
        return '""'

    return _LITERALS.sub(replace, _INDEX.sub(r".\2", source)), keys


@dataclass(frozen=True, slots=True)
class PolicySources:
    """One policy's CEL: its variables in order (name, source), and every other expression."""

    variables: Sequence[tuple[str, str]]
    expressions: Sequence[str]


def reads(sources: Iterable[str], variables: Iterable[str]) -> dict[str, Tree]:
    """The path tree of each of `variables` that some source reads; unread ones are absent."""
    return policy_reads([PolicySources((), list(sources))], variables)


def policy_reads(policies: Iterable[PolicySources], variables: Iterable[str]) -> dict[str, Tree]:
    """As reads(), with each policy's `variables.NAME` followed where it holds list elements."""
    roots: dict[str, Tree] = {}
    wanted = tuple(variables)
    for policy in policies:
        scope: dict[str, Tree] = {name: roots.setdefault(name, {_PARTIAL: {}}) for name in wanted}
        reader = _Reader(scope)
        for name, source in policy.variables:
            text, reader.keys = _strip(source)
            reader.define(name, text)
        for source in policy.expressions:
            text, reader.keys = _strip(source)
            reader.scan(text, 0, len(text), scope)
    return {name: _finish(tree) for name, tree in roots.items() if len(tree) != 1 or _PARTIAL not in tree}


class _Reader:
    """Scans stripped sources, adding what they read to the trees of `scope`."""

    def __init__(self, scope: dict[str, Tree]) -> None:
        self.scope = scope
        # policy variables whose value is the elements (or a value) of a tree node
        self.aliases: dict[str, Tree] = {}
        self.keys: list[str] = []  # the string literals of the text being read (_strip)

    def define(self, name: str, text: str) -> None:
        """Scan a policy variable's source; remember it as an alias when it holds a node's value."""
        start, end = 0, len(text)
        split = _ternary(text)
        if split is not None:
            condition_end, then_start, then_end, else_start = split
            if text[then_start:then_end].strip() == "[]":
                self.scan(text, 0, condition_end, self.scope)
                start = else_start
            elif text[else_start:].strip() == "[]":
                self.scan(text, 0, condition_end, self.scope)
                start, end = then_start, then_end
        found = _NAME.match(text, _SPACE.match(text, start).end())  # type: ignore[union-attr]
        if found is not None:
            node = self._root(text, found, end)
            if node is not None:
                pos, value = self._postfix(text, node[1], end, node[0], self.scope)
                if value is not None and not text[pos:end].strip():
                    self.aliases[name] = value
                    return
                if value is not None:
                    _whole(value)
                self.scan(text, pos, end, self.scope)
                return
        self.scan(text, start, end, self.scope)

    def _root(self, text: str, found: re.Match[str], end: int) -> tuple[Tree, int] | None:
        """The node a name at `found` starts a chain on, and where the chain goes on; None when
        the name is not followed."""
        name = found.group(1)
        if name in self.scope:
            return self.scope[name], found.end()
        if name == "variables" and self.aliases:
            step = _STEP.match(text, found.end(), end)
            if step is not None and not step.group(2):
                alias = self.aliases.get(step.group(1))
                return None if alias is None else (alias, step.end())
            for node in self.aliases.values():  # `variables` used whole: so is what it holds
                _whole(node)
        return None

    def scan(self, text: str, start: int, end: int, scope: dict[str, Tree]) -> None:
        pos = start
        while True:
            found = _NAME.search(text, pos, end)
            if found is None:
                return
            name = found.group(1)
            if name in scope:
                pos, value = self._postfix(text, found.end(), end, scope[name], scope)
            else:
                root = self._root(text, found, end) if name == "variables" else None
                if root is None:
                    pos = found.end()
                    continue
                pos, value = self._postfix(text, root[1], end, root[0], scope)
            if value is None:
                continue
            key = self._key_in(text, start, found.start(), pos, end)
            if key is not None:  # `"k" in m`: of a map, only the key k is read
                _whole(_child(value, key))
            else:  # the chain ends on a value that is used as it is
                _whole(value)

    def _key_in(self, text: str, start: int, chain: int, after: int, end: int) -> str | None:
        """The key a `"k" in` before the chain starting at `chain` (and ending at `after`)
        tests, None unless the chain is the whole right operand of `in` and the literal alone its
        left one."""
        # from the character before the scanned text: the bracket or comma that opens it
        before = _KEY_IN.search(text, max(start - 1, 0), chain)
        if before is None or _AFTER_OPERAND.match(text, after, end) is None:
            return None
        return self.keys[int(before.group(1))]

    def _postfix(
        self, text: str, pos: int, end: int, node: Tree, scope: dict[str, Tree]
    ) -> tuple[int, Tree | None]:
        """Follow field steps, literal indexes and macros from `pos`; return where the chain ends
        and the node of the value it ends on (None when a method or macro consumed it)."""
        while True:
            step = _STEP.match(text, pos, end)
            if step is not None and not step.group(2):  # a field
                node, pos = _child(node, step.group(1)), step.end()
                continue
            if step is not None:  # a method: step ends after its "("
                method, arguments = step.group(1), step.end()
                close = _closing(text, arguments - 1, end)
                if close is not None and method == "size" and not text[arguments:close].strip():
                    _child(node, ELEMENT)  # a list's length reads no element; a map's is whole
                    return close + 1, None
                variable = _MACRO_VARIABLE.match(text, arguments, end)
                if (
                    close is not None
                    and method in _MACROS
                    and variable is not None
                    # two variables (index and element) would bind the element to the second
                    and _MACRO_VARIABLE.match(text, variable.end(), end) is None
                ):
                    inner = {**scope, variable.group(1): _child(node, ELEMENT)}
                    self.scan(text, variable.end(), close, inner)
                    pos = close + 1
                    if method == "filter":  # the same elements, fewer of them
                        continue
                    return pos, None
                _whole(node)  # another method: it may read anything of the value
                return step.end(1), None
            bracket = _SPACE.match(text, pos, end).end()  # type: ignore[union-attr]
            if bracket < end and text[bracket] == "[":
                close = _closing(text, bracket, end)
                if close is not None and text[bracket + 1 : close].strip().isdigit():
                    node, pos = _child(node, ELEMENT), close + 1
                    continue
                literal = _KEPT.fullmatch(text[bracket + 1 : close].strip()) if close is not None else None
                if close is not None and literal is not None:  # m["k"] reads the key k, as m.k does
                    node, pos = _child(node, self.keys[int(literal.group(1))]), close + 1
                    continue
                _whole(node)
                if close is None:
                    return bracket, None
                self.scan(text, bracket + 1, close, scope)
                return close + 1, None
            return pos, node  # anything else (`.?x` too): the value is used as it is


def _child(node: Tree, key: str) -> Tree:
    if _PARTIAL not in node:
        return node  # read whole already: so is everything below
    child = node.get(key)
    if child is None:
        child = node[key] = {_PARTIAL: {}}
    return child


def _whole(node: Tree) -> None:
    node.clear()


def _closing(text: str, opening: int, end: int) -> int | None:
    """The index of the bracket closing the one at `opening` (literals are stripped already)."""
    stack = []
    for i in range(opening, end):
        c = text[i]
        if c in _CLOSING:
            stack.append(_CLOSING[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                return None
            if not stack:
                return i
    return None


def _ternary(text: str) -> tuple[int, int, int, int] | None:
    """(end of the condition, start and end of the `then` branch, start of the `else` branch) of
    a source that is one conditional at the top level; None otherwise."""
    depth = 0
    question = None
    pending = 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and c == "?" and text[i - 1 : i] not in (".", "["):
            if question is None:
                question = i
            else:
                pending += 1
        elif depth == 0 and c == ":" and question is not None:
            if pending:
                pending -= 1
            else:
                return question, question + 1, i, i + 1
    return None


def _finish(tree: Tree) -> Tree:
    """Drop the partial markers: {} is whole, {"": {}} has no key read, any other map lists the
    keys read."""
    if _PARTIAL not in tree:
        return {}
    if len(tree) == 1:
        return {"": {}}
    return {k: _finish(v) for k, v in tree.items() if k != _PARTIAL}


def trim(value: Any, tree: Mapping[str, Any]) -> Any:
    """`value` with only the paths in `tree` (a new map or list where anything is left out)."""
    if not tree:
        return value
    if isinstance(value, Mapping):
        if ELEMENT in tree:  # iterated or sized: its keys are what is read
            return value
        return {k: trim(value[k], sub) if sub else value[k] for k, sub in tree.items() if k in value}
    if isinstance(value, list | tuple):
        element = tree.get(ELEMENT)
        if element is None:
            return value
        return [trim(v, element) for v in value]
    return value

"""Which parts of each CEL variable the loaded policies read, found from their compiled sources.

Converting a Python value into a CEL runtime's form costs about a microsecond per node, on every
request, and most of `workload` and all of `object` go unread by the shipped policies. The engine
hands CEL only the paths some expression names: `workload.gang.queueName` keeps `gang` whole
(a chain keeps the whole value it ends on); a variable used bare (`object == oldObject`,
`object[k]`, `workload.?x`) keeps everything. String literals and comments are not reads.

Reading the source rather than the checked AST: both runtimes give us an expression, neither
exposes its AST in a stable form, and this over-approximates safely (a name that looks read is
kept; nothing a policy reads is ever dropped).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# A path tree: {} keeps the whole value; {"gang": {}, "groups": {}} keeps those keys, whole.
Tree = dict[str, "Tree"]

_LITERALS = re.compile(
    r"""//[^\n]*"""  # a comment
    r"""|[rRbB]{0,2}(?:'''(?:\\.|[^\\])*?'''|\"\"\"(?:\\.|[^\\])*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")""",
    re.DOTALL,
)
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# a name, then .field steps; a step followed by "(" is a method call, not a field
_CHAIN = re.compile(rf"(?<![\w.])({_IDENT})\b((?:\s*\.\s*{_IDENT}\b(?!\s*\())*)")
_STEP = re.compile(rf"\.\s*({_IDENT})")
# m["key"] reads the same as m.key (`workload["class"]`: `class` is a reserved word in CEL)
_INDEX = re.compile(rf"""\[\s*(['"])({_IDENT})\1\s*\]""")


def strip_literals(source: str) -> str:
    return _LITERALS.sub('""', _INDEX.sub(r".\2", source))


def reads(sources: Iterable[str], variables: Iterable[str]) -> dict[str, Tree]:
    """The path tree of each of `variables` that some source reads; unread ones are absent."""
    wanted = set(variables)
    out: dict[str, Tree] = {}
    whole: set[str] = set()
    for source in sources:
        for match in _CHAIN.finditer(strip_literals(source)):
            name = match.group(1)
            if name not in wanted or name in whole:
                continue
            steps = _STEP.findall(match.group(2))
            if not steps:  # used bare: every part of it may be read
                whole.add(name)
                out[name] = {}
                continue
            _add(out.setdefault(name, {"": {}}), steps)
    return {name: _finish(tree) for name, tree in out.items()}


def _add(tree: Tree, steps: list[str]) -> None:
    # A node holding "" is partial (only its other keys are read); a node without "" is whole.
    node = tree
    for step in steps:
        if "" not in node:
            return  # an ancestor is read whole already
        child = node.get(step)
        if child is None:
            child = node[step] = {"": {}}
        node = child
    node.clear()  # the chain ends here: the whole value is read


def _finish(tree: Tree) -> Tree:
    """Drop the partial markers: {} is whole, any other map lists the keys read."""
    if "" not in tree:
        return {}
    return {k: _finish(v) for k, v in tree.items() if k != ""}


def trim(value: Any, tree: Tree) -> Any:
    """`value` with only the paths in `tree` (a new map where anything is left out)."""
    if not tree or not isinstance(value, Mapping):
        return value
    return {k: trim(value[k], sub) if sub else value[k] for k, sub in tree.items() if k in value}

"""Dotted field paths, as policies and adapters write them, <-> JSON pointers and manifest lines.

Policies and adapters name fields the way a user reads a manifest:
`spec.tasks[0].template.spec.x`, `metadata.annotations[trainguard.dev/checkpoint-uri]`,
`metadata.annotations['kueue.x-k8s.io/pod-group-total-count']`, and for a field of another object
`ClusterTrainingRuntime/torch:spec.podGroupPolicy`. Reports need the JSON pointer (to find the
line) and one consistent rendering.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_OBJECT_PREFIX = re.compile(r"^([A-Z][A-Za-z0-9]*/[^:\s]+):(.*)$")


@dataclass(frozen=True, slots=True)
class Token:
    text: str
    bracketed: bool  # written as [key]: one token even when it holds dots


@dataclass(frozen=True, slots=True)
class FieldPath:
    tokens: tuple[Token, ...]
    object: str | None = None  # "Kind/name" when the field belongs to another object


def parse(field: str) -> FieldPath:
    """`spec.a[0].b['x.y/z']` -> tokens spec, a, 0, b, x.y/z (brackets and quotes removed)."""
    obj = None
    m = _OBJECT_PREFIX.match(field)
    if m:
        obj, field = m.group(1), m.group(2)
    tokens: list[Token] = []
    current = ""
    i, n = 0, len(field)
    while i < n:
        ch = field[i]
        if ch == ".":
            if current:
                tokens.append(Token(current, False))
            current = ""
        elif ch == "[":
            if current:
                tokens.append(Token(current, False))
            current = ""
            end = field.find("]", i)
            end = n if end < 0 else end
            inner = field[i + 1 : end].strip()
            if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
                inner = inner[1:-1]
            tokens.append(Token(inner, True))
            i = end
        else:
            current += ch
        i += 1
    if current:
        tokens.append(Token(current, False))
    return FieldPath(tuple(tokens), obj)


def render(path: FieldPath) -> str:
    """One spelling for every report: keys with dots or slashes in brackets, no quotes."""
    out = ""
    for t in path.tokens:
        if t.text.isdigit() or "." in t.text or "/" in t.text or not t.text:
            out += f"[{t.text}]"
        else:
            out += ("." if out else "") + t.text
    return f"{path.object}:{out}" if path.object else out


def normalise(field: str) -> str:
    return render(parse(field))


def escape(token: str) -> str:
    """One JSON-pointer reference token (RFC 6901); the one home of the escaping."""
    if "~" in token or "/" in token:
        return token.replace("~", "~0").replace("/", "~1")
    return token


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~") if "~" in token else token


def pointer(path: FieldPath, data: Any = None) -> str:
    """The JSON pointer of `path`, reading `data` to rejoin unbracketed keys that hold dots.

    `metadata.labels.kueue.x-k8s.io/queue-name` means the key `kueue.x-k8s.io/queue-name` when the
    object has it; where the object has nothing, each dotted part is one step.
    """
    out: list[str] = []
    node = data
    tokens = path.tokens
    i = 0
    while i < len(tokens):
        step, used = _step(tokens, i, node)
        out.append(step)
        i += used
        node = _child(node, step)
    return "".join("/" + escape(t) for t in out)


def _step(tokens: tuple[Token, ...], i: int, node: Any) -> tuple[str, int]:
    t = tokens[i]
    if t.bracketed or not isinstance(node, dict):
        return t.text, 1
    # Longest run of unbracketed tokens that names a key of this mapping.
    j = i + 1
    while j < len(tokens) and not tokens[j].bracketed:
        j += 1
    for end in range(j, i, -1):
        key = ".".join(tok.text for tok in tokens[i:end])
        if key in node:
            return key, end - i
    return t.text, 1


def _child(node: Any, token: str) -> Any:
    if isinstance(node, dict):
        return node.get(token)
    if isinstance(node, list) and token.isdigit() and int(token) < len(node):
        return node[int(token)]
    return None


def pointer_to_path(pointer: str) -> str:
    """The dotted field path a user finds in a manifest: /spec/tasks/0/template -> spec.tasks[0].template."""
    out: list[str] = []
    for raw in pointer.split("/")[1:]:
        token = unescape(raw)
        if token.isdigit():
            out.append(f"[{token}]")
        elif "." in token or "/" in token:
            out.append(f"['{token}']")
        elif out:
            out.append("." + token)
        else:
            out.append(token)
    return "".join(out)


def from_pointer(ptr: str) -> str:
    """JSON pointer -> the rendered dotted path: /metadata/labels/a~1b -> metadata.labels[a/b]."""
    tokens = tuple(Token(unescape(t), False) for t in ptr.split("/")[1:])
    return render(FieldPath(tokens))


def at(data: Any, ptr: str) -> Any:
    """The value at a JSON pointer, or None when any step is missing."""
    return walk(data, pointer_tokens(ptr))


def pointer_tokens(ptr: str) -> tuple[str, ...]:
    """A JSON pointer's tokens, unescaped: what walk() follows (split once where a pointer is fixed)."""
    return tuple(unescape(token) for token in ptr.split("/")[1:])


def walk(data: Any, tokens: tuple[str, ...]) -> Any:
    """The value at a pointer's tokens (pointer_tokens), or None when any step is missing."""
    node = data
    for token in tokens:
        node = _child(node, token)
        if node is None:
            return None
    return node


MISSING = object()


def lookup(data: Any, ptr: str) -> Any:
    """Like `at`, but tells a missing field (MISSING) from a null one."""
    node = data
    for raw in ptr.split("/")[1:]:
        token = unescape(raw)
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return MISSING
    return node

"""Edits -> RFC 6902 JSON Patch operations, applied copy-on-write.

A mutation's CEL expression returns *edits*: intents such as "this label has this value" or "this
env var exists". This module turns each edit into the JSON Patch operations that make it true of
the current object, and none when it already is. That is what makes every mutation idempotent:
a second pass over the mutated object produces no operations.

Edits (maps; nested lists are flattened):
    {"op": "set",     "path": P, "value": V}           P holds V (parents are created)
    {"op": "default", "path": P, "value": V}           P holds V unless P is already set
    {"op": "merge",   "path": P, "value": {k: v}}      map at P has each k: v (labels, nodeSelector)
    {"op": "upsert",  "path": P, "key": K, "value": M} list at P has M, matched on M[K] (env by name)
    {"op": "append",  "path": P, "value": V}           list at P contains V
    {"op": "remove",  "path": P}                       P is absent (removed when present)
    {"op": "requireNodeExpression", "path": P, "value": E}
        pod spec at P requires node expression E in every required nodeSelectorTerm that does not
        already constrain E.key (terms are ORed, so the expression must be in each of them)

The incoming object is never modified: containers on a written path are shallow-copied once.
"""

from __future__ import annotations

from itertools import repeat
from typing import Any

from webhook.fields import escape as escape
from webhook.fields import unescape

EDIT_OPS = ("set", "default", "merge", "upsert", "append", "remove", "requireNodeExpression")
_TERMS = ("affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")


class EditError(ValueError):
    """An edit that is malformed or cannot apply to this object."""


def parse_pointer(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise EditError(f"path {pointer!r} is not a JSON pointer (must start with '/')")
    tokens = pointer[1:].split("/")
    return [unescape(t) for t in tokens] if "~" in pointer else tokens


def to_pointer(tokens: list[str]) -> str:
    return "".join("/" + escape(t) for t in tokens)


def flatten_edits(value: Any, out: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A mutation's result as a flat list of edits; nested lists (from map()) are flattened."""
    out = [] if out is None else out
    # An edit is checked in the loop over its list rather than in a call of its own: this runs for
    # every edit of every mutating call.
    for item in value if isinstance(value, list) else (value,):
        if item is None:
            continue
        if isinstance(item, list):
            flatten_edits(item, out)
            continue
        if (
            not isinstance(item, dict)
            or item.get("op") not in EDIT_OPS
            or not isinstance(item.get("path"), str)
        ):
            raise EditError(f"not an edit (need op in {', '.join(EDIT_OPS)} and a string path): {item!r}")
        out.append(item)
    return out


class Patcher:
    """Applies edits to a copy-on-write view of one object and records the JSON Patch ops."""

    def __init__(self, obj: dict[str, Any]) -> None:
        self.doc = obj
        self.ops: list[dict[str, Any]] = []
        self._owned: set[int] = set()

    def checkpoint(self) -> tuple[dict[str, Any], int]:
        """A state rollback() can return to; later writes copy again so it stays intact."""
        self._owned = set()
        return self.doc, len(self.ops)

    def rollback(self, state: tuple[dict[str, Any], int]) -> None:
        self.doc, n = state
        del self.ops[n:]
        self._owned = set()

    # -- reading
    def _get(self, tokens: list[str]) -> tuple[bool, Any]:
        node: Any = self.doc
        for t in tokens:
            if isinstance(node, dict):
                if t not in node:
                    return False, None
                node = node[t]
            elif isinstance(node, list):
                if not t.isdigit() or int(t) >= len(node):
                    return False, None
                node = node[int(t)]
            else:
                return False, None
        return True, node

    # -- writing (copy-on-write along the path)
    def _writable(self, tokens: list[str]) -> Any:
        """The container at `tokens`, copied (with its ancestors) so it may be changed in place."""
        owned = self._owned
        node: Any = self.doc
        if id(node) not in owned:
            node = self.doc = dict(node)
            owned.add(id(node))
        for t in tokens:
            key: Any = int(t) if isinstance(node, list) else t
            child = node[key]
            if id(child) not in owned:
                child = node[key] = dict(child) if isinstance(child, dict) else list(child)
                owned.add(id(child))
            node = child
        return node

    def _put(self, tokens: list[str], path: str, value: Any, *, only_if_absent: bool = False) -> None:
        # Find the deepest existing container on the path; missing parents become one nested add.
        depth = 0
        node: Any = self.doc
        while depth < len(tokens) - 1:
            t = tokens[depth]
            nxt = node.get(t) if isinstance(node, dict) else None
            if isinstance(node, list) and t.isdigit() and int(t) < len(node):
                nxt = node[int(t)]
            if nxt is None:  # missing or null: created below
                break
            if not isinstance(nxt, dict | list):
                raise EditError(f"cannot write below {to_pointer(tokens[: depth + 1])}: not an object")
            node = nxt
            depth += 1
        if depth < len(tokens) - 1:
            if isinstance(node, list):  # missing parents are made as maps; a list grows by append only
                raise EditError(f"{to_pointer(tokens[: depth + 1])}: no such list element to write below")
            nested: Any = value
            for t in reversed(tokens[depth + 1 :]):
                nested = {t: nested}
            parent = tokens[: depth + 1]
            self._add(parent, to_pointer(parent), nested)
            return
        last = tokens[-1]
        if isinstance(node, dict):
            present = last in node and node[last] is not None
            if present and (only_if_absent or node[last] == value):
                return
            self._add(tokens, path, value)
        elif isinstance(node, list):
            if not last.isdigit() or int(last) >= len(node):
                raise EditError(f"{path}: no such list element")
            if only_if_absent or node[int(last)] == value:
                return
            self._writable(tokens[:-1])[int(last)] = value
            self.ops.append({"op": "replace", "path": path, "value": value})
        else:
            raise EditError(f"cannot write below {to_pointer(tokens[:-1])}: not an object")

    def _add(self, tokens: list[str], path: str, value: Any) -> None:
        """RFC 6902 add of an object member (replaces an existing member)."""
        self._writable(tokens[:-1])[tokens[-1]] = value
        self.ops.append({"op": "add", "path": path, "value": value})

    def _append(self, tokens: list[str], path: str, item: Any, current: Any) -> None:
        """Append `item` to the list at `tokens`, whose value (None when absent) is `current`."""
        if current is None:
            self._put(tokens, path, [item])
            return
        if not isinstance(current, list):
            raise EditError(f"{path} is not a list")
        self._writable(tokens).append(item)
        self.ops.append({"op": "add", "path": path + "/-", "value": item})

    # -- edits
    def apply(self, edit: dict[str, Any]) -> None:
        op, path, value = edit["op"], edit["path"], edit.get("value")
        tokens = parse_pointer(path)
        if not tokens:
            raise EditError("an edit cannot replace the whole object")
        if "~" in path:
            # The ops spell a path as to_pointer does; a path without "~" already is that spelling,
            # so it is used as it came instead of being rebuilt token by token.
            path = to_pointer(tokens)
        if op == "set":
            self._put(tokens, path, value)
        elif op == "default":
            self._put(tokens, path, value, only_if_absent=True)
        elif op == "merge":
            if not isinstance(value, dict):
                raise EditError(f"merge at {edit['path']} needs a map value")
            for k, v in value.items():
                key = str(k)
                self._put([*tokens, key], f"{path}/{escape(key)}", v)
        elif op == "upsert":
            self._upsert(tokens, path, edit.get("key"), value)
        elif op == "remove":
            found, _ = self._get(tokens)
            if found:
                container = self._writable(tokens[:-1])
                if isinstance(container, list):
                    del container[int(tokens[-1])]
                else:
                    del container[tokens[-1]]
                self.ops.append({"op": "remove", "path": path})
        elif op == "append":
            _, current = self._get(tokens)
            if not (isinstance(current, list) and value in current):
                self._append(tokens, path, value, current)
        else:  # requireNodeExpression
            self._require_node_expression(tokens, value)

    def _upsert(self, tokens: list[str], path: str, key: Any, value: Any) -> None:
        if not isinstance(key, str) or not isinstance(value, dict) or key not in value:
            raise EditError(f"upsert at {path} needs a key and a map value holding it")
        _, current = self._get(tokens)
        if not isinstance(current, list):
            self._append(tokens, path, value, current)
            return
        i = _first(current, key, value[key])
        if i is None:
            self._writable(tokens).append(value)
            self.ops.append({"op": "add", "path": path + "/-", "value": value})
        elif current[i] != value:
            self._writable(tokens)[i] = value
            self.ops.append({"op": "replace", "path": f"{path}/{i}", "value": value})

    def _require_node_expression(self, spec: list[str], expr: Any) -> None:
        if not isinstance(expr, dict) or not isinstance(expr.get("key"), str):
            raise EditError("requireNodeExpression needs a matchExpression map with a key")
        terms_path = [*spec, *_TERMS]
        found, terms = self._get(terms_path)
        if not found or not terms:
            self._put(terms_path, to_pointer(terms_path), [{"matchExpressions": [expr]}])
            return
        for i, term in enumerate(terms):
            exprs = (term or {}).get("matchExpressions") or []
            if any(isinstance(e, dict) and e.get("key") == expr["key"] for e in exprs):
                continue  # the user constrained this key already; validation judges it
            expressions = [*terms_path, str(i), "matchExpressions"]
            _, current = self._get(expressions)
            self._append(expressions, to_pointer(expressions), expr, current)


def _first(items: list[Any], key: str, wanted: Any) -> int | None:
    """The index of the first map in `items` whose `key` equals `wanted`, None if there is none.

    An upsert scans a whole env list (tens of entries) for every variable it sets: the scan runs
    in C (dict.get over the list, `in`, list.index) unless an item is not a map, then item by item.
    """
    try:
        keys = list(map(dict.get, items, repeat(key)))
    except TypeError:  # an item that is not a map
        keys = None
    if keys is not None:
        # `in` first: an upsert mostly adds a variable, and index() of a missing one raises a
        # ValueError, whose message (the value's repr) costs more than the scan.
        if wanted not in keys:
            return None
        i = keys.index(wanted)
        # `in` and index() take identity for equality (a NaN value): the found item is checked again
        if items[i].get(key) == wanted:
            return i
    matches = (i for i, item in enumerate(items) if isinstance(item, dict) and item.get(key) == wanted)
    return next(matches, None)


def apply_edits(
    obj: dict[str, Any], edits: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The object with the edits applied (a copy sharing untouched subtrees) and the ops."""
    patcher = Patcher(obj)
    for edit in edits:
        patcher.apply(edit)
    return patcher.doc, patcher.ops

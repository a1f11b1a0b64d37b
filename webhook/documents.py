"""Decode manifest files into documents, refusing what YAML loaders silently accept.

PyYAML keeps the last of two duplicate keys; a manifest that lost its Kueue label that way looks
fine to every other tool. We parse with the C scanner/parser, check each mapping for repeats, and
keep the line of every field so a report can point at it.

Decoding is on the path of every manifest `trainguard check` reads, so its common case is kept
short: libyaml composes the nodes, each plain scalar's tag is resolved once per distinct text,
and the documents of plain data (strings, numbers, booleans, nulls, timestamps, mappings with
scalar keys, sequences, aliases) are built by one small function that finds duplicate keys as it
goes. Anything else (merge keys, explicit collection tags, complex keys, a duplicate key, nesting
deeper than Python's recursion limit) is built again by PyYAML's own constructor, so the result
and every error message stay PyYAML's.

Input is bounded before it is decoded: only regular files are read (a FIFO or a device could block
or never end), at most `MAX_INPUT_BYTES` of them, and a document whose aliases would expand to more
than `MAX_ALIAS_NODES` extra nodes is refused before it is built (a few hundred bytes of nested
aliases stand for billions of values once anything walks them). A text that could hold more than
`MAX_TEXT_ENTRIES` values is refused before the parser sees it (counted on the text, at C speed:
a 31 MB file of millions of keys would otherwise take the parser tens of seconds and gigabytes).

Every decoded object then passes `check_structure` (nesting and value count) and `check_metadata`
(the types of metadata fields), here for manifest files and in the webhook for AdmissionReviews,
so every front door refuses the same objects, before anything downstream reads them.
"""

from __future__ import annotations

import datetime
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from webhook.errors import DuplicateKeyError, InputError
from webhook.fields import escape, unescape

try:  # the C loader is ~10x faster; fall back for platforms without libyaml
    _BaseLoader: type[yaml.SafeLoader] = yaml.CSafeLoader  # type: ignore[assignment]
except AttributeError:  # pragma: no cover
    _BaseLoader = yaml.SafeLoader


MAX_INPUT_BYTES = 32 * 1024 * 1024  # per file or stdin; etcd stores objects of at most 1.5 MiB
MAX_ALIAS_NODES = 100_000  # nodes that aliases may add to one document once expanded
# Real objects nest about 20 levels (managedFields included); everything downstream may recurse.
MAX_DEPTH = 100
# Values (mapping entries and list items, at every level) in one object. Real objects hold a few
# thousand; 3 MiB of JSON (the most the API server stores) can hold 1.6 million ("[0,0,…]"), and
# decoding that many YAML values takes about a gigabyte.
MAX_VALUES = 500_000
# Line breaks, commas, "- " and "? " marks and flow brackets in one text: every YAML value after the
# first needs one of these, so this bounds the values a file holds (a million lines is 20 MB or
# more of YAML: the pods of a large cluster as `kubectl get -o yaml` lists them).
MAX_TEXT_ENTRIES = 2 * MAX_VALUES


@dataclass(slots=True)
class Document:
    data: Any
    source: str  # "path#N" (N counts from 1)
    path: str
    index: int  # 1-based position in its file
    line: int  # 1-based line where the document starts
    # JSON pointer -> 1-based line, filled only when line tracking was asked for
    lines: dict[str, int] = field(default_factory=dict)

    def line_of(self, pointer: str) -> int:
        """The line of the deepest field at or above `pointer` that we know of."""
        while pointer:
            if pointer in self.lines:
                return self.lines[pointer]
            pointer = pointer.rsplit("/", 1)[0]
        return self.line


_STR = "tag:yaml.org,2002:str"
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
# Tags of plain scalars that PyYAML's SafeConstructor builds without looking at anything else.
_SCALAR_TAGS = tuple(
    f"tag:yaml.org,2002:{name}" for name in ("null", "bool", "int", "float", "timestamp", "binary")
)
_RESOLVED_CACHE_SIZE = 50_000  # distinct plain scalars remembered; far more than a manifest set repeats


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """SafeLoader that refuses duplicate keys and can record field lines."""

    track_lines = False
    line_offset = 0  # lines of the file before the text this loader reads
    # The implicit tag of a plain scalar depends on its text alone (no path resolvers are
    # registered, asserted below), and manifests repeat the same keys and values many times.
    _resolved: dict[str, str] = {}

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.lines: dict[str, int] = {}
        # Bound once per loader: what `_build` calls for each non-string scalar.
        self.scalar_constructors: dict[str, Any] = {
            tag: self.yaml_constructors[tag].__get__(self) for tag in _SCALAR_TAGS
        }

    def resolve(self, kind: type[yaml.Node], value: Any, implicit: Any) -> str:
        if kind is yaml.ScalarNode:
            if not implicit[0]:
                return _STR  # quoted, or a non-specific `!` tag
            tag = self._resolved.get(value)
            if tag is None:
                if len(self._resolved) >= _RESOLVED_CACHE_SIZE:
                    self._resolved.clear()
                tag = self._resolved[value] = super().resolve(kind, value, implicit)
            return tag
        return _MAP if kind is yaml.MappingNode else _SEQ

    # Without path resolvers these only return; the C composer calls them twice per node.
    def descend_resolver(self, current_node: Any, current_index: Any) -> None:
        pass

    def ascend_resolver(self) -> None:
        pass

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if key_node.tag == "tag:yaml.org,2002:str":
                key: Any = key_node.value  # the common case, without constructing the key twice
            else:
                key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # unhashable key: the base constructor reports it
            line = key_node.start_mark.line + 1 + self.line_offset
            if first is not None:
                raise DuplicateKeyError(
                    f"duplicate key {key!r} (first at line {first}); YAML would silently keep "
                    "only the last value",
                    line=line,
                    field=str(key),
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


assert not _Loader.yaml_path_resolvers, "the resolver shortcuts above assume no path resolvers"
assert (_Loader.DEFAULT_SCALAR_TAG, _Loader.DEFAULT_MAPPING_TAG, _Loader.DEFAULT_SEQUENCE_TAG) == (
    _STR,
    _MAP,
    _SEQ,
)


class _Unusual(Exception):
    """A node `_build` leaves to PyYAML's constructor."""


def _build(node: yaml.Node, scalars: dict[str, Any], shared: dict[int, Any] | None) -> Any:
    """The value of `node` as PyYAML's SafeConstructor builds it, for plain data only.

    Hand-written because PyYAML's constructor spends most of a manifest's decoding time in
    per-node dispatch, generators and bookkeeping for cases manifests do not use. `shared` maps
    an aliased node to its value, so that an alias yields the same object, as in PyYAML; it is
    None for a text without aliases. Raises _Unusual for whatever it does not build.
    """
    if shared is not None:
        known = shared.get(id(node))
        if known is not None:
            return known
    cls = node.__class__
    tag = node.tag
    if cls is yaml.ScalarNode:
        if tag == _STR:
            return node.value
        construct = scalars.get(tag)
        if construct is None:
            raise _Unusual
        return construct(node)
    value: Any
    if cls is yaml.MappingNode:
        if tag != _MAP:
            raise _Unusual
        value = {}
        if shared is not None:
            shared[id(node)] = value
        for key_node, value_node in node.value:
            if key_node.__class__ is not yaml.ScalarNode:
                raise _Unusual  # a complex key
            key = key_node.value if key_node.tag == _STR else _build(key_node, scalars, None)
            if key in value:
                raise _Unusual  # a duplicate: PyYAML's path reports it, with both lines
            value[key] = _build(value_node, scalars, shared)
        return value
    if tag != _SEQ:
        raise _Unusual
    value = []
    if shared is not None:
        shared[id(node)] = value
    for item in node.value:
        value.append(_build(item, scalars, shared))
    return value


def _construct(loader: _Loader, node: yaml.Node, has_aliases: bool) -> Any:
    try:
        return _build(node, loader.scalar_constructors, {} if has_aliases else None)
    except (_Unusual, RecursionError):
        return loader.construct_document(node)


def _record_lines(node: yaml.Node, pointer: str, out: dict[str, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            child = f"{pointer}/{escape(str(key_node.value))}"
            out[child] = key_node.start_mark.line + 1
            _record_lines(value_node, child, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = f"{pointer}/{i}"
            out[child] = item.start_mark.line + 1
            _record_lines(item, child, out)


def _path_at_line(node: yaml.Node, line: int) -> str | None:
    """Dotted path of the mapping key that stands at 0-based `line` (for duplicate-key errors)."""
    lines: dict[str, int] = {}
    _record_lines(node, "", lines)
    hits = [p for p, ln in lines.items() if ln == line + 1 and not p.rsplit("/", 1)[-1].isdigit()]
    if not hits:
        return None
    deepest = max(hits, key=lambda p: p.count("/"))
    return ".".join(unescape(t) for t in deepest.split("/")[1:])


def _node_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_aliases(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand too far, or refer to a node that contains them.

    The composed node graph shares every aliased node, so its expanded size is computed once per
    distinct node (memoised, iteratively: linear in what was written). A recursive alias has no
    JSON form and no Kubernetes meaning.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, closing = stack.pop()
        key = id(node)
        if closing:
            open_nodes.discard(key)
            total = 1
            for child in _node_children(node):
                total += sizes[id(child)]
            sizes[key] = total
            if total - len(sizes) > MAX_ALIAS_NODES:
                raise InputError(
                    f"YAML aliases expand this document beyond {MAX_ALIAS_NODES} extra values; "
                    "refused (an alias bomb is written this way): write the values out",
                    line=node.start_mark.line + 1,
                )
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise InputError(
                "a YAML alias refers to a node that contains it: a Kubernetes object cannot be recursive",
                line=node.start_mark.line + 1,
            )
        open_nodes.add(key)
        stack.append((node, True))
        for child in _node_children(node):
            if id(child) not in sizes:
                stack.append((child, False))


_VALUE_ERRORS = (ValueError, KeyError, TypeError, AttributeError, IndexError)


def _unreadable_value(loader: _Loader, root: yaml.Node) -> tuple[int, str] | None:
    """(line, problem) of the first scalar in `root` that its tag's constructor cannot build:
    `!!int abc`, an integer of more digits than Python converts, `!!map` on a scalar."""
    stack = [root]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if not isinstance(node, yaml.ScalarNode):
            stack.extend(reversed(_node_children(node)))
            continue
        kind = str(node.tag).rsplit(":", 1)[-1]
        construct = loader.scalar_constructors.get(node.tag)
        if construct is None:
            if kind in ("map", "seq", "set", "omap", "pairs") and node.tag.startswith("tag:yaml.org,2002:"):
                return node.start_mark.line + 1, f"a !!{kind} tag on a scalar"
            continue
        try:
            construct(node)
        except _VALUE_ERRORS:
            shown = repr(node.value) if len(node.value) <= 40 else f"a value of {len(node.value)} characters"
            return node.start_mark.line + 1, f"{shown} is not a valid !!{kind}"
    return None


def _document_at(text: str, line: int) -> int:
    """1-based index of the document that holds 0-based `line` (counting `---` separators)."""
    count = 1
    seen_content = False
    for i, raw in enumerate(text.splitlines()):
        if i >= line:
            break
        if raw.startswith("---"):
            if seen_content:
                count += 1
            seen_content = False
        elif raw.strip() and not raw.lstrip().startswith("#"):
            seen_content = True
    return count


# A line that starts a document ("---" alone or before content): where a parser that lost its
# place can start again. libyaml cannot resume after a syntax error, so the text after it is parsed
# afresh from such a line.
_DOCUMENT_START = re.compile(r"^---(?=[ \t\r\n]|$)", re.MULTILINE)
MAX_RESYNCS = 100  # per file: each one parses the rest of the text again


class _SyntaxError(InputError):
    """A YAML syntax error: the parser stopped at character `mark_index` of the text it read."""

    mark_index: int | None = None


def load_yaml_documents(
    text: str, path: str, *, track_lines: bool = False, errors: list[InputError] | None = None
) -> list[Document]:
    """All documents of one YAML (or JSON) text; empty documents are skipped.

    Without `errors`, the first document that cannot be read raises. With it, that document's
    error is added there and reading goes on: with the next document when the document was parsed
    but cannot be built (a duplicate key, an alias bomb, a value its tag cannot build), and from
    the next line that starts a document (`---`) when the parser lost its place, as far as there is one.
    """
    _check_entries(text, path)
    docs: list[Document] = []
    first, offset, resyncs = 1, 0, 0  # index of the chunk's first document, its line in the file
    while True:
        try:
            _load_documents(text, path, track_lines, docs, errors, first, offset)
            return docs
        except InputError as exc:
            if errors is None:
                raise
            errors.append(exc)
            lost_at = exc.mark_index if isinstance(exc, _SyntaxError) else None
            resume = _resume_at(text, lost_at) if resyncs < MAX_RESYNCS else None
            if resume is None or exc.document is None:
                return docs
            resyncs += 1
            offset += text.count("\n", 0, resume)
            first = exc.document + 1
            text = text[resume:]


def _resume_at(text: str, index: int | None) -> int | None:
    """Where the document after the one holding character `index` starts, if anywhere."""
    if index is None:
        return None
    line_start = text.rfind("\n", 0, index) + 1
    found = _DOCUMENT_START.search(text, line_start)
    if found is not None and found.start() == 0:  # the chunk's own start: no progress
        found = _DOCUMENT_START.search(text, 1)
    return found.start() if found is not None else None


def _load_documents(
    text: str,
    path: str,
    track_lines: bool,
    docs: list[Document],
    errors: list[InputError] | None,
    first: int,
    offset: int,
) -> None:
    """Append the documents of `text` (its first is document `first`, its first line `offset` + 1).

    Per-document errors go to `errors` when given; an error that stops the parser is raised (a
    _SyntaxError says where in `text` it stopped).
    """
    loader = _Loader(text)
    loader.line_offset = offset
    index = first - 1
    has_aliases = "*" in text  # an alias is written `*name`: without one, nothing can expand
    try:
        while loader.check_node():
            node = loader.get_node()
            index += 1
            if node is None:
                continue
            try:
                doc = _document(loader, node, has_aliases, path, index, offset, track_lines)
            except InputError as exc:
                if errors is None:
                    raise
                errors.append(exc)
                continue
            if doc is not None:
                docs.append(doc)
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, text, path, first, index, offset) from None
    except yaml.YAMLError as exc:
        raise InputError(f"malformed YAML: {exc}", source=path, document=index + 1) from None
    except RecursionError:
        raise InputError(
            f"nested too deeply to decode (the limit is {MAX_DEPTH} levels)", source=path, document=index or 1
        ) from None
    except MemoryError:
        raise InputError("too large to decode in memory", source=path, document=index or 1) from None
    finally:
        loader.dispose()


def _document(
    loader: _Loader,
    node: yaml.Node,
    has_aliases: bool,
    path: str,
    index: int,
    offset: int,
    track_lines: bool,
) -> Document | None:
    """Document `index` built from its node and checked (None: nothing there); InputError for
    what stops this document only."""
    start = node.start_mark.line + 1 + offset
    data = _build_document(loader, node, has_aliases, path, index, start, offset)
    if data is None:
        return None
    _check_document(data, path, index, start)
    doc = Document(data, f"{path}#{index}", path, index, start)
    if track_lines:
        _record_lines(node, "", doc.lines)
        if offset:
            doc.lines = {k: v + offset for k, v in doc.lines.items()}
    return doc


def _syntax_error(
    exc: yaml.MarkedYAMLError, text: str, path: str, first: int, index: int, offset: int
) -> _SyntaxError:
    """The parser stopped: where, in documents and lines of the file, and in characters of `text`."""
    mark = exc.problem_mark or exc.context_mark
    error = _SyntaxError(
        f"malformed YAML: {exc.problem or exc.context}",
        source=path,
        document=first - 1 + _document_at(text, mark.line) if mark else index + 1,
        line=mark.line + 1 + offset if mark else None,
    )
    error.mark_index = mark.index if mark else None
    return error


def _check_document(data: Any, path: str, index: int, start: int) -> None:
    if _is_list(data):  # each item is an object of its own, bounded as one
        for i, item in enumerate(data["items"]):
            check_structure(item, source=path, document=index, line=start, prefix=f"items[{i}].")
    else:
        check_structure(data, source=path, document=index, line=start)


def _build_document(
    loader: _Loader, node: yaml.Node, has_aliases: bool, path: str, index: int, start: int, offset: int
) -> Any:
    """The value of one composed document, or the InputError that says why it cannot be built."""
    if has_aliases:
        try:
            _check_aliases(node)
        except InputError as exc:
            line = exc.line + offset if exc.line is not None else None
            raise InputError(exc.message, source=path, document=index, line=line) from None
    try:
        return _construct(loader, node, has_aliases)
    except DuplicateKeyError as exc:  # its lines count from the start of the file already
        where = _path_at_line(node, (exc.line or 0) - 1 - offset)
        raise DuplicateKeyError(
            exc.message, source=path, document=index, line=exc.line, field=where or exc.field
        ) from None
    except _VALUE_ERRORS:  # what PyYAML's constructors raise on a value they cannot read
        found = _unreadable_value(loader, node)
        line, problem = (found[0] + offset, found[1]) if found else (start, "a value cannot be read")
        raise InputError(f"malformed YAML: {problem}", source=path, document=index, line=line) from None


def _check_entries(text: str, path: str) -> None:
    """InputError when `text` could hold more than MAX_TEXT_ENTRIES values, before it is parsed.

    A bound, not a count of values: comments and block scalars add lines too. Every value but the
    first of a document starts on a new line, after a comma, a "- " or "? " mark, or a flow bracket.
    """
    if len(text) <= MAX_TEXT_ENTRIES:  # fewer characters than the cap: cannot exceed it
        return
    entries = 0
    for mark in ("\n", ",", "- ", "-\t", "? ", "[", "{"):
        entries += text.count(mark)
        if entries > MAX_TEXT_ENTRIES:
            raise InputError(
                f"holds more than {MAX_TEXT_ENTRIES:,} lines and flow entries, the cap on one file's "
                f"values (an object holds at most {MAX_VALUES:,}); refused before decoding: "
                "split it into smaller files",
                source=path,
            )


def check_structure(
    value: Any,
    *,
    source: str,
    document: int | None = None,
    line: int | None = None,
    prefix: str = "",
    values_bound: int | None = None,
    depth_checked: bool = False,
) -> None:
    """InputError when `value` nests deeper than MAX_DEPTH or holds more than MAX_VALUES values.

    A walk a level at a time, without recursion, that only descends into containers (about 25 µs
    for a 3 KB object). A caller that knows `value` came from a text of at most `values_bound`
    values (a JSON text's bytes, halved: every value but the first takes at least a comma) skips
    the count when that bound is under the cap, and the whole walk when it has also bounded the
    depth on the text (the webhook does, at C speed).
    """
    count = values_bound is None or values_bound > MAX_VALUES
    if depth_checked and not count:
        return
    level = [value] if type(value) is dict or type(value) is list else []
    depth = values = 0
    while level:
        depth += 1
        if depth > MAX_DEPTH:
            raise InputError(
                f"nested deeper than {MAX_DEPTH} levels (real objects nest about 20): flatten it",
                source=source,
                document=document,
                line=line,
                field=_deep_field(value, prefix),
            )
        below: list[Any] = []
        for container in level:
            items = container.values() if type(container) is dict else container
            below += [v for v in items if type(v) is dict or type(v) is list]
            if count:
                values += len(container)
        if values > MAX_VALUES:
            raise InputError(
                f"holds more than {MAX_VALUES:,} values, the cap on one object (the API server "
                "stores at most 3 MiB of JSON): split it",
                source=source,
                document=document,
                line=line,
                field=prefix.rstrip(".") or None,
            )
        level = below


def _deep_field(value: Any, prefix: str) -> str:
    """The dotted path to the first value nested deeper than MAX_DEPTH, its middle elided."""
    parts: list[str] = []
    for _ in range(MAX_DEPTH + 1):
        step = next(
            (
                (str(k), v)
                for k, v in (value.items() if isinstance(value, dict) else enumerate(value))
                if isinstance(v, dict | list) and _deeper_than(v, MAX_DEPTH - len(parts) - 1)
            ),
            None,
        )
        if step is None:
            break
        parts.append(step[0])
        value = step[1]
    shown = parts if len(parts) <= 8 else [*parts[:4], "…", *parts[-2:]]
    return prefix + ".".join(shown)


def _deeper_than(value: Any, levels: int) -> bool:
    level = [value]
    for _ in range(levels):
        level = [
            v for c in level for v in (c.values() if isinstance(c, dict) else c) if isinstance(v, dict | list)
        ]
        if not level:
            return False
    return True


# ObjectMeta's fields by the type the API server holds them to (null stands for absent): the
# fields of one value, of a mapping of strings, and of a list (with the type of its entries).
# YAML reads an unquoted RFC 3339 time as a timestamp (a datetime.date).
_META_SCALARS: tuple[tuple[tuple[str, ...], type | tuple[type, ...], str], ...] = (
    (("name", "generateName", "namespace", "uid", "resourceVersion", "selfLink"), str, "a string"),
    (("creationTimestamp", "deletionTimestamp"), (str, datetime.date), "an RFC 3339 time string"),
    (("generation", "deletionGracePeriodSeconds"), int, "an integer"),
)
_META_STRING_MAPS = ("labels", "annotations")
_META_LISTS = (
    ("ownerReferences", dict, "mapping"),
    ("managedFields", dict, "mapping"),
    ("finalizers", str, "string"),
)


def check_metadata(
    obj: dict[str, Any],
    *,
    source: str,
    document: int | None = None,
    line: int | None = None,
    prefix: str = "",
) -> None:
    """InputError when a field of `obj`'s metadata has a type the API server would not accept.

    What the engine files objects under (namespace, name, labels) must be what it seems: a
    mapping where a name belongs reaches caches keyed by it.
    """

    def refuse(field: str, expected: str, got: Any) -> InputError:
        return InputError(
            f"must be {expected}, got {_type_name(got)}",
            source=source,
            document=document,
            line=line,
            field=f"{prefix}metadata{'.' + field if field else ''}",
        )

    meta = obj.get("metadata")
    if meta is None:
        return
    if not isinstance(meta, dict):
        raise refuse("", "a mapping", meta)
    fields: dict[str, Any] = meta

    def typed(key: str, kind: type | tuple[type, ...], expected: str) -> Any:
        value = fields.get(key)
        # No field of ObjectMeta is a boolean, though Python counts one as an int.
        if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
            raise refuse(key, expected, value)
        return value

    for keys, kind, expected in _META_SCALARS:
        for key in keys:
            typed(key, kind, expected)
    for key in _META_STRING_MAPS:
        for k, v in (typed(key, dict, "a mapping of strings to strings") or {}).items():
            if not isinstance(k, str):
                raise refuse(f"{key}.{k}", "a string key", k)
            if not isinstance(v, str):
                raise refuse(f"{key}.{k}", 'a string (quote it: "…")', v)
    for key, entry_type, entry in _META_LISTS:
        for i, item in enumerate(typed(key, list, f"a list of {entry}s") or ()):
            if not isinstance(item, entry_type):
                raise refuse(f"{key}[{i}]", f"a {entry}", item)


def _type_name(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), f"a value of type {type(value).__name__}"
    )


def check_object(doc: Document) -> None:
    """A Kubernetes object is a mapping with string apiVersion and kind and well-typed metadata."""
    if not isinstance(doc.data, dict):
        raise InputError(
            f"expected a Kubernetes object (a mapping), got {type(doc.data).__name__}",
            source=doc.path,
            document=doc.index,
            line=doc.line,
        )
    for key in ("apiVersion", "kind"):
        value = doc.data.get(key)
        if not isinstance(value, str) or not value:
            raise InputError(
                f"missing or empty {key}",
                source=doc.path,
                document=doc.index,
                line=doc.line,
                field=key,
            )
    check_metadata(doc.data, source=doc.path, document=doc.index, line=doc.line_of("/metadata"))


def _is_list(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == "List" and isinstance(data.get("items"), list)


def expand_lists(doc: Document) -> Iterator[Document]:
    """`kind: List` (what `kubectl get -o yaml` prints) stands for its items."""
    data = doc.data
    if _is_list(data):
        for i, item in enumerate(data["items"]):
            sub = Document(item, f"{doc.source}/items/{i}", doc.path, doc.index, doc.line_of(f"/items/{i}"))
            prefix = f"/items/{i}"
            sub.lines = {k[len(prefix) :]: v for k, v in doc.lines.items() if k.startswith(prefix + "/")}
            yield sub
    else:
        yield doc


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def iter_manifest_paths(paths: list[str]) -> Iterator[str]:
    """Files named directly, and .yaml/.yml/.json files under directories, sorted; "-" is stdin.

    A directory that holds no manifest file is an input error, as an empty file is.
    """
    for p in paths:
        if p == "-":
            yield p
            continue
        path = Path(p)
        if path.is_dir():
            found = False
            for child in sorted(path.rglob("*")):
                if child.is_file() and child.suffix in MANIFEST_SUFFIXES:
                    found = True
                    yield str(child)
            if not found:
                raise InputError("no documents: the directory holds no .yaml, .yml or .json file", source=p)
        elif path.exists() or path.is_symlink():
            yield str(path)
        else:
            raise InputError("no such file or directory", source=p)


def read_text(path: str, *, limit: int = MAX_INPUT_BYTES) -> str:
    """A regular file's text, at most `limit` bytes; FIFOs, devices and sockets are refused.

    The file is opened without blocking and checked on the open descriptor, so a path that is
    swapped for a FIFO after a check cannot hang the reader.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", source=path) from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(mode)
                else "a device"
                if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                else "a socket"
                if stat.S_ISSOCK(mode)
                else "not a regular file"
            )
            raise InputError(
                f"refused: {kind}, not a regular file (it could block or never end); "
                "pipe it through stdin (-) instead",
                source=path,
            )
        try:
            data = f.read(limit + 1)
        except OSError as exc:
            raise InputError(f"cannot read: {exc.strerror or exc}", source=path) from None
    if len(data) > limit:
        raise InputError(
            f"larger than the {_size(limit)} input limit: split it into smaller files", source=path
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: {exc.reason} at byte {exc.start}", source=path) from None


def read_stream(stream: Any, label: str = "<stdin>", *, limit: int = MAX_INPUT_BYTES) -> str:
    """Text from an open stream (stdin), at most `limit` characters."""
    if stream is None:
        return ""
    try:
        text = stream.read(limit + 1)
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text: {exc.reason}", source=label) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", source=label) from None
    if len(text) > limit:
        raise InputError(
            f"larger than the {_size(limit)} input limit: split it into smaller files", source=label
        )
    return str(text)


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 else f"{n} bytes"


@dataclass(slots=True)
class Manifests:
    """Every object document that could be read, and every error met on the way, in input order."""

    documents: list[Document] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)


def collect_manifests(paths: list[str], *, stdin: Any = None, track_lines: bool = False) -> Manifests:
    """Read every file and document it can; an unreadable one is an error, not the end of the run.

    A document that cannot be read stops only itself: the documents before it are decided, and
    those after it as far as the parser finds the next `---` once it has lost its place; a
    document that is not a Kubernetes object stops only that document. A named file, stdin or a
    directory that holds no document at all is an error ("no documents"); inside a directory that
    holds documents, an empty file is skipped, as `kubectl apply -f DIR` skips it.
    """
    return collect_inputs(manifest_inputs(paths), stdin=stdin, track_lines=track_lines)


Inputs = list[tuple[str, list[str] | InputError]]


def manifest_inputs(paths: list[str]) -> Inputs:
    """Each argument with the files it stands for, or the error that it stands for none."""
    inputs: Inputs = []
    for arg in paths:
        try:
            inputs.append((arg, list(iter_manifest_paths([arg]))))
        except InputError as exc:  # a path that does not exist, or a directory without manifests
            inputs.append((arg, exc))
    return inputs


def collect_inputs(inputs: Inputs, *, stdin: Any = None, track_lines: bool = False) -> Manifests:
    """`collect_manifests` over arguments already listed by `manifest_inputs`."""
    out = Manifests()
    for arg, files in inputs:
        if isinstance(files, InputError):
            out.errors.append(files)
            continue
        before = (len(out.documents), len(out.errors))
        for path in files:
            collect_file(path, out, stdin=stdin, track_lines=track_lines)
        if (len(out.documents), len(out.errors)) == before:
            out.errors.append(no_documents(arg, files))
    return out


def no_documents(arg: str, files: list[str]) -> InputError:
    """The error for an argument whose files hold no Kubernetes object."""
    label = "<stdin>" if arg == "-" else arg
    what = "the directory's files hold" if files != [arg] and arg != "-" else "the input holds"
    return InputError(f"no documents: {what} no Kubernetes object", source=label)


def collect_file(path: str, out: Manifests, *, stdin: Any = None, track_lines: bool = False) -> None:
    """The object documents of one file ("-": `stdin`) added to `out`, and its errors."""
    label = "<stdin>" if path == "-" else path
    unreadable: list[InputError] = []
    try:
        text = read_stream(stdin) if path == "-" else read_text(path)
        # JSON goes through the YAML loader too: JSON parsers also keep the last duplicate key.
        loaded = load_yaml_documents(text, label, track_lines=track_lines, errors=unreadable)
    except InputError as exc:
        out.errors.append(exc)
        return
    for doc in loaded:
        for item in expand_lists(doc):
            try:
                check_object(item)
            except InputError as exc:
                unreadable.append(exc)
                continue
            out.documents.append(item)
    # In the file's order, whichever step found them.
    out.errors.extend(sorted(unreadable, key=lambda e: e.document or 0))


def read_manifests(paths: list[str], *, stdin: Any = None, track_lines: bool = False) -> list[Document]:
    """Every object document in the given files, in order; raises the first InputError met."""
    found = collect_manifests(paths, stdin=stdin, track_lines=track_lines)
    if found.errors:
        raise found.errors[0]
    return found.documents

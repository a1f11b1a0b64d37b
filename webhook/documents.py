"""Decode manifest files into documents, refusing what YAML loaders silently accept.

PyYAML keeps the last of two duplicate keys; a manifest that lost its Kueue label that way looks
fine to every other tool. We parse with the C scanner/parser, check each mapping for repeats, and
keep the line of every field so a report can point at it.
"""

from __future__ import annotations

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


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """SafeLoader that refuses duplicate keys and can record field lines."""

    track_lines = False

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.lines: dict[str, int] = {}

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
            line = key_node.start_mark.line + 1
            if first is not None:
                raise DuplicateKeyError(
                    f"duplicate key {key!r} (first at line {first}); YAML would silently keep "
                    "only the last value",
                    line=line,
                    field=str(key),
                )
            seen[key] = line
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


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


def load_yaml_documents(text: str, path: str, *, track_lines: bool = False) -> list[Document]:
    """All documents of one YAML (or JSON) text; empty documents are skipped."""
    loader = _Loader(text)
    docs: list[Document] = []
    index = 0
    try:
        while loader.check_node():
            node = loader.get_node()
            index += 1
            if node is None:
                continue
            start = node.start_mark.line + 1
            try:
                data = loader.construct_document(node)
            except DuplicateKeyError as exc:
                where = _path_at_line(node, (exc.line or 0) - 1)
                raise DuplicateKeyError(
                    exc.message, source=path, document=index, line=exc.line, field=where or exc.field
                ) from None
            if data is None:
                continue
            doc = Document(data, f"{path}#{index}", path, index, start)
            if track_lines:
                _record_lines(node, "", doc.lines)
            docs.append(doc)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise InputError(
            f"malformed YAML: {exc.problem or exc.context}",
            source=path,
            document=_document_at(text, mark.line) if mark else index + 1,
            line=mark.line + 1 if mark else None,
        ) from None
    except yaml.YAMLError as exc:
        raise InputError(f"malformed YAML: {exc}", source=path, document=index + 1) from None
    finally:
        loader.dispose()
    return docs


def check_object(doc: Document) -> None:
    """A Kubernetes object is a mapping with string apiVersion and kind."""
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


def expand_lists(doc: Document) -> Iterator[Document]:
    """`kind: List` (what `kubectl get -o yaml` prints) stands for its items."""
    data = doc.data
    if isinstance(data, dict) and data.get("kind") == "List" and isinstance(data.get("items"), list):
        for i, item in enumerate(data["items"]):
            sub = Document(item, f"{doc.source}/items/{i}", doc.path, doc.index, doc.line_of(f"/items/{i}"))
            prefix = f"/items/{i}"
            sub.lines = {k[len(prefix) :]: v for k, v in doc.lines.items() if k.startswith(prefix + "/")}
            yield sub
    else:
        yield doc


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def iter_manifest_paths(paths: list[str]) -> Iterator[str]:
    """Files named directly, and .yaml/.yml/.json files under directories, sorted; "-" is stdin."""
    for p in paths:
        if p == "-":
            yield p
            continue
        path = Path(p)
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and child.suffix in MANIFEST_SUFFIXES:
                    yield str(child)
        elif path.exists():
            yield str(path)
        else:
            raise InputError("no such file or directory", source=p)


def read_manifests(paths: list[str], *, stdin: Any = None, track_lines: bool = False) -> list[Document]:
    """Every object document in the given files, in order; raises InputError on the first bad one."""
    docs: list[Document] = []
    for path in iter_manifest_paths(paths):
        if path == "-":
            text, label = stdin.read() if stdin is not None else "", "<stdin>"
        else:
            label = path
            try:
                text = Path(path).read_text("utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise InputError(f"cannot read: {exc}", source=path) from None
        # JSON goes through the YAML loader too: JSON parsers also keep the last duplicate key.
        loaded = load_yaml_documents(text, label, track_lines=track_lines)
        for doc in loaded:
            for item in expand_lists(doc):
                check_object(item)
                docs.append(item)
    return docs

"""Manifest decoding: every bad input is refused with its file, document, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.documents import load_yaml_documents, read_manifests
from webhook.errors import DuplicateKeyError, InputError

BAD = [
    pytest.param(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  labels:\n    kueue.x-k8s.io/queue-name: a\n    kueue.x-k8s.io/queue-name: b\n",
        DuplicateKeyError,
        "document 1, line 6, field metadata.labels.kueue.x-k8s.io/queue-name: duplicate key 'kueue.x-k8s.io/queue-name' (first at line 5)",
        id="duplicate-label-key",
    ),
    pytest.param(
        "apiVersion: v1\nkind: Pod\n---\napiVersion: v1\napiVersion: v2\nkind: Pod\n",
        DuplicateKeyError,
        "document 2, line 5, field apiVersion",
        id="duplicate-key-in-second-document",
    ),
    pytest.param(
        "apiVersion: v1\nkind: Pod\n---\nmetadata: [a,\n",
        InputError,
        "document 2, line 5: malformed YAML",
        id="unterminated-flow-sequence",
    ),
    pytest.param(
        "- a\n- b\n",
        InputError,
        "expected a Kubernetes object (a mapping), got list",
        id="document-is-a-list",
    ),
    pytest.param(
        "kind: Pod\nmetadata: {}\n",
        InputError,
        "field apiVersion: missing or empty apiVersion",
        id="missing-apiversion",
    ),
    pytest.param(
        "apiVersion: v1\nmetadata: {}\n", InputError, "field kind: missing or empty kind", id="missing-kind"
    ),
    pytest.param(
        "apiVersion: v1\nkind: Pod\n\tbad: tab\n", InputError, "malformed YAML", id="tab-indentation"
    ),
]


@pytest.mark.parametrize(("text", "error", "words"), BAD)
def test_bad_manifest_is_refused_with_location(
    tmp_path: Path, text: str, error: type[Exception], words: str
) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(error) as info:
        read_manifests([str(path)])
    assert str(path) in str(info.value)
    assert words in str(info.value)


def test_line_numbers_are_tracked_per_field() -> None:
    text = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n    - name: a\n      image: x\n"
    doc = load_yaml_documents(text, "f.yaml", track_lines=True)[0]
    assert doc.line_of("/spec/containers/0/image") == 6
    assert doc.line_of("/spec/containers/0/resources/limits") == 5  # nearest known ancestor


def test_directories_are_searched_recursively_in_order(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "two.yml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: two}\n")
    (tmp_path / "a.json").write_text('{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "one"}}')
    (tmp_path / "notes.txt").write_text("not a manifest")
    docs = read_manifests([str(tmp_path)])
    assert [d.data["metadata"]["name"] for d in docs] == ["one", "two"]
    assert docs[0].source.endswith("a.json#1")


def test_json_duplicate_keys_are_refused_too(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"apiVersion": "v1", "kind": "Pod", "kind": "Job"}')
    with pytest.raises(DuplicateKeyError, match="duplicate key 'kind'"):
        read_manifests([str(path)])


def test_list_kind_stands_for_its_items(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text(
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n"
    )
    docs = read_manifests([str(path)])
    assert [d.data["kind"] for d in docs] == ["Pod"]
    assert docs[0].source.endswith("list.yaml#1/items/0")


def test_missing_path_is_an_input_error() -> None:
    with pytest.raises(InputError, match="no such file or directory"):
        read_manifests(["/nonexistent/x.yaml"])


def test_empty_documents_are_skipped() -> None:
    docs = load_yaml_documents("---\n---\napiVersion: v1\nkind: Pod\n---\n", "f.yaml")
    assert [(d.index, d.line) for d in docs] == [(2, 3)]

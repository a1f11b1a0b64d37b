"""Manifest decoding: every bad input is refused with its file, document, line and field."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import pytest

from webhook.documents import collect_manifests, load_yaml_documents, read_manifests, read_stream, read_text
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


# --------------------------------------------------------------------------------------------
# Bounded input: aliases, special files, size, and every readable document kept


def _laughs(levels: int, *, duplicate_key: bool) -> str:
    """The classic alias bomb: each level lists the previous one nine times (9**levels strings)."""
    lines = ["apiVersion: v1", "kind: Pod", 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    prev = "a"
    for name in "bcdefghijklmnop"[: levels - 1]:
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
        prev = name
    lines.append(
        "kind: Pod" if duplicate_key else f"spec: {{containers: [{{name: t, image: x, args: *{prev}}}]}}"
    )
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("duplicate_key", [True, False], ids=["with-a-duplicate-key", "without"])
def test_alias_bomb_is_refused_before_it_is_built(duplicate_key: bool) -> None:
    with pytest.raises(InputError) as info:
        load_yaml_documents(_laughs(9, duplicate_key=duplicate_key), "bomb.yaml")
    assert "YAML aliases expand this document beyond 100000 extra values" in str(info.value)
    assert "bomb.yaml, document 1" in str(info.value)


def test_recursive_alias_is_refused() -> None:
    with pytest.raises(InputError, match="alias refers to a node that contains it"):
        load_yaml_documents("apiVersion: v1\nkind: Pod\na: &a [1, *a]\n", "r.yaml")


def test_ordinary_anchors_are_decoded() -> None:
    text = (
        "apiVersion: v1\nkind: Pod\nx: &env [{name: A, value: b}]\n"
        "spec: {containers: [{name: a, env: *env}, {name: b, env: *env}]}\n"
    )
    doc = load_yaml_documents(text, "f.yaml")[0]
    assert [c["env"] for c in doc.data["spec"]["containers"]] == [[{"name": "A", "value": "b"}]] * 2


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # nothing ever writes to it: reading it would block for ever
    with pytest.raises(InputError, match="refused: a FIFO, not a regular file"):
        read_text(str(fifo))


def test_a_device_is_refused() -> None:
    with pytest.raises(InputError, match="refused: a device, not a regular file"):
        read_text("/dev/zero")


def test_input_larger_than_the_limit_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("a" * 101)
    with pytest.raises(InputError, match="larger than the 100 bytes input limit"):
        read_text(str(path), limit=100)
    with pytest.raises(InputError, match="<stdin>: larger than the 100 bytes input limit"):
        read_stream(io.StringIO("a" * 101), limit=100)
    assert read_text(str(path), limit=101) == "a" * 101


def test_text_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"apiVersion: v1\nkind: Pod\nmetadata: {name: caf\xe9}\n")
    with pytest.raises(InputError, match="not UTF-8 text"):
        read_text(str(path))


def test_every_readable_document_is_kept_and_every_error_listed(tmp_path: Path) -> None:
    (tmp_path / "a-good.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: one}\n")
    (tmp_path / "b-broken.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: [x\n")
    (tmp_path / "c-mixed.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: two}\n---\n- not an object\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: three}\n"
    )
    (tmp_path / "d-empty.yaml").write_text("")  # skipped inside a directory that holds documents
    found = collect_manifests([str(tmp_path)])
    assert [d.data["metadata"]["name"] for d in found.documents] == ["one", "two", "three"]
    assert [(Path(e.source or "").name, e.document, e.line) for e in found.errors] == [
        ("b-broken.yaml", 1, 4),
        ("c-mixed.yaml", 2, 5),
    ]


@pytest.mark.parametrize(
    ("make", "words"),
    [
        pytest.param(
            lambda p: (p / "e.yaml").write_text("# only a comment\n"), "no documents", id="empty-file"
        ),
        pytest.param(lambda p: (p / "sub").mkdir(), "no documents", id="directory-without-manifests"),
    ],
)
def test_input_without_documents_is_an_error(tmp_path: Path, make: Any, words: str) -> None:
    make(tmp_path)
    target = next(tmp_path.iterdir())
    found = collect_manifests([str(target)])
    assert found.documents == []
    assert [words in str(e) and str(target) in str(e) for e in found.errors] == [True]
    with pytest.raises(InputError, match=words):
        read_manifests([str(target)])


def test_empty_stdin_is_an_error() -> None:
    found = collect_manifests(["-"], stdin=io.StringIO(""))
    assert [str(e) for e in found.errors] == ["<stdin>: no documents: the input holds no Kubernetes object"]


# --------------------------------------------------------------------------------------------
# The decoder builds plain data itself and leaves the rest to PyYAML: both give PyYAML's values

SAME_AS_PYYAML = [
    pytest.param(
        "a: yes\nb: No\nc: on\nd: 0755\ne: 0x1F\nf: 1_000\ng: 1:30\nh: .inf\ni: ~\nj: null\nk:\n"
        "l: 1e3\nm: 6.8e+5\nn: 0b101\no: +12\np: TRUE\nq: '0755'\nr: \"yes\"\ns: !!str 42\n",
        id="yaml-1.1-scalars",
    ),
    pytest.param(
        "created: 2024-01-15T12:00:00Z\nday: 2024-01-15\nraw: !!binary aGVsbG8=\n", id="timestamps-and-binary"
    ),
    pytest.param("3: a\n2.5: b\ntrue: c\n~: d\n2020-01-01: e\n'1': f\n", id="non-string-keys"),
    pytest.param(
        "x: &env [{name: A, value: b}]\ny: {env: *env, image: '*x'}\nz: *env\n", id="aliases-share-values"
    ),
    pytest.param("base: &b {a: 1, b: 2}\nspec:\n  <<: *b\n  b: 3\n", id="merge-key"),
    pytest.param("b1: &b1 {a: 1}\nb2: &b2 {z: 2}\nspec: {<<: [*b1, *b2], c: 4}\n", id="merge-key-list"),
    pytest.param("s: !!set {a, b}\no: !!omap [{a: 1}]\np: !!pairs [{a: 1}]\n", id="collection-tags"),
    pytest.param(
        "a: !!int '12'\nb: !!float '1.5'\nc: !!bool 'yes'\nd: ! 12\ne: !!map {a: 1}\n", id="explicit-tags"
    ),
    pytest.param("a: |\n  l1\n  l2\nb: >-\n  folded\n  text\n", id="block-scalars"),
    pytest.param('{"a": [1, 2.5, true, null, "s"], "b": {"c": {}}}', id="json"),
    pytest.param("x: " + "[" * 99 + "]" * 99 + "\n", id="nested-to-the-depth-bound"),
]


@pytest.mark.parametrize("text", SAME_AS_PYYAML)
def test_documents_decode_to_what_pyyaml_builds(text: str) -> None:
    import yaml

    (doc,) = load_yaml_documents(text, "f.yaml")
    expected = yaml.load(text, Loader=yaml.CSafeLoader)  # PyYAML's own constructor on libyaml
    assert doc.data == expected
    assert repr(doc.data) == repr(expected) or "!!set" in text  # same types, same key order


def test_an_alias_yields_the_same_object_as_in_pyyaml() -> None:
    (doc,) = load_yaml_documents("x: &env [{name: A}]\ny: *env\n", "f.yaml")
    assert doc.data["x"] is doc.data["y"]


DUPLICATES = [
    pytest.param(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: a, name: b}\n",
        "document 1, line 3, field metadata.name: duplicate key 'name' (first at line 3)",
        id="flow-mapping",
    ),
    pytest.param(
        "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: x\n    image: y\n",
        "document 1, line 7, field spec.containers.0.image: duplicate key 'image' (first at line 6)",
        id="inside-a-list",
    ),
    pytest.param(
        "apiVersion: v1\nkind: Pod\nx: {1: a, 01: b}\n",
        "document 1, line 3, field x: duplicate key 1 (first at line 3)",
        id="keys-equal-as-numbers",
    ),
    pytest.param(
        "apiVersion: v1\nkind: Pod\nbase: &b {a: 1}\nspec:\n  <<: *b\n  c: 1\n  c: 2\n",
        "document 1, line 7, field spec.c: duplicate key 'c' (first at line 6)",
        id="beside-a-merge-key",
    ),
    pytest.param(
        "apiVersion: v1\nkind: Pod\nx: {&k a: 1, *k : 2}\n",
        "document 1, line 3, field x.a: duplicate key 'a' (first at line 3)",
        id="through-an-alias",
    ),
]


@pytest.mark.parametrize(("text", "words"), DUPLICATES)
def test_duplicate_keys_are_reported_with_both_lines(text: str, words: str) -> None:
    with pytest.raises(DuplicateKeyError) as info:
        load_yaml_documents(text, "f.yaml")
    assert str(info.value).startswith(f"f.yaml, {words}; YAML would silently keep only the last value")


def test_keys_that_differ_in_type_are_not_duplicates() -> None:
    (doc,) = load_yaml_documents("apiVersion: v1\nkind: Pod\nx: {'1': a, 1: b}\n", "f.yaml")
    assert doc.data["x"] == {"1": "a", 1: "b"}


UNREADABLE_VALUES = [
    pytest.param("x: !!bool maybe\n", "line 4: malformed YAML: 'maybe' is not a valid !!bool", id="bool"),
    pytest.param("x: !!int abc\n", "line 4: malformed YAML: 'abc' is not a valid !!int", id="int"),
    pytest.param(
        "x: !!timestamp abc\n", "line 4: malformed YAML: 'abc' is not a valid !!timestamp", id="timestamp"
    ),
    pytest.param("x: !!map abc\n", "line 4: malformed YAML: a !!map tag on a scalar", id="map-on-a-scalar"),
    pytest.param(
        "b: &b {a: 1}\ny: {<<: *b}\nx: !!float abc\n",
        "line 6: malformed YAML: 'abc' is not a valid !!float",
        id="in-a-document-with-a-merge-key",
    ),
    pytest.param(
        "x: " + "1" * 5000 + "\n",
        "line 4: malformed YAML: a value of 5000 characters is not a valid !!int",
        id="more-digits-than-python-converts",
    ),
]


@pytest.mark.parametrize(("tail", "words"), UNREADABLE_VALUES)
def test_a_value_its_tag_cannot_build_is_an_input_error(tail: str, words: str) -> None:
    with pytest.raises(InputError) as info:
        load_yaml_documents("apiVersion: v1\nkind: Pod\nmetadata: {name: t}\n" + tail, "f.yaml")
    assert str(info.value) == f"f.yaml, document 1, {words}"


def _configmap(name: str) -> str:
    return f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}}}\n"


@pytest.mark.parametrize(
    ("text", "names", "errors"),
    [
        pytest.param(
            _configmap("one") + "---\n" + "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [x\n"
            "data: {a: b}\n---\n" + _configmap("three"),
            ["one", "three"],
            [(2, 8, "malformed YAML")],
            id="unterminated-flow-then-the-next-document",
        ),
        pytest.param(
            _configmap("one")
            + "---\napiVersion: v1\nkind: ConfigMap\n\tbad: tab\n---\n"
            + _configmap("three"),
            ["one", "three"],
            [(2, 7, "malformed YAML")],
            id="tab-indentation-then-the-next-document",
        ),
        pytest.param(
            _configmap("one")
            + "---\nkind: ConfigMap\nmetadata: {name: 'unterminated\n"
            + "---\n"
            + _configmap("x"),
            ["one", "x"],
            [(2, 7, "found unexpected document indicator")],
            id="unterminated-quote-ends-at-the-next-document-marker",
        ),
        pytest.param(
            _configmap("one") + "---\nkind: ConfigMap\nmetadata: {name: 'unterminated\nmore: text\n",
            ["one"],
            [(2, 8, "found unexpected end of stream")],
            id="an-error-in-the-last-document-leaves-nothing-to-resume",
        ),
        pytest.param(
            _configmap("one")
            + "---\nmetadata: [\n---\n"
            + _configmap("three")
            + "---\nmetadata: {\n---\n"
            + _configmap("five")
            + "---\napiVersion: v1\napiVersion: v2\nkind: ConfigMap\n---\n"
            + _configmap("seven"),
            ["one", "three", "five", "seven"],
            [
                (2, 6, "malformed YAML"),
                (4, 12, "malformed YAML"),
                (6, 18, "duplicate key 'apiVersion' (first at line 17)"),
            ],
            id="several-errors-each-reported-every-other-document-read",
        ),
        pytest.param(
            _configmap("one")
            + "---\napiVersion: v1\nkind: ConfigMap\nx: !!int abc\n---\n"
            + _configmap("three"),
            ["one", "three"],
            [(2, 7, "'abc' is not a valid !!int")],
            id="a-value-its-tag-cannot-build-stops-only-its-document",
        ),
    ],
)
def test_a_document_that_cannot_be_read_stops_only_itself(
    tmp_path: Path, text: str, names: list[str], errors: list[tuple[int, int | None, str]]
) -> None:
    path = tmp_path / "multi.yaml"
    path.write_text(text)
    found = collect_manifests([str(path)])
    assert [d.data["metadata"]["name"] for d in found.documents] == names
    got = [(e.document, e.line, e.message) for e in found.errors]
    assert [(document, line) for document, line, _ in got] == [(d, ln) for d, ln, _ in errors]
    for (_, _, message), (_, _, words) in zip(got, errors, strict=True):
        assert words in message


def test_documents_after_a_resync_keep_their_lines(tmp_path: Path) -> None:
    text = (
        _configmap("one")
        + "---\nmetadata: [\n---\n"
        + "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: three\n"
    )
    found: list[InputError] = []
    docs = load_yaml_documents(text, "m.yaml", track_lines=True, errors=found)
    assert [(d.index, d.line, d.line_of("/metadata/name")) for d in docs] == [(1, 1, 3), (3, 7, 10)]
    assert [(e.document, e.line) for e in found] == [(2, 6)]

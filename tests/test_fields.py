"""Field paths as users write them <-> JSON pointers: one spelling in every report."""

from __future__ import annotations

from typing import Any

import pytest

from webhook import fields

DATA: dict[str, Any] = {
    "metadata": {"labels": {"a/b": "x", "k.io/name": "y"}, "annotations": None},
    "spec": {"tasks": [{"name": "w", "template": {"spec": {}}}]},
}


@pytest.mark.parametrize(
    ("field", "rendered", "pointer"),
    [
        pytest.param(
            "spec.tasks[0].template", "spec.tasks[0].template", "/spec/tasks/0/template", id="index"
        ),
        pytest.param(
            "metadata.labels[a/b]", "metadata.labels[a/b]", "/metadata/labels/a~1b", id="slash-in-key"
        ),
        pytest.param(
            "metadata.labels['k.io/name']",
            "metadata.labels[k.io/name]",
            "/metadata/labels/k.io~1name",
            id="quoted-dots",
        ),
        pytest.param(
            'metadata.labels["a/b"]', "metadata.labels[a/b]", "/metadata/labels/a~1b", id="double-quotes"
        ),
    ],
)
def test_a_field_renders_one_way_and_points_into_the_object(field: str, rendered: str, pointer: str) -> None:
    assert fields.normalise(field) == rendered
    assert fields.pointer(fields.parse(field), DATA) == pointer


@pytest.mark.parametrize(
    ("token", "escaped"),
    [
        pytest.param("plain", "plain", id="plain"),
        pytest.param("a/b", "a~1b", id="slash"),
        pytest.param("~x", "~0x", id="tilde"),
        pytest.param("~1/", "~01~1", id="tilde-one-then-slash"),
    ],
)
def test_pointer_tokens_escape_and_unescape_round_trip(token: str, escaped: str) -> None:
    assert fields.escape(token) == escaped
    assert fields.unescape(escaped) == token


@pytest.mark.parametrize(
    ("ptr", "at", "lookup"),
    [
        pytest.param("/spec/tasks/0/name", "w", "w", id="list-index"),
        pytest.param("/metadata/labels/a~1b", "x", "x", id="escaped-key"),
        pytest.param("/metadata/annotations", None, None, id="null-is-null"),
        pytest.param("/metadata/missing", None, fields.MISSING, id="missing-is-missing"),
        pytest.param("/spec/tasks/7", None, fields.MISSING, id="index-out-of-range"),
    ],
)
def test_at_and_lookup_tell_missing_from_null(ptr: str, at: Any, lookup: Any) -> None:
    assert fields.at(DATA, ptr) == at
    assert (
        fields.lookup(DATA, ptr) is lookup if lookup is fields.MISSING else fields.lookup(DATA, ptr) == lookup
    )


def test_a_field_of_another_object_keeps_its_object() -> None:
    path = fields.parse("ClusterTrainingRuntime/torch:spec.podGroupPolicy")
    assert path.object == "ClusterTrainingRuntime/torch"
    assert fields.render(path) == "ClusterTrainingRuntime/torch:spec.podGroupPolicy"


@pytest.mark.parametrize(
    ("ptr", "path"),
    [
        pytest.param("/spec/tasks/0/template", "spec.tasks[0].template", id="index"),
        pytest.param("/metadata/labels/a~1b", "metadata.labels['a/b']", id="escaped-key-quoted"),
    ],
)
def test_pointer_to_path_is_what_a_user_finds_in_the_manifest(ptr: str, path: str) -> None:
    assert fields.pointer_to_path(ptr) == path

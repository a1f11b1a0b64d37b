"""Edits become RFC 6902 operations that apply cleanly, and a second pass produces none."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from webhook.engine.mutate import EditError, Patcher, apply_edits, flatten_edits

POD_TEMPLATE: dict[str, Any] = {
    "metadata": {"name": "job"},
    "spec": {
        "template": {
            "spec": {"containers": [{"name": "trainer", "env": [{"name": "A", "value": "1"}]}]},
        }
    },
}

CASES = [
    pytest.param(
        {"op": "remove", "path": "/metadata/name"},
        [{"op": "remove", "path": "/metadata/name"}],
        id="remove-present-field",
    ),
    pytest.param({"op": "remove", "path": "/spec/preemptionPolicy"}, [], id="remove-absent-field-is-a-no-op"),
    pytest.param(
        {"op": "merge", "path": "/metadata/labels", "value": {"trainguard.dev/class": "B"}},
        [{"op": "add", "path": "/metadata/labels", "value": {"trainguard.dev/class": "B"}}],
        id="merge-creates-missing-labels-map",
    ),
    pytest.param(
        {"op": "merge", "path": "/metadata", "value": {"name": "job"}},
        [],
        id="merge-of-equal-value-is-a-no-op",
    ),
    pytest.param(
        {"op": "set", "path": "/spec/suspend", "value": True},
        [{"op": "add", "path": "/spec/suspend", "value": True}],
        id="set-adds-missing-field",
    ),
    pytest.param(
        {"op": "default", "path": "/metadata/name", "value": "other"},
        [],
        id="default-keeps-existing-value",
    ),
    pytest.param(
        {"op": "set", "path": "/spec/template/metadata/labels/a~1b", "value": "x"},
        [{"op": "add", "path": "/spec/template/metadata", "value": {"labels": {"a/b": "x"}}}],
        id="set-builds-nested-parents-in-one-op",
    ),
    pytest.param(
        {
            "op": "upsert",
            "path": "/spec/template/spec/containers/0/env",
            "key": "name",
            "value": {"name": "A", "value": "2"},
        },
        [
            {
                "op": "replace",
                "path": "/spec/template/spec/containers/0/env/0",
                "value": {"name": "A", "value": "2"},
            }
        ],
        id="upsert-replaces-item-with-same-key",
    ),
    pytest.param(
        {
            "op": "upsert",
            "path": "/spec/template/spec/containers/0/env",
            "key": "name",
            "value": {"name": "B", "value": "2"},
        },
        [
            {
                "op": "add",
                "path": "/spec/template/spec/containers/0/env/-",
                "value": {"name": "B", "value": "2"},
            }
        ],
        id="upsert-appends-new-item",
    ),
    pytest.param(
        {
            "op": "append",
            "path": "/spec/template/spec/tolerations",
            "value": {"key": "k", "operator": "Exists"},
        },
        [
            {
                "op": "add",
                "path": "/spec/template/spec/tolerations",
                "value": [{"key": "k", "operator": "Exists"}],
            }
        ],
        id="append-creates-list",
    ),
    pytest.param(
        {
            "op": "requireNodeExpression",
            "path": "/spec/template/spec",
            "value": {"key": "pool", "operator": "In", "values": ["t"]},
        },
        [
            {
                "op": "add",
                "path": "/spec/template/spec/affinity",
                "value": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["t"]}]}
                            ]
                        }
                    }
                },
            }
        ],
        id="require-node-expression-creates-term",
    ),
]


@pytest.mark.parametrize(("edit", "expected_ops"), CASES)
def test_edit_produces_ops_that_apply_and_are_idempotent(
    edit: dict[str, Any], expected_ops: list[Any]
) -> None:
    original = copy.deepcopy(POD_TEMPLATE)
    mutated, ops = apply_edits(POD_TEMPLATE, [edit])
    assert ops == expected_ops
    assert original == POD_TEMPLATE, "the incoming object must never change"
    assert jsonpatch.apply_patch(original, ops) == mutated
    again, second = apply_edits(mutated, [edit])
    assert second == []
    assert again == mutated


def test_required_node_expression_is_added_to_every_term_that_lacks_the_key() -> None:
    obj = {
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["x"]}]},
                        ]
                    }
                }
            }
        }
    }
    expr = {"key": "pool", "operator": "In", "values": ["t"]}
    mutated, ops = apply_edits(obj, [{"op": "requireNodeExpression", "path": "/spec", "value": expr}])
    terms = mutated["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert terms[0]["matchExpressions"][-1] == expr
    assert terms[1]["matchExpressions"] == [{"key": "pool", "operator": "In", "values": ["x"]}], (
        "user's own choice kept"
    )
    assert len(ops) == 1


@pytest.mark.parametrize(
    "value",
    [
        pytest.param({"path": "/a"}, id="missing-op"),
        pytest.param({"op": "delete", "path": "/a"}, id="unknown-op"),
        pytest.param({"op": "set", "path": 3}, id="path-not-a-string"),
        pytest.param("text", id="not-a-map"),
    ],
)
def test_malformed_edits_are_refused(value: Any) -> None:
    with pytest.raises(EditError):
        flatten_edits([value])


def test_nested_lists_from_map_are_flattened() -> None:
    edits = flatten_edits(
        [[{"op": "set", "path": "/a", "value": 1}], [[{"op": "set", "path": "/b", "value": 2}]]]
    )
    assert [e["path"] for e in edits] == ["/a", "/b"]


# each element's id says why it is not there to write below
MISSING_ELEMENTS = {"past-the-end": "5", "dash": "-", "not-an-index": "x", "null-element": "1"}


@pytest.mark.parametrize("element", MISSING_ELEMENTS.values(), ids=MISSING_ELEMENTS.keys())
def test_writing_below_a_missing_list_element_is_an_error(element: str) -> None:
    obj = {"spec": {"containers": [{"name": "a"}, None]}}
    with pytest.raises(EditError, match=f"^/spec/containers/{element}: no such list element"):
        apply_edits(obj, [{"op": "set", "path": f"/spec/containers/{element}/env/0/value", "value": "x"}])
    assert obj == {"spec": {"containers": [{"name": "a"}, None]}}


def test_writing_below_a_scalar_is_an_error() -> None:
    with pytest.raises(EditError, match="not an object"):
        apply_edits({"metadata": "x"}, [{"op": "set", "path": "/metadata/labels/a", "value": "b"}])


@pytest.mark.parametrize(
    ("env", "expected_ops"),
    [
        pytest.param(
            ["not-a-map", {"name": "B", "value": "1"}, 7],
            [{"op": "replace", "path": "/env/1", "value": {"name": "B", "value": "2"}}],
            id="items-that-are-not-maps-are-passed-over",
        ),
        pytest.param(
            [{"value": "x"}, {"name": "B", "value": "1"}, {"name": "B", "value": "0"}],
            [{"op": "replace", "path": "/env/1", "value": {"name": "B", "value": "2"}}],
            id="the-first-item-with-the-key-is-replaced",
        ),
        pytest.param([{"name": "B", "value": "2"}], [], id="an-equal-item-is-left-alone"),
        pytest.param(
            [None, {"name": "A"}],
            [{"op": "add", "path": "/env/-", "value": {"name": "B", "value": "2"}}],
            id="no-item-with-the-key-appends",
        ),
    ],
)
def test_upsert_finds_the_item_by_key(env: list[Any], expected_ops: list[Any]) -> None:
    edit = {"op": "upsert", "path": "/env", "key": "name", "value": {"name": "B", "value": "2"}}
    obj = {"env": env}
    mutated, ops = apply_edits(obj, [edit])
    assert ops == expected_ops
    assert jsonpatch.apply_patch(copy.deepcopy(obj), ops) == mutated


# Keys holding "/" and "~" are spelled escaped in the ops' paths (RFC 6901), whichever op writes them.
ESCAPED: dict[str, Any] = {
    "metadata": {"labels": {"a/b": "1", "c~d": "2"}, "annotations": {"x/y": "z"}},
    "spec": {"pools": {"gpu/a100": {"env": [{"name": "A", "value": "1"}]}}},
}

POOL_ENV = "/spec/pools/gpu~1a100/env"


def upsert_env(path: str, name: str, value: str) -> dict[str, Any]:
    """The edit that makes the env list at `path` hold the variable `name` with `value`."""
    return {"op": "upsert", "path": path, "key": "name", "value": {"name": name, "value": value}}


@pytest.mark.parametrize(
    ("edit", "expected_ops"),
    [
        pytest.param(
            {"op": "merge", "path": "/metadata/labels", "value": {"a/b": "9", "e~f/g": "3"}},
            [
                {"op": "add", "path": "/metadata/labels/a~1b", "value": "9"},
                {"op": "add", "path": "/metadata/labels/e~0f~1g", "value": "3"},
            ],
            id="merge-escapes-each-key",
        ),
        pytest.param(
            {"op": "set", "path": "/metadata/labels/c~0d", "value": "5"},
            [{"op": "add", "path": "/metadata/labels/c~0d", "value": "5"}],
            id="set-on-an-escaped-tilde",
        ),
        pytest.param(
            {"op": "remove", "path": "/metadata/annotations/x~1y"},
            [{"op": "remove", "path": "/metadata/annotations/x~1y"}],
            id="remove-an-escaped-slash",
        ),
        pytest.param(
            upsert_env(POOL_ENV, "A", "2"),
            [{"op": "replace", "path": f"{POOL_ENV}/0", "value": {"name": "A", "value": "2"}}],
            id="upsert-replaces-below-an-escaped-key",
        ),
        pytest.param(
            upsert_env(POOL_ENV, "B", "2"),
            [{"op": "add", "path": f"{POOL_ENV}/-", "value": {"name": "B", "value": "2"}}],
            id="upsert-appends-below-an-escaped-key",
        ),
        pytest.param(
            {"op": "append", "path": "/spec/pools/gpu~1a100/tolerations", "value": {"key": "k"}},
            [{"op": "add", "path": "/spec/pools/gpu~1a100/tolerations", "value": [{"key": "k"}]}],
            id="append-creates-a-list-below-an-escaped-key",
        ),
        pytest.param(
            {"op": "set", "path": "/spec/pools/tpu~1v5/nodeSelector/pool", "value": "x"},
            [{"op": "add", "path": "/spec/pools/tpu~1v5", "value": {"nodeSelector": {"pool": "x"}}}],
            id="set-builds-parents-below-an-escaped-key",
        ),
    ],
)
def test_escaped_paths_are_spelled_escaped_in_the_ops(edit: dict[str, Any], expected_ops: list[Any]) -> None:
    original = copy.deepcopy(ESCAPED)
    mutated, ops = apply_edits(ESCAPED, [edit])
    assert ops == expected_ops
    assert original == ESCAPED, "the incoming object must never change"
    assert jsonpatch.apply_patch(original, ops) == mutated
    assert apply_edits(mutated, [edit])[1] == []


TWO_CONTAINERS: dict[str, Any] = {
    "metadata": {"labels": {"app": "train"}},
    "spec": {
        "containers": [
            {"name": "trainer", "env": [{"name": f"V{i}", "value": str(i)} for i in range(40)]},
            {"name": "sidecar"},
        ],
        "volumes": [{"name": "data"}],
    },
}
CHECKPOINT = [
    upsert_env(f"/spec/containers/{c}/env", n, v)
    for c in (0, 1)
    for n, v in (("CKPT_URI", "s3://b/run"), ("V3", "changed"), ("CKPT_SECONDS", "1800"))
] + [{"op": "merge", "path": "/metadata/labels", "value": {"trainguard.dev/class": "B", "app": "train"}}]


@pytest.mark.parametrize(
    "edits",
    [
        pytest.param(CHECKPOINT, id="in-order"),
        pytest.param(list(reversed(CHECKPOINT)), id="reversed"),
        pytest.param(CHECKPOINT + CHECKPOINT, id="each-edit-twice"),
    ],
)
def test_many_edits_copy_only_what_they_write(edits: list[dict[str, Any]]) -> None:
    original = copy.deepcopy(TWO_CONTAINERS)
    mutated, ops = apply_edits(TWO_CONTAINERS, edits)
    assert original == TWO_CONTAINERS, "the incoming object must never change"
    assert jsonpatch.apply_patch(original, ops) == mutated
    assert len(ops) == 7, ops  # 2 new variables and 1 changed one per container, 1 new label
    assert mutated["spec"]["volumes"] is TWO_CONTAINERS["spec"]["volumes"], "an untouched subtree is shared"
    assert apply_edits(mutated, edits)[1] == [], "a second pass changes nothing"


@pytest.mark.parametrize(
    "failing",
    [
        pytest.param({"op": "set", "path": "/metadata/labels/app/x", "value": "1"}, id="below-a-string"),
        pytest.param(
            {"op": "set", "path": "/spec/containers/5/name", "value": "x"}, id="no-such-list-element"
        ),
        pytest.param({"op": "append", "path": "/metadata/labels", "value": "x"}, id="append-to-a-map"),
        pytest.param(
            {"op": "upsert", "path": "/spec/containers/0/env", "value": {"x": 1}}, id="upsert-without-key"
        ),
    ],
)
def test_rollback_restores_the_checkpoint_and_leaves_what_it_shared_alone(failing: dict[str, Any]) -> None:
    original = copy.deepcopy(TWO_CONTAINERS)
    patcher = Patcher(TWO_CONTAINERS)
    for edit in CHECKPOINT[:3]:  # the first policy: container 0's variables
        patcher.apply(edit)
    first_doc, first_ops = copy.deepcopy(patcher.doc), list(patcher.ops)
    state = patcher.checkpoint()
    patcher.apply(CHECKPOINT[-1])  # the second policy writes a label, then fails
    patcher.apply(CHECKPOINT[3])
    with pytest.raises(EditError):
        patcher.apply(failing)
    patcher.rollback(state)
    assert patcher.doc == first_doc and patcher.ops == first_ops
    assert original == TWO_CONTAINERS, "the incoming object must never change"
    patcher.apply(CHECKPOINT[3])  # writes after a rollback copy again: the checkpoint stays intact
    assert state[0] == first_doc

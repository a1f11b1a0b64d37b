"""What the engine hands CEL: only the paths the policies' sources read, whole where used bare."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.reads import reads, trim

VARIABLES = ("object", "workload", "params")


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        pytest.param(
            ["workload.gang.queueName != ''"], {"workload": {"gang": {"queueName": {}}}}, id="a-chain"
        ),
        pytest.param(
            ["workload.groups.all(g, g.replicas > 0)"],
            {"workload": {"groups": {}}},
            id="a-method-ends-the-chain",
        ),
        pytest.param(['workload["class"] == "A"'], {"workload": {"class": {}}}, id="index-by-a-literal-key"),
        pytest.param(["object == oldObject"], {"object": {}}, id="bare-use-reads-everything"),
        pytest.param(["object.?spec.orValue(1)"], {"object": {}}, id="optional-field-reads-everything"),
        pytest.param(
            ["workload.gang.queueName", "workload.gang"],
            {"workload": {"gang": {}}},
            id="a-shorter-chain-wins",
        ),
        pytest.param(["'workload.name is ' + params.x"], {"params": {"x": {}}}, id="strings-are-not-reads"),
        pytest.param(["1 // workload.name\n+ 1"], {}, id="comments-are-not-reads"),
        pytest.param(
            ["size(object.metadata.labels) > 0"], {"object": {"metadata": {"labels": {}}}}, id="an-argument"
        ),
        pytest.param(["variables.workload.x"], {}, id="a-field-named-like-a-variable"),
    ],
)
def test_reads_finds_the_paths_each_variable_is_read_at(sources: list[str], expected: dict[str, Any]) -> None:
    assert reads(sources, VARIABLES) == expected


@pytest.mark.parametrize(
    ("value", "tree", "expected"),
    [
        pytest.param(
            {"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": {}}}, {"a": {"b": 1}}, id="keeps-read-paths"
        ),
        pytest.param({"a": [1, 2]}, {"a": {"x": {}}}, {"a": [1, 2]}, id="a-list-is-kept-whole"),
        pytest.param({"a": 1}, {"missing": {}}, {}, id="absent-stays-absent"),
        pytest.param({"a": 1}, {}, {"a": 1}, id="empty-tree-is-whole"),
    ],
)
def test_trim_keeps_only_the_paths_read(value: Any, tree: Any, expected: Any) -> None:
    assert trim(value, tree) == expected

"""What the engine hands CEL: only the paths the policies' sources read, whole where used bare."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.reads import PolicySources, policy_reads, reads, trim

VARIABLES = ("object", "workload", "params")


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        pytest.param(
            ["workload.gang.queueName != ''"], {"workload": {"gang": {"queueName": {}}}}, id="a-chain"
        ),
        pytest.param(
            ["workload.groups.join(',')"], {"workload": {"groups": {}}}, id="a-method-reads-the-whole-value"
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
        # Lists iterated by a macro keep, of each element, what the macro's argument reads.
        pytest.param(
            ["workload.groups.all(g, g.replicas > 0)"],
            {"workload": {"groups": {"*": {"replicas": {}}}}},
            id="a-macro-reads-element-fields",
        ),
        pytest.param(
            ["workload.groups.filter(g, g.patchable).map(g, g.containers.map(c, c.pointer))"],
            {"workload": {"groups": {"*": {"patchable": {}, "containers": {"*": {"pointer": {}}}}}}},
            id="nested-macros-and-a-filter-followed-by-a-map",
        ),
        pytest.param(
            ["workload.groups.map(g, g.containers.map(g, g.name))"],
            {"workload": {"groups": {"*": {"containers": {"*": {"name": {}}}}}}},
            id="an-inner-variable-shadows-the-outer-one",
        ),
        pytest.param(
            ["workload.groups.exists(workload, workload.name == 'x') && workload.kind == 'Pod'"],
            {"workload": {"groups": {"*": {"name": {}}}, "kind": {}}},
            id="a-macro-variable-shadows-a-cel-variable-only-inside",
        ),
        pytest.param(
            ["workload.groups.map(g, g)"], {"workload": {"groups": {"*": {}}}}, id="a-bare-element-is-whole"
        ),
        pytest.param(
            ["workload.groups.exists(g, g in object.spec.x)"],
            {"workload": {"groups": {"*": {}}}, "object": {"spec": {"x": {}}}},
            id="an-element-used-with-in-is-whole",
        ),
        pytest.param(
            ["workload.groups.exists(g, g.name == 'g.replicas') // g.gpus"],
            {"workload": {"groups": {"*": {"name": {}}}}},
            id="literals-and-comments-in-a-macro-are-not-reads",
        ),
        pytest.param(
            ["workload.groups.filter(g, g.name == 'w')[0].replicas"],
            {"workload": {"groups": {"*": {"name": {}, "replicas": {}}}}},
            id="a-literal-index-reads-an-element",
        ),
        pytest.param(
            ["workload.groups[i].replicas"],
            {"workload": {"groups": {}}},
            id="any-other-index-reads-everything",
        ),
        pytest.param(
            ["workload.groups.filter(g, g.replicas > 1) == []"],
            {"workload": {"groups": {}}},
            id="a-filter-result-used-as-it-is-is-whole",
        ),
        pytest.param(
            ["workload.groups.size() > 1"],
            {"workload": {"groups": {"*": {"": {}}}}},
            id="a-size-reads-no-element",
        ),
        pytest.param(
            ["workload.labels.all(k, k != '')"],
            {"workload": {"labels": {"*": {}}}},
            id="a-macro-over-a-map-iterates-its-keys",
        ),
        pytest.param(
            ["workload.groups.all(i, g, g.replicas > 0)"],
            {"workload": {"groups": {}}},
            id="a-two-variable-macro-reads-everything",
        ),
    ],
)
def test_reads_finds_the_paths_each_variable_is_read_at(sources: list[str], expected: dict[str, Any]) -> None:
    assert reads(sources, VARIABLES) == expected


# Of a map tested or indexed by a literal key, only that key is kept; any other use keeps it whole.
LITERAL_KEYS = [
    pytest.param('"a/b" in workload.labels', {"labels": {"a/b": {}}}, id="in-a-literal"),
    pytest.param('workload.labels["a/b"] == "x"', {"labels": {"a/b": {}}}, id="index-a-literal"),
    pytest.param(
        'workload.labels["a/b"].startsWith("y")', {"labels": {"a/b": {}}}, id="a-method-on-the-value"
    ),
    pytest.param("has(workload.labels.ab)", {"labels": {"ab": {}}}, id="has-a-field"),
    pytest.param(
        '"a/b" in workload.labels ? workload.labels["a/b"] : workload.annotations["c"]',
        {"labels": {"a/b": {}}, "annotations": {"c": {}}},
        id="in-then-index",
    ),
    pytest.param('!("a/b" in workload.labels)', {"labels": {"a/b": {}}}, id="negated-in-parentheses"),
    pytest.param('f(1, "a/b" in workload.labels)', {"labels": {"a/b": {}}}, id="an-argument"),
    pytest.param("x.all(k, k in workload.labels)", {"labels": {}}, id="a-computed-key-keeps-it-whole"),
    pytest.param("workload.labels[workload.kind]", {"labels": {}, "kind": {}}, id="a-computed-index"),
    pytest.param('"a" + "b" in workload.labels', {"labels": {}}, id="a-concatenated-key"),
    pytest.param('x == "a" in workload.labels', {"labels": {}}, id="a-comparison-is-the-key"),
    pytest.param('!"a" in workload.labels', {"labels": {}}, id="a-negated-literal-is-the-key"),
    pytest.param('"a" in workload.labels + x', {"labels": {}}, id="the-operand-goes-on"),
    pytest.param('"a" in workload.labels.?b', {"labels": {}}, id="an-optional-field-after"),
    pytest.param('"a" in workload.labels[x]', {"labels": {}}, id="an-index-after"),
    pytest.param("size(workload.labels) > 0", {"labels": {}}, id="size"),
    pytest.param("workload.labels.exists(k, k == 'a')", {"labels": {"*": {}}}, id="iterated"),
    pytest.param("workload.labels == {'a': 'b'}", {"labels": {}}, id="equality"),
    pytest.param('f(workload.labels)["a"]', {"labels": {}}, id="passed-along"),
    pytest.param('"a\\"b" in workload.labels', {"labels": {}}, id="an-escape-in-the-key"),
    pytest.param('"*" in workload.labels', {"labels": {}}, id="the-element-marker-as-a-key"),
    pytest.param("workload.labels[''] == ''", {"labels": {}}, id="the-empty-key"),
    pytest.param("r'a' in workload.labels", {"labels": {}}, id="a-raw-string"),
    pytest.param(
        ['"a" in workload.labels', "size(workload.labels) > 1"],
        {"labels": {}},
        id="another-expression-sizing-it",
    ),
]


@pytest.mark.parametrize(("source", "expected"), LITERAL_KEYS)
def test_a_map_read_by_literal_keys_keeps_only_them(
    source: str | list[str], expected: dict[str, Any]
) -> None:
    sources = [source] if isinstance(source, str) else source
    assert reads(sources, ["workload"]) == {"workload": expected}


@pytest.mark.parametrize(("source", "expected"), LITERAL_KEYS)
@pytest.mark.parametrize("backend", ["cel-expr-python", "cel-python"])
def test_an_expression_decides_alike_on_the_trimmed_value(
    source: str | list[str], expected: dict[str, Any], backend: str
) -> None:
    # What the analysis keeps must be enough: each expression's value (or its error) on the
    # trimmed `workload` is its value on the whole one.
    from webhook.engine.cel import CelEvalError, make_backend

    be = make_backend(backend)
    whole = {"labels": {"a/b": "yes", "a": "1", "ab": "2", "*": "3", "": "4", "c": "5"}, "kind": "a"}
    whole["annotations"] = {"c": "x", "a/b": "y"}
    sources = [source] if isinstance(source, str) else source
    tree = reads(sources, ["workload"])["workload"]
    for text in sources:
        try:
            program = be.compile(text)
        except Exception:  # a made-up function (f): the reading above is what counts
            continue

        def run(workload: Any, program: Any = program) -> Any:
            data = {"workload": workload, "x": ["a"]}
            try:
                return program.evaluate(be.activation(data))
            except CelEvalError:
                return "error"

        assert run(trim(whole, tree)) == run(whole), text


@pytest.mark.parametrize(
    ("value", "tree", "expected"),
    [
        pytest.param(
            {"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": {}}}, {"a": {"b": 1}}, id="keeps-read-paths"
        ),
        pytest.param({"a": [1, 2]}, {"a": {"x": {}}}, {"a": [1, 2]}, id="a-list-read-by-a-field-is-whole"),
        pytest.param(
            {"a": [{"b": 1, "c": 2}, {"b": 3}]},
            {"a": {"*": {"b": {}}}},
            {"a": [{"b": 1}, {"b": 3}]},
            id="list-elements-keep-their-read-paths",
        ),
        pytest.param(
            {"a": {"k": {"b": 1}}},
            {"a": {"*": {"b": {}}}},
            {"a": {"k": {"b": 1}}},
            id="an-iterated-map-is-whole",
        ),
        pytest.param(
            {"a": [{"b": 1}]}, {"a": {"*": {"": {}}}}, {"a": [{}]}, id="sized-elements-keep-nothing"
        ),
        pytest.param({"a": 1}, {"missing": {}}, {}, id="absent-stays-absent"),
        pytest.param({"a": 1}, {}, {"a": 1}, id="empty-tree-is-whole"),
    ],
)
def test_trim_keeps_only_the_paths_read(value: Any, tree: Any, expected: Any) -> None:
    assert trim(value, tree) == expected


@pytest.mark.parametrize(
    ("variables", "expressions", "expected"),
    [
        pytest.param(
            [("big", "workload.groups.filter(g, g.replicas > 1)")],
            ["variables.big.size() == 0", "variables.big.map(g, g.name).join(', ')"],
            {"workload": {"groups": {"*": {"replicas": {}, "name": {}}}}},
            id="a-variable-holding-filtered-elements",
        ),
        pytest.param(
            [("big", "workload.kind == 'Pod' ? [] : workload.groups.filter(g, g.replicas > 1)")],
            ["variables.big[0].fieldPrefix"],
            {"workload": {"kind": {}, "groups": {"*": {"replicas": {}, "fieldPrefix": {}}}}},
            id="behind-a-guard-that-gives-an-empty-list",
        ),
        pytest.param(
            [("big", "workload.groups.filter(g, g.replicas > 1)")],
            ["string(variables.big)"],
            {"workload": {"groups": {}}},
            id="a-variable-used-bare-is-whole",
        ),
        pytest.param(
            [("big", "workload.groups.filter(g, g.replicas > 1)")],
            ["variables.size() > 0"],
            {"workload": {"groups": {}}},
            id="the-variables-map-used-whole",
        ),
        pytest.param(
            [("big", "workload.groups.filter(g, g.replicas > 1) + []")],
            ["variables.big[0].name"],
            {"workload": {"groups": {}}},
            id="a-variable-that-is-more-than-the-elements",
        ),
        pytest.param(
            [("big", "workload.groups.filter(g, g.replicas > 1)"), ("first", "variables.big[0]")],
            ["variables.first.containers.map(c, c.name)"],
            {"workload": {"groups": {"*": {"replicas": {}, "containers": {"*": {"name": {}}}}}}},
            id="a-variable-of-a-variable",
        ),
    ],
)
def test_policy_variables_holding_elements_are_followed(
    variables: list[tuple[str, str]], expressions: list[str], expected: dict[str, Any]
) -> None:
    assert policy_reads([PolicySources(variables, expressions)], VARIABLES) == expected


def test_a_variable_name_is_followed_only_in_its_own_policy() -> None:
    policies = [
        PolicySources([("x", "workload.groups.filter(g, g.replicas > 1)")], ["variables.x.size() > 0"]),
        PolicySources([], ["variables.x[0].name == ''"]),  # another policy's variable: not this list
    ]
    assert policy_reads(policies, VARIABLES) == {"workload": {"groups": {"*": {"replicas": {}}}}}


TORCHRUN_JOB: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "llm", "namespace": "ml", "labels": {"team": "a"}},
    "spec": {
        "pytorchReplicaSpecs": {
            "Worker": {
                "replicas": 2,
                "template": {
                    "spec": {
                        "terminationGracePeriodSeconds": 90,
                        "containers": [
                            {
                                "name": "trainer",
                                "command": ["torchrun", "--nnodes=2", "--nproc-per-node=8", "train.py"],
                                "resources": {"limits": {"nvidia.com/gpu": 8}},
                            },
                            {"name": "sidecar"},
                        ],
                    }
                },
            }
        }
    },
}


def _workloads() -> list[Any]:
    from tests.conftest import corpus_files
    from webhook.config import load_config
    from webhook.documents import read_manifests
    from webhook.workloads import AdaptContext, build_workload

    ctx = AdaptContext(config=load_config(), runtimes={}, priority_classes={}, namespace="default")
    objects = [TORCHRUN_JOB] + [d.data for d in read_manifests([str(p) for p in corpus_files()])]
    out = []
    for obj in objects:
        try:
            workload = build_workload(obj, ctx)
        except Exception:  # an object the adapters refuse has no view
            continue
        if workload is not None:
            out.append(workload)
    return out


def _shipped_trees() -> list[Any]:
    from webhook.engine import default_policies_dir, load_policy_set
    from webhook.engine.bindings import policy_sources

    policy_set = load_policy_set([default_policies_dir()], "cel-expr-python")
    return [
        policy_reads(policy_sources(policies), ["workload"]).get("workload", {})
        for policies in (policy_set.mutating, policy_set.validating)
    ]


@pytest.mark.parametrize(
    "tree",
    [
        pytest.param(0, id="shipped-mutations"),
        pytest.param(1, id="shipped-validations"),
        pytest.param({}, id="whole"),
        pytest.param(
            {"groups": {"*": {"fieldPrefix": {}, "containers": {"*": {"name": {}}}}}}, id="elements"
        ),
        pytest.param({"torchrun": {"*": {"containerField": {}, "sources": {"nnodes": {}}}}}, id="torchrun"),
        pytest.param({"torchrun": {"*": {"": {}}}, "groups": {"*": {}}, "labels": {"*": {}}}, id="sized"),
        pytest.param(
            {"gang": {"gaps": {"*": {"field": {}}}}, "elastic": {"min": {}}}, id="optional-and-dicts"
        ),
        pytest.param({"*": {}}, id="the-workload-iterated"),
        pytest.param({"torchrun": {"*": {"*": {}}}}, id="a-torchrun-entry-iterated"),
        pytest.param(
            {"labels": {"kueue.x-k8s.io/queue-name": {}}, "annotations": {"a/b": {}}}, id="literal-keys"
        ),
    ],
)
def test_the_trimmed_view_is_the_whole_view_with_unread_paths_left_out(tree: Any) -> None:
    # What CEL is handed for `workload`: built directly with just the paths read, it must be
    # exactly the whole view trimmed to them, on every workload (a phase index: the shipped
    # policies' own paths).
    from webhook.workloads.model import Workload, compiled_viewer, viewer

    if isinstance(tree, int):
        tree = _shipped_trees()[tree]
    views = viewer(tree), compiled_viewer(Workload, tree)
    for workload in _workloads():
        expected = trim(workload.view(), tree)
        assert [view(workload) for view in views] == [expected, expected], workload.name

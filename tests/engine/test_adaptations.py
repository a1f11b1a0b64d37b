"""What a mutating call leaves for its validating call (engine/adaptations.py): by content, bounded
by bytes and entries, never found by a changed object, and the same decisions as without it."""

from __future__ import annotations

import copy
import random
import threading
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.conftest import corpus_files
from webhook.config import PlatformConfig, load_config
from webhook.context import context_objects
from webhook.documents import read_manifests
from webhook.engine import Adaptations, AdmissionInput, Engine, default_policies_dir, load_policy_set
from webhook.engine.adaptations import facts_digest
from webhook.workloads import AdaptContext, build_workload

# What names.SimpleNameGenerator appends to a generateName.
_SUFFIX_LETTERS = "bcdfghjklmnpqrstvwxz2456789"


def job(name: str = "train", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "labels": dict(labels)},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "t",
                            "image": "x",
                            "command": ["torchrun", "--nnodes=2", "train.py"],
                            "resources": {"limits": {"nvidia.com/gpu": 8}},
                        }
                    ],
                }
            },
        },
    }


def generated_pod(prefix: str = "worker-") -> dict[str, Any]:
    """A Pod as a controller submits it: generateName, no name."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": prefix, "namespace": "ml", "labels": {"app": "train"}},
        "spec": {"containers": [{"name": "t", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
    }


def as_the_api_server_sends(obj: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    """`obj` as the validating call receives it after the mutating call: what a real
    kube-apiserver added between the two calls (tests/e2e/test_adaptation_reuse.py sees it)."""
    rng = random.Random(seed)
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    if "generateName" in meta and "name" not in meta:
        meta["name"] = meta["generateName"][:58] + "".join(rng.choice(_SUFFIX_LETTERS) for _ in range(5))
    meta["uid"] = f"0a35c36a-3e4c-43e5-80e0-5dfc76d5{rng.randrange(16**4):04x}"
    meta["creationTimestamp"] = "2026-12-04T21:21:14Z"
    meta["generation"] = 1
    meta["resourceVersion"] = str(rng.randrange(1, 10**6))
    out["status"] = {"phase": "Pending", "qosClass": "Burstable"} if out["kind"] == "Pod" else {}
    return out


# A field manager's record, as the API server keeps it in metadata.managedFields
MANAGED_FIELDS = {
    "manager": "kubectl-create",
    "operation": "Update",
    "apiVersion": "v1",
    "time": "2026-12-04T21:21:14Z",
    "fieldsType": "FieldsV1",
    "fieldsV1": {"f:spec": {"f:containers": {'k:{"name":"t"}': {".": {}, "f:image": {}}}}},
}


def size_of(obj: dict[str, Any]) -> int:
    """What the store counts for an object: its JSON text."""
    return len(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS))


class Store:
    """An Adaptations with one adaptation context, and the lookups it reported."""

    def __init__(self, config: PlatformConfig, **bounds: int) -> None:
        self.lookups: list[bool] = []
        self.kept = Adaptations(on_lookup=self.lookups.append, **bounds)
        self.ctx = AdaptContext(config=config, namespace="ml")
        self.facts = facts_digest(config, {}, {})

    def leave(self, obj: dict[str, Any]) -> Any:
        workload = build_workload(obj, self.ctx)
        self.kept.leave(obj, self.ctx, self.facts, workload)
        self.kept.settle()
        return workload

    def found(self, obj: dict[str, Any]) -> bool:
        self.kept.adapt(obj, self.ctx, self.facts)
        return self.lookups[-1]


@pytest.fixture
def store(config: PlatformConfig) -> Store:
    return Store(config)


def test_the_validating_call_finds_what_the_mutating_call_left(store: Store) -> None:
    left = store.leave(job())
    assert store.kept.adapt(as_the_api_server_sends(job()), store.ctx, store.facts) is left
    assert store.lookups == [True]


def test_a_generated_name_is_found_and_named_as_the_api_server_named_it(store: Store) -> None:
    store.leave(generated_pod())
    arrived = as_the_api_server_sends(generated_pod())
    workload = store.kept.adapt(arrived, store.ctx, store.facts)
    assert store.lookups == [True]
    assert workload == build_workload(arrived, store.ctx)
    assert workload is not None and workload.name == arrived["metadata"]["name"]


def _changed(change: Any) -> dict[str, Any]:
    obj = job()
    change(obj)
    return obj


def _set(path: str, value: Any) -> Any:
    def change(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = obj
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
        node[last] = value

    return change


@pytest.mark.parametrize(
    "changed",
    [
        pytest.param(_changed(_set("metadata.labels.trainguard.dev/tier", "preemptible")), id="a-label"),
        pytest.param(_changed(_set("metadata.annotations", {"a": "b"})), id="an-annotation"),
        pytest.param(_changed(_set("metadata.name", "other")), id="the-name"),
        pytest.param(_changed(_set("spec.parallelism", 3)), id="the-size"),
        pytest.param(
            _changed(lambda o: o["spec"]["template"]["spec"]["containers"][0]["command"].append("--x")),
            id="a-launch-word",
        ),
        pytest.param(
            _changed(_set("metadata.ownerReferences", [{"kind": "JobSet", "name": "j"}])), id="an-owner"
        ),
        pytest.param(_changed(lambda o: o.update(kind="Deployment", apiVersion="apps/v1")), id="the-kind"),
    ],
)
def test_a_changed_object_is_never_found(store: Store, changed: dict[str, Any]) -> None:
    store.leave(job())
    assert not store.found(as_the_api_server_sends(changed))


def test_the_field_managers_record_is_left_out(store: Store) -> None:
    """metadata.managedFields: no adaptation reads them, and half a real Pod's text is theirs."""
    store.leave(job())
    arrived = as_the_api_server_sends(job())
    arrived["metadata"]["managedFields"] = [MANAGED_FIELDS]
    assert store.found(arrived)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("worker-abcde", id="not-generated-letters"),  # vowels are never generated
        pytest.param("worker-bcdfgh", id="six-letters"),
        pytest.param("trainer-bcdfg", id="another-prefix"),
    ],
)
def test_only_a_name_the_api_server_could_have_generated_is_left_out(store: Store, name: str) -> None:
    store.leave(generated_pod())
    arrived = as_the_api_server_sends(generated_pod())
    arrived["metadata"]["name"] = name
    assert not store.found(arrived)


def test_the_namespace_is_part_of_the_key(store: Store, config: PlatformConfig) -> None:
    store.leave(job())
    elsewhere = AdaptContext(config=config, namespace="other")
    unnamespaced = job()
    del unnamespaced["metadata"]["namespace"]
    store.kept.adapt(unnamespaced, elsewhere, store.facts)
    assert store.lookups == [False]


def test_the_facts_of_the_engine_are_part_of_the_key(tmp_path: Path) -> None:
    """Engines rebuilt on other facts share the server's store, not its answers."""
    (tmp_path / "other.yaml").write_text("topology:\n  rackKey: example.com/rack\n")
    runtime = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "torch"},
        "spec": {},
    }
    config = load_config()
    digests = {
        facts_digest(config, {}, {}),
        facts_digest(config, {(None, "torch"): runtime}, {}),
        facts_digest(config, {}, {"training-high": 1000}),
        facts_digest(load_config(tmp_path / "other.yaml"), {}, {}),
    }
    assert len(digests) == 4
    assert facts_digest(config, {(None, "torch"): runtime}, {}) == facts_digest(
        load_config(), {(None, "torch"): copy.deepcopy(runtime)}, {}
    )


def test_the_byte_bound_drops_the_least_recently_used(config: PlatformConfig) -> None:
    one = size_of(job("a0"))
    store = Store(config, max_bytes=5 * one)  # room for 5 jobs of this size, not 6
    for i in range(5):
        store.leave(job(f"a{i}"))
    assert store.found(job("a0"))  # a0 is now the most recently used
    store.leave(job("a5"))
    assert store.kept.bytes <= 5 * one
    assert [store.found(job(f"a{i}")) for i in range(6)] == [True, False, True, True, True, True]


def test_the_entry_bound_drops_the_oldest(config: PlatformConfig) -> None:
    store = Store(config, max_entries=3)
    for i in range(4):
        store.leave(job(f"a{i}"))
    assert store.kept.entries == 3
    assert [store.found(job(f"a{i}")) for i in range(4)] == [False, True, True, True]


def test_an_object_past_a_quarter_of_the_bound_is_not_kept(config: PlatformConfig) -> None:
    small = Store(config, max_bytes=3 * size_of(job()))
    small.leave(job())
    assert small.kept.entries == 0 and not small.found(job())


def test_a_store_of_zero_bytes_keeps_nothing_and_counts_nothing(config: PlatformConfig) -> None:
    store = Store(config, max_bytes=0)
    store.leave(job())
    workload = store.kept.adapt(job(), store.ctx, store.facts)
    assert workload == build_workload(job(), store.ctx)
    assert store.lookups == [] and store.kept.entries == 0


def test_an_object_that_cannot_be_adapted_is_left_to_its_validating_call(store: Store) -> None:
    broken = job()
    broken["spec"]["parallelism"] = "many"
    store.kept.leave(broken, store.ctx, store.facts)
    store.kept.settle()  # never raises
    assert store.kept.entries == 0
    with pytest.raises(Exception, match="spec.parallelism"):
        store.kept.adapt(broken, store.ctx, store.facts)


def test_deciding_threads_share_one_store(config: PlatformConfig) -> None:
    """Eight threads leave and look up at once, with room for fewer objects than they use: every
    lookup gets its own object's adaptation, and the bounds hold."""
    objects = [job(f"t{i}", team=str(i % 3)) for i in range(24)]
    expected = [build_workload(o, AdaptContext(config=config, namespace="ml")) for o in objects]
    store = Store(config, max_bytes=10 * size_of(objects[0]), max_entries=8)
    start = threading.Barrier(8)
    wrong: list[str] = []

    def decide(worker: int) -> None:
        start.wait(timeout=60)
        for round_ in range(40):
            i = (worker * 7 + round_) % len(objects)
            ctx = AdaptContext(config=config, namespace="ml", containers={})
            store.kept.leave(objects[i], ctx, store.facts)
            store.kept.settle()
            got = store.kept.adapt(as_the_api_server_sends(objects[i], round_), store.ctx, store.facts)
            if got is None or got != expected[i]:
                wrong.append(objects[i]["metadata"]["name"])

    threads = [threading.Thread(target=decide, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert wrong == []
    assert store.kept.entries <= 8 and store.kept.bytes <= 10 * size_of(objects[0])
    assert len(store.lookups) == 8 * 40 and any(store.lookups)


# -- the engine: a mutating call, then a validating call on what the API server sends back ----------


def _corpus_docs() -> list[Any]:
    return [pytest.param(path, id=str(path.relative_to(path.parents[1]))) for path in corpus_files()]


@pytest.fixture(scope="module")
def policies() -> Any:
    return load_policy_set([default_policies_dir()], "cel-expr-python")


@pytest.mark.skipif(not corpus_files(), reason="the shared corpus is not beside this checkout")
@pytest.mark.parametrize("path", _corpus_docs())
def test_the_pair_decides_the_corpus_as_without_reuse(path: Path, policies: Any) -> None:
    docs = read_manifests([str(path)])
    runtimes, priority_classes = context_objects(d.data for d in docs)
    config = load_config()
    lookups: list[bool] = []
    reusing = Engine(
        policies,
        config,
        runtimes=runtimes,
        priority_classes=priority_classes,
        adaptations=Adaptations(on_lookup=lookups.append),
    )
    plain = Engine(policies, config, runtimes=runtimes, priority_classes=priority_classes)
    decided = 0
    for doc in docs:
        mutating = reusing.decide(AdmissionInput(object=doc.data, namespace="team"), validate=False)
        assert (
            mutating.patch == plain.decide(AdmissionInput(doc.data, namespace="team"), validate=False).patch
        )
        if mutating.skipped_reason is not None:
            continue
        reusing.settle()
        assert mutating.mutated is not None
        arrived = as_the_api_server_sends(mutating.mutated)
        validating = reusing.decide(AdmissionInput(object=arrived, namespace="team"), mutate=False)
        alone = plain.decide(AdmissionInput(object=copy.deepcopy(arrived), namespace="team"), mutate=False)
        assert (validating.allowed, validating.results) == (alone.allowed, alone.results), doc.source
        assert validating.workload == alone.workload, doc.source
        decided += 1
    assert lookups == [True] * decided


@pytest.mark.skipif(not corpus_files(), reason="the shared corpus is not beside this checkout")
def test_adaptations_read_nothing_the_api_server_adds_and_the_name_only_as_the_name() -> None:
    """What the key leaves out (adaptations.py) must not change an adaptation, but the name."""
    config = load_config()
    for path in corpus_files():
        docs = read_manifests([str(path)])
        runtimes, priority_classes = context_objects(d.data for d in docs)
        ctx = AdaptContext(config=config, runtimes=runtimes, priority_classes=priority_classes, namespace="t")
        for doc in docs:
            if not isinstance(doc.data.get("metadata"), dict):
                continue
            original = copy.deepcopy(doc.data)
            original["metadata"].pop("name", None)
            original["metadata"]["generateName"] = "gen-"
            as_sent = as_the_api_server_sends(original, seed=len(doc.source))
            as_sent["metadata"]["managedFields"] = [MANAGED_FIELDS]  # the key leaves them out too
            before, after = build_workload(original, ctx), build_workload(as_sent, ctx)
            if before is None:
                assert after is None, doc.source
                continue
            assert after is not None and after.name == as_sent["metadata"]["name"], doc.source
            assert before.name == "gen-", doc.source
            assert after == type(before)(**{**_fields(before), "name": after.name}), doc.source


def _fields(workload: Any) -> dict[str, Any]:
    return {name: getattr(workload, name) for name in workload.__dataclass_fields__}


def test_an_engine_without_a_store_adapts_each_call_afresh(policies: Any) -> None:
    engine = Engine(policies, load_config())
    first = engine.decide(AdmissionInput(object=job()), validate=False)
    engine.settle()
    assert engine.decide(AdmissionInput(object=job()), mutate=False).workload is not first.workload

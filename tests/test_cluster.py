"""Cluster caches and self-registration, without an API server: pure event handling and recorded calls."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from kubernetes import client

from webhook import certs
from webhook.cluster import (
    Backoff,
    Registrar,
    Resource,
    WatchCache,
    apply_event,
    cluster_scoped_key,
    name_key,
    namespaced_key,
    object_value,
    priority_value,
    replace_all,
)


def priority_class(name: str | None, value: Any = 1000, rv: str = "1") -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": rv}
    if name is not None:
        meta["name"] = name
    obj: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": meta}
    if value is not None:
        obj["value"] = value
    return obj


HIGH = {"high": 1000}
EVENTS = [
    pytest.param({}, "ADDED", priority_class("high", 1000), HIGH, True, id="added"),
    pytest.param(HIGH, "ADDED", priority_class("high", 1000), HIGH, False, id="added-again-no-change"),
    pytest.param(HIGH, "MODIFIED", priority_class("high", 2000), {"high": 2000}, True, id="modified-value"),
    pytest.param(
        HIGH, "MODIFIED", priority_class("high", 1000, rv="9"), HIGH, False, id="modified-no-change"
    ),
    pytest.param(HIGH, "DELETED", priority_class("high"), {}, True, id="deleted"),
    pytest.param({}, "DELETED", priority_class("high"), {}, False, id="deleted-unknown"),
    pytest.param(HIGH, "MODIFIED", priority_class("high", None), {}, True, id="no-longer-qualifies"),
    pytest.param({}, "ADDED", priority_class("odd", "1000"), {}, False, id="value-not-an-integer"),
    pytest.param({}, "ADDED", priority_class("odd", True), {}, False, id="value-a-boolean"),
    pytest.param({}, "ADDED", priority_class(None), {}, False, id="no-name"),
    pytest.param(HIGH, "BOOKMARK", priority_class(None, rv="42"), HIGH, False, id="bookmark"),
]


@pytest.mark.parametrize(("before", "event", "obj", "after", "changed"), EVENTS)
def test_watch_events_update_the_priority_class_cache(
    before: dict[str, int], event: str, obj: dict[str, Any], after: dict[str, int], changed: bool
) -> None:
    store: dict[Any, Any] = dict(before)
    assert apply_event(store, event, obj, name_key, priority_value) is changed
    assert store == after


def test_a_relist_replaces_the_cache_and_says_whether_it_changed() -> None:
    store: dict[Any, Any] = {"gone": 1, "kept": 2}
    items = [priority_class("kept", 2), priority_class("new", 3)]
    assert replace_all(store, items, name_key, priority_value) is True
    assert store == {"kept": 2, "new": 3}
    assert replace_all(store, items, name_key, priority_value) is False


KEYS = [
    pytest.param(
        namespaced_key, {"metadata": {"name": "torch", "namespace": "ml"}}, ("ml", "torch"), id="namespaced"
    ),
    pytest.param(cluster_scoped_key, {"metadata": {"name": "torch"}}, (None, "torch"), id="cluster-scoped"),
    pytest.param(name_key, {"metadata": {"name": 7}}, None, id="name-not-a-string"),
    pytest.param(name_key, {"metadata": None}, None, id="no-metadata"),
]


@pytest.mark.parametrize(("key", "obj", "expected"), KEYS)
def test_runtimes_are_keyed_as_the_engine_looks_them_up(key: Any, obj: dict[str, Any], expected: Any) -> None:
    assert key(obj) == expected


def test_cached_objects_drop_managed_fields() -> None:
    runtime: dict[str, Any] = {
        "kind": "TrainingRuntime",
        "metadata": {"name": "torch", "managedFields": [{"manager": "x"}]},
    }
    assert object_value(runtime) == {"kind": "TrainingRuntime", "metadata": {"name": "torch"}}
    assert runtime["metadata"]["managedFields"]  # the event's object is left alone


def test_backoff_grows_and_stays_bounded() -> None:
    backoff = Backoff(base=0.5, cap=4.0)
    delays = [backoff.next() for _ in range(40)]
    assert all(0 < d <= 4.0 for d in delays)
    assert max(delays[:1]) <= 0.5 < max(delays[-5:])
    backoff.reset()
    assert backoff.next() <= 0.5


# -- list + watch, driven by a scripted event stream ------------------------------------------------


class Answer:
    """What a kubernetes list/watch call returns with _preload_content=False, reduced to what we read."""

    def __init__(self, payload: bytes, status: int = 200) -> None:
        self.data = payload
        self.status = status
        self.reason = "scripted"

    def stream(self, amt: Any = None, decode_content: bool = False) -> Iterator[bytes]:
        # Split mid-line, as the network does.
        for i in range(0, len(self.data), 7):
            yield self.data[i : i + 7]

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        pass


def listing(rv: str, *items: dict[str, Any]) -> Answer:
    return Answer(
        orjson.dumps({"kind": "PriorityClassList", "metadata": {"resourceVersion": rv}, "items": items})
    )


def watching(*events: tuple[str, dict[str, Any]]) -> Answer:
    return Answer(b"\n".join(orjson.dumps({"type": t, "object": o}) for t, o in events) + b"\n")


class Script:
    """A list function answering from a script; sets the stop event when it runs out."""

    def __init__(self, stop: threading.Event, answers: list[Answer | Exception]) -> None:
        self.stop = stop
        self.answers = answers
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> Answer:
        self.calls.append(kwargs)
        if not self.answers:
            self.stop.set()
            return watching()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def run_script(answers: list[Answer | Exception]) -> tuple[WatchCache, Script, list[dict[Any, Any]]]:
    stop = threading.Event()
    script = Script(stop, answers)
    seen: list[dict[Any, Any]] = []
    cache = WatchCache(
        Resource("priorityclasses", script, name_key, priority_value),
        on_change=lambda: seen.append(cache.snapshot()),
        stop=stop,
        backoff=Backoff(base=0.001, cap=0.01),
    )
    cache.run()  # on this thread: returns once the script is used up
    return cache, script, seen


def test_list_then_watch_resumes_from_the_last_resource_version_and_relists_on_410() -> None:
    cache, script, seen = run_script(
        [
            listing("10", priority_class("a", 100)),
            watching(
                ("ADDED", priority_class("b", 200, rv="11")),
                ("MODIFIED", priority_class("a", 150, rv="12")),
                ("BOOKMARK", {"kind": "PriorityClass", "metadata": {"resourceVersion": "13"}}),
            ),
            watching(("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"})),
            listing("20", priority_class("b", 200), priority_class("c", 300)),
            watching(("DELETED", priority_class("b", 200, rv="21"))),
        ]
    )
    assert cache.snapshot() == {"c": 300}
    assert seen == [{"a": 100}, {"a": 100, "b": 200}, {"a": 150, "b": 200}, {"b": 200, "c": 300}, {"c": 300}]
    watches = [c["resource_version"] for c in script.calls if c.get("watch")]
    assert watches[:4] == ["10", "13", "20", "21"]
    assert all(c.get("allow_watch_bookmarks") for c in script.calls if c.get("watch"))
    assert cache.synced.is_set()


def test_an_http_410_on_the_watch_call_relists() -> None:
    cache, script, _ = run_script(
        [
            listing("10", priority_class("a", 100)),
            Answer(b"{}", status=410),
            listing("30", priority_class("z", 1)),
        ]
    )
    assert cache.snapshot() == {"z": 1}
    assert [c.get("watch", False) for c in script.calls[:3]] == [False, True, False]


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(Answer(b'{"kind":"Status","code":403}', status=403), id="forbidden-list"),
        pytest.param(ConnectionError("API server unreachable"), id="connection-error"),
        pytest.param(Answer(b'{"kind":"Status"}'), id="answer-without-items"),
    ],
)
def test_a_failed_list_keeps_the_cache_and_retries(failure: Answer | Exception) -> None:
    cache, script, seen = run_script(
        [
            listing("10", priority_class("a", 100)),
            Answer(b"", status=500),
            failure,
            listing("11", priority_class("a", 100)),
        ]
    )
    assert cache.snapshot() == {"a": 100}
    assert seen == [{"a": 100}]  # the failure never emptied the cache


# -- self-registration ------------------------------------------------------------------------------


class RecordingAdmissionApi:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []

    def patch_validating_webhook_configuration(self, name: str, body: dict[str, Any], **kwargs: Any) -> None:
        self.calls.append(("validating", name, body, kwargs))

    def patch_mutating_webhook_configuration(self, name: str, body: dict[str, Any], **kwargs: Any) -> None:
        self.calls.append(("mutating", name, body, kwargs))


def test_self_registration_applies_both_configurations_with_the_ca_bundle() -> None:
    ca_pem, _ = certs.make_ca()
    registrar = Registrar(
        client.ApiClient(client.Configuration()),  # never connects: its admission API is replaced
        service="trainguard",
        namespace="trainguard-system",
        url=None,
        platform=lambda: None,
    )
    api = RecordingAdmissionApi()
    registrar.admission = api  # type: ignore[assignment]
    registrar.apply(ca_pem)
    assert [(kind, name) for kind, name, _, _ in api.calls] == [
        ("validating", "trainguard"),
        ("mutating", "trainguard"),
    ]
    for _, _, body, kwargs in api.calls:
        assert kwargs == {
            "field_manager": "trainguard",
            "force": True,
            "_content_type": "application/apply-patch+yaml",
        }
        for webhook in body["webhooks"]:
            assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == ca_pem
            assert webhook["clientConfig"]["service"]["namespace"] == "trainguard-system"


class FlakyAdmissionApi(RecordingAdmissionApi):
    """Fails the first apply, as an API server that is not reachable yet."""

    def patch_validating_webhook_configuration(self, name: str, body: dict[str, Any], **kwargs: Any) -> None:
        if not self.calls:
            self.calls.append(("failed", name, body, kwargs))
            raise ConnectionError("API server unreachable")
        super().patch_validating_webhook_configuration(name, body, **kwargs)


def test_self_registration_retries_and_applies_again_on_a_new_ca() -> None:
    first, _ = certs.make_ca()
    second, _ = certs.make_ca()
    registrar = Registrar(
        client.ApiClient(client.Configuration()),
        service="trainguard",
        namespace="ns",
        url=None,
        platform=lambda: None,
        backoff=Backoff(base=0.001, cap=0.01),
    )
    api = FlakyAdmissionApi()
    registrar.admission = api  # type: ignore[assignment]
    registrar.start(first)
    try:
        wait_until(lambda: len(api.calls) >= 3, "the retried apply")  # failed, validating, mutating
        registrar.update(second)
        wait_until(lambda: len(api.calls) >= 5, "the apply of the new CA")
    finally:
        registrar.stop()
    bundles = [
        base64.b64decode(body["webhooks"][0]["clientConfig"]["caBundle"]) for _, _, body, _ in api.calls
    ]
    assert [kind for kind, *_ in api.calls[:5]] == [
        "failed",
        "validating",
        "mutating",
        "validating",
        "mutating",
    ]
    assert bundles[:5] == [first, first, first, second, second]


def wait_until(condition: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.01)
    pytest.fail(f"timed out waiting for {what}")


def test_a_cluster_policy_exception_is_parsed_without_its_server_metadata() -> None:
    from webhook.cluster import exception_value

    obj: dict[str, Any] = {
        "apiVersion": "trainguard.dev/v1alpha1",
        "kind": "PolicyException",
        "metadata": {
            "name": "legacy",
            "namespace": "research",
            "uid": "1",
            "resourceVersion": "7",
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {
            "policies": ["gang-required"],
            "match": {"workloads": [{"namespace": "research", "name": "train"}]},
            "justification": "j",
            "owner": "o",
            "expiresAt": "2999-01-01T00:00:00Z",
        },
        "status": {},
    }
    exception = exception_value(obj)
    assert exception is not None and exception.policies == ("gang-required",)
    broken = {**obj, "spec": {**obj["spec"], "justification": ""}}
    assert exception_value(broken) is None, "an invalid object is ignored (and logged), never fatal"

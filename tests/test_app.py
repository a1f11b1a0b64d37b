"""The HTTP layer: 4xx for calls that are not AdmissionReviews, 200 with a decision for everything else."""

from __future__ import annotations

import base64
import contextlib
import copy
import io
import logging
import warnings
from collections.abc import Iterator
from typing import Any

import jsonpatch
import orjson
import pytest
from starlette.exceptions import StarletteDeprecationWarning

with warnings.catch_warnings():
    # Starlette 1.x prefers httpx2 for its TestClient and warns when it falls back to httpx, which
    # serves these tests the same.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

from webhook.config import load_config
from webhook.engine import (
    Adaptations,
    AdmissionInput,
    Decision,
    Engine,
    PolicySet,
    build_engine,
    default_policies_dir,
    load_policy_set,
)
from webhook.metrics import Metrics
from webhook.serve import admission_review as codec
from webhook.serve import logs
from webhook.serve.app import ServerState, create_app

UID = "b1f4c5de-0000-4000-8000-000000000001"
JSON = {"content-type": "application/json"}


def pytorchjob(*, queue: bool = True, replicas: Any = 3) -> dict[str, Any]:
    pod = {
        "containers": [
            {
                "name": "pytorch",
                "image": "registry.example/train:1",
                "resources": {"limits": {"nvidia.com/gpu": 8}},
                "env": [{"name": "HF_TOKEN", "value": "hf_secret_value_never_logged"}],
            }
        ]
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": "train",
            "namespace": "research",
            "labels": {"kueue.x-k8s.io/queue-name": "research"} if queue else {},
            # /validate sees the object after /mutate; without mutation, topology-slo would deny.
            "annotations": {"trainguard.dev/topology-slo": "best-effort"},
        },
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "template": {"spec": copy.deepcopy(pod)}},
                "Worker": {"replicas": replicas, "template": {"spec": copy.deepcopy(pod)}},
            }
        },
    }


def admission_review(obj: Any, **request: Any) -> dict[str, Any]:
    body = {
        "uid": UID,
        "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
        "namespace": "research",
        "name": "train",
        "operation": "CREATE",
        "userInfo": {"username": "alice"},
        "object": obj,
        **request,
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}


@pytest.fixture(scope="module")
def policies() -> PolicySet:
    # Compiling the shipped policies takes a fraction of a second: once per module.
    return load_policy_set([default_policies_dir()])


@pytest.fixture
def state(policies: PolicySet) -> ServerState:
    s = ServerState(metrics=Metrics(sample_every=1))
    s.install(build_engine(policies, load_config()))
    return s


def with_managed_fields(obj: dict[str, Any], extra_depth: int) -> dict[str, Any]:
    """`obj` as the API server sends it (managedFields keys hold quoted keys in braces), with
    `extra_depth` lists nested under spec.extra."""
    out = copy.deepcopy(obj)
    out["metadata"]["managedFields"] = [
        {
            "manager": "kubectl",
            "operation": "Update",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": {"f:pytorchReplicaSpecs": {'k:{"name":"[Worker]"}': {".": {}}}}},
        }
    ]
    extra: Any = 'ends "in" [a backslash] \\'
    for _ in range(extra_depth):
        extra = [extra]
    out["spec"]["extra"] = extra
    return out


@pytest.fixture
def client(state: ServerState) -> Iterator[TestClient]:
    with TestClient(create_app(state)) as c:
        yield c


def post(client: TestClient, path: str, review: Any, **kwargs: Any) -> Any:
    return client.post(path, content=orjson.dumps(review), headers=JSON, **kwargs)


# -- calls that are not AdmissionReviews: 4xx with {"error": …} -------------------------------------

BAD_CALLS = [
    pytest.param(JSON, b"{not json", "malformed JSON", id="malformed-json"),
    pytest.param(JSON, b"", "malformed JSON", id="empty-body"),
    pytest.param(
        JSON,
        orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
        "field request",
        id="no-request",
    ),
    pytest.param(
        JSON,
        orjson.dumps({**admission_review(pytorchjob()), "kind": "ConversionReview"}),
        "field apiVersion",
        id="wrong-kind",
    ),
    pytest.param(
        JSON,
        orjson.dumps(admission_review(["not", "a", "mapping"])),
        "field request.object",
        id="object-list",
    ),
    pytest.param(
        JSON, orjson.dumps(admission_review(pytorchjob(), uid=None)), "field request.uid", id="no-uid"
    ),
    pytest.param(
        {"content-type": "text/plain"},
        orjson.dumps(admission_review(pytorchjob())),
        "Content-Type",
        id="text-plain",
    ),
    pytest.param(
        {"content-type": "application/yaml"},
        orjson.dumps(admission_review(pytorchjob())),
        "Content-Type",
        id="yaml",
    ),
    pytest.param({}, orjson.dumps(admission_review(pytorchjob())), "Content-Type", id="no-content-type"),
    pytest.param(
        JSON,
        b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",'
        b'"operation":"CREATE","object":{},"kind":' + b'{"kind":' * 990 + b'"Pod"' + b"}" * 991 + b"}",
        "nested deeper than 100 levels",
        id="kind-nested-990-levels",
    ),
    pytest.param(
        JSON, orjson.dumps(admission_review(pytorchjob(), name=["x"])), "field request.name", id="name-a-list"
    ),
    # The object is level 1, its spec 2: 99 lists under spec.extra are one past the limit of 100.
    pytest.param(
        JSON,
        orjson.dumps(admission_review(with_managed_fields(pytorchjob(), 99))),
        "field request.object.spec.extra.0.0.….0.0: nested deeper than 100 levels",
        id="managed-fields-and-one-past",
    ),
]


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
@pytest.mark.parametrize(("headers", "body", "names"), BAD_CALLS)
def test_bad_call_is_400_with_a_json_error_naming_the_problem(
    client: TestClient, path: str, headers: dict[str, str], body: bytes, names: str
) -> None:
    response = client.post(path, content=body, headers=headers)
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/json"
    assert names in response.json()["error"]


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
def test_managed_fields_at_the_depth_limit_are_decided(client: TestClient, path: str) -> None:
    response = post(client, path, admission_review(with_managed_fields(pytorchjob(), 98)))
    assert response.status_code == 200
    assert response.json()["response"]["uid"] == UID


def test_content_type_parameters_are_accepted(client: TestClient) -> None:
    review = orjson.dumps(admission_review(pytorchjob()))
    response = client.post(
        "/validate", content=review, headers={"content-type": "application/json; charset=utf-8"}
    )
    assert response.status_code == 200


def test_body_over_the_limit_is_413_before_it_is_read(client: TestClient, state: ServerState) -> None:
    state.max_body_bytes = 1024
    response = client.post("/validate", content=b"{" + b" " * 4096 + b"}", headers=JSON)
    assert response.status_code == 413
    assert "1024 bytes" in response.json()["error"]
    assert response.headers["connection"] == "close"


def test_streamed_body_over_the_limit_is_413(client: TestClient, state: ServerState) -> None:
    state.max_body_bytes = 1024

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
        for _ in range(64):
            yield b" " * 512

    response = client.post("/mutate", content=chunks(), headers=JSON)
    assert response.status_code == 413
    assert response.json() == {"error": "request body exceeds the limit of 1024 bytes"}


def test_body_at_the_limit_is_read(client: TestClient, state: ServerState) -> None:
    body = orjson.dumps(admission_review(pytorchjob()))
    state.max_body_bytes = len(body)
    assert client.post("/validate", content=body, headers=JSON).status_code == 200


def test_get_on_an_admission_endpoint_is_405(client: TestClient) -> None:
    assert client.get("/validate").status_code == 405


# -- decisions: always 200 with an AdmissionReview --------------------------------------------------


def test_validate_denies_naming_policy_and_field(client: TestClient) -> None:
    response = post(client, "/validate", admission_review(pytorchjob(queue=False)))
    assert response.status_code == 200
    out = response.json()["response"]
    assert out["uid"] == UID and out["allowed"] is False
    assert out["status"]["code"] == 403
    assert "gang-required" in out["status"]["message"] and "metadata.labels" in out["status"]["message"]
    assert "patch" not in out


def test_validate_allows(client: TestClient) -> None:
    out = post(client, "/validate", admission_review(pytorchjob())).json()["response"]
    assert out == {"uid": UID, "allowed": True}


def test_mutate_answers_with_the_patch_and_never_validates(client: TestClient) -> None:
    out = post(client, "/mutate", admission_review(pytorchjob(queue=False))).json()["response"]
    assert out["allowed"] is True  # gang-required is a validating policy: /validate decides it
    ops = orjson.loads(base64.b64decode(out["patch"]))
    assert {"op": "add", "path": "/metadata/labels/trainguard.dev~1class", "value": "B"} in ops


def test_delete_is_allowed(client: TestClient) -> None:
    review = admission_review(None, operation="DELETE", oldObject=pytorchjob(queue=False))
    for path in ("/validate", "/mutate"):
        assert post(client, path, review).json()["response"] == {"uid": UID, "allowed": True}


class BrokenEngine(Engine):
    def decide(self, inp: AdmissionInput, **kwargs: Any) -> Decision:
        raise RuntimeError("boom")


def test_engine_exception_denies_on_validate_and_is_counted(client: TestClient, state: ServerState) -> None:
    assert state.engine is not None
    state.install(BrokenEngine(state.engine.policies, state.engine.config))
    response = post(client, "/validate", admission_review(pytorchjob()))
    assert response.status_code == 200
    out = response.json()["response"]
    assert out["allowed"] is False
    assert "internal error" in out["status"]["message"] and "RuntimeError: boom" in out["status"]["message"]
    metrics = client.get("/metrics").text
    assert 'trainguard_engine_errors_total{endpoint="validate"} 1.0' in metrics
    assert 'decision="error",endpoint="validate"' in metrics


def test_engine_exception_allows_without_patch_on_mutate(client: TestClient, state: ServerState) -> None:
    assert state.engine is not None
    state.install(BrokenEngine(state.engine.policies, state.engine.config))
    out = post(client, "/mutate", admission_review(pytorchjob())).json()["response"]
    assert out["allowed"] is True
    assert "patch" not in out
    assert "admitted without changes" in out["warnings"][0]


def test_unreadable_object_is_denied_naming_the_field(client: TestClient) -> None:
    review = admission_review(pytorchjob(replicas="three"))
    out = post(client, "/validate", review).json()["response"]
    assert out["allowed"] is False
    assert "spec.pytorchReplicaSpecs.Worker.replicas" in out["status"]["message"]
    mutated = post(client, "/mutate", review).json()["response"]
    assert mutated["allowed"] is True and "patch" not in mutated
    assert "spec.pytorchReplicaSpecs.Worker.replicas" in mutated["warnings"][0]
    assert "trainguard_engine_errors_total{" not in client.get("/metrics").text


_GROUP_WITHOUT_COUNT = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p-0", "namespace": "ml", "labels": {"kueue.x-k8s.io/pod-group-name": "run"}},
    "spec": {"containers": [{"name": "t", "image": "x"}]},
}
_RELATIVE_FILE_URI = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {
        "name": "j",
        "namespace": "ml",
        "labels": {"trainguard.dev/tier": "preemptible"},
        "annotations": {
            "trainguard.dev/checkpoint-interval": "30m",
            "trainguard.dev/checkpoint-uri": "file://checkpoints/run-7",
            "trainguard.dev/checkpoint-owner": "ml",
        },
    },
    "spec": {
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 120,
                "containers": [{"name": "t", "image": "x"}],
            }
        }
    },
}


@pytest.mark.parametrize(
    ("obj", "words"),
    [
        pytest.param(
            _GROUP_WITHOUT_COUNT,
            "pod-group-count: metadata.labels['kueue.x-k8s.io/pod-group-name'] is \"run\" but annotation "
            "kueue.x-k8s.io/pod-group-total-count is missing",
            id="kueue-pod-group-without-its-count",
        ),
        pytest.param(
            _RELATIVE_FILE_URI,
            "checkpoint-required: metadata.annotations[trainguard.dev/checkpoint-uri] is "
            '"file://checkpoints/run-7": a file:// URI must be an absolute path',
            id="relative-file-checkpoint-uri",
        ),
    ],
)
def test_readable_but_wrong_is_a_422_denial_not_a_failed_call(
    client: TestClient, obj: dict[str, Any], words: str
) -> None:
    response = post(client, "/validate", admission_review(obj))
    assert response.status_code == 200
    out = response.json()["response"]
    assert out["allowed"] is False
    assert (out["status"]["code"], out["status"]["reason"]) == (422, "Invalid")
    assert words in out["status"]["message"]


# -- probes and metrics -----------------------------------------------------------------------------


def test_readyz_only_once_policies_are_loaded_and_until_shutdown(policies: PolicySet) -> None:
    state = ServerState()
    with TestClient(create_app(state)) as client:
        assert client.get("/healthz").status_code == 200
        assert client.get("/readyz").status_code == 503
        assert client.get("/readyz").json()["reason"] == "no policy set loaded"
        assert post(client, "/validate", admission_review(pytorchjob())).status_code == 503

        state.install(build_engine(policies, load_config()))
        assert client.get("/readyz").status_code == 200
        assert post(client, "/validate", admission_review(pytorchjob())).status_code == 200

        state.begin_shutdown()
        assert client.get("/readyz").status_code == 503
        assert client.get("/healthz").status_code == 200
        draining = post(client, "/validate", admission_review(pytorchjob()))
        assert draining.status_code == 200  # still deciding while endpoints catch up
        assert draining.headers["connection"] == "close"


def test_metrics_count_requests_by_endpoint_operation_kind_and_decision(client: TestClient) -> None:
    post(client, "/validate", admission_review(pytorchjob(queue=False)))
    post(client, "/validate", admission_review(pytorchjob()))
    post(client, "/mutate", admission_review(pytorchjob()))
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}
    post(client, "/mutate", admission_review(service, kind={"group": "", "version": "v1", "kind": "Service"}))
    client.post("/validate", content=b"nope", headers=JSON)
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    requests = "trainguard_admission_requests_total"
    # One policy per shipped file: the gauge follows the set as policies are added.
    shipped = len(list(default_policies_dir().glob("*.yaml")))
    for line in (
        f'{requests}{{decision="denied",endpoint="validate",kind="PyTorchJob",operation="CREATE"}} 1.0',
        f'{requests}{{decision="allowed",endpoint="validate",kind="PyTorchJob",operation="CREATE"}} 1.0',
        f'{requests}{{decision="allowed",endpoint="mutate",kind="PyTorchJob",operation="CREATE"}} 1.0',
        f'{requests}{{decision="skipped",endpoint="mutate",kind="other",operation="CREATE"}} 1.0',
        'trainguard_admission_rejected_requests_total{endpoint="validate",reason="malformed"} 1.0',
        'trainguard_admission_duration_seconds_count{endpoint="validate"} 3.0',
        f"trainguard_policy_set_policies {float(shipped)}",
        "trainguard_ready 1.0",
    ):
        assert line in text, line
    assert 'trainguard_policy_evaluation_seconds_count{policy="gang-required"}' in text


def _long_script_job() -> dict[str, Any]:
    """A PyTorchJob whose launch line is a long (but capped-within) shell script: slow to read."""
    job = pytorchjob()
    script = "A=1; echo $A; " * 2000 + "torchrun --nnodes=4 t.py"
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["containers"][0]["command"] = ["sh", "-c", script]
    return job


# The slice is a minute where time must not decide the placement (a loaded machine can take more
# than the real 20 ms on a first call), and zero where it must.
_AMPLE = 60.0
PLACEMENTS = [
    pytest.param(
        "cel-expr-python", 64 * 1024, _AMPLE, pytorchjob(), "inline", id="small-body-decided-inline"
    ),
    pytest.param(
        "cel-expr-python", 64 * 1024, _AMPLE, _long_script_job(), "deferred", id="long-launch-line-deferred"
    ),
    pytest.param("cel-expr-python", 64 * 1024, 0.0, pytorchjob(), "deferred", id="slice-spent-deferred"),
    pytest.param("cel-expr-python", 0, _AMPLE, pytorchjob(), "thread", id="over-the-inline-size-on-a-thread"),
    pytest.param("cel-python", 64 * 1024, _AMPLE, pytorchjob(), "thread", id="unbounded-runtime-on-a-thread"),
]


@pytest.mark.parametrize(("backend", "inline_bytes", "inline_slice", "obj", "placement"), PLACEMENTS)
def test_where_an_admission_is_decided_never_changes_its_answer(
    backend: str, inline_bytes: int, inline_slice: float, obj: dict[str, Any], placement: str
) -> None:
    """Inline on the event loop, deferred to a deciding thread, or there from the start: the same
    response for the same review, and the placement counted."""
    policies = load_policy_set([default_policies_dir()], backend)
    answers = {}
    for label, limit in (("placed", inline_bytes), ("threads-only", 0)):
        state = ServerState(
            metrics=Metrics(sample_every=1), inline_body_bytes=limit, inline_slice=inline_slice
        )
        state.install(build_engine(policies, load_config()))
        with TestClient(create_app(state)) as client:
            answers[label] = [
                post(client, path, admission_review(obj)).json() for path in ("/mutate", "/validate")
            ]
            text = client.get("/metrics").text
        if label == "placed":
            assert f'trainguard_admission_placements_total{{placement="{placement}"}} 2.0' in text
    assert answers["placed"] == answers["threads-only"]


def test_policy_timings_are_sampled_one_in_n(policies: PolicySet) -> None:
    state = ServerState(metrics=Metrics(sample_every=4))
    state.install(build_engine(policies, load_config()))
    with TestClient(create_app(state)) as client:
        for _ in range(8):
            post(client, "/validate", admission_review(pytorchjob()))
        text = client.get("/metrics").text
    assert 'trainguard_policy_evaluation_seconds_count{policy="gang-required"} 2.0' in text


def test_policy_timings_are_sampled_on_both_calls_of_the_api_servers_pairs(policies: PolicySet) -> None:
    """The API server calls /mutate, then /validate: 1 in N of each is timed, whatever N."""
    state = ServerState(metrics=Metrics(sample_every=2))
    state.install(build_engine(policies, load_config()))
    with TestClient(create_app(state)) as client:
        for _ in range(4):
            post(client, "/mutate", admission_review(pytorchjob()))
            post(client, "/validate", admission_review(pytorchjob()))
        text = client.get("/metrics").text
    assert 'trainguard_policy_evaluation_seconds_count{policy="mutate-class-label"} 2.0' in text
    assert 'trainguard_policy_evaluation_seconds_count{policy="gang-required"} 2.0' in text


# -- logs -------------------------------------------------------------------------------------------


@pytest.fixture
def log_lines(state: ServerState) -> Iterator[io.StringIO]:
    with captured_logs(state, "test.trainguard.admission") as out:
        yield out


@contextlib.contextmanager
def captured_logs(state: ServerState, name: str) -> Iterator[io.StringIO]:
    """Every admission record `state` logs, as JSON lines."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JsonFormatter())
    state.logger = logging.getLogger(name)
    state.logger.addHandler(handler)
    state.logger.setLevel(logging.DEBUG)
    state.logger.propagate = False
    try:
        yield out
    finally:
        state.logger.removeHandler(handler)


def records(out: io.StringIO) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in out.getvalue().splitlines()]


def test_denial_logs_at_info_with_names_and_never_values(client: TestClient, log_lines: io.StringIO) -> None:
    post(client, "/validate", admission_review(pytorchjob(queue=False)))
    post(client, "/mutate", admission_review(pytorchjob(queue=False)))
    denial, mutation = records(log_lines)
    assert denial["level"] == "info"
    assert denial["denied_by"] == ["gang-required"]
    assert (denial["uid"], denial["operation"], denial["kind"]) == (UID, "CREATE", "PyTorchJob")
    assert (denial["namespace"], denial["object_name"], denial["decision"]) == ("research", "train", "denied")
    assert denial["duration_ms"] >= 0
    assert mutation["level"] == "debug"  # a plain allow, even with a patch
    assert "/metadata/labels/trainguard.dev~1class" in mutation["patched"]
    assert "hf_secret_value_never_logged" not in log_lines.getvalue()


def test_engine_error_logs_where_not_what(
    client: TestClient, state: ServerState, log_lines: io.StringIO
) -> None:
    assert state.engine is not None
    state.install(BrokenEngine(state.engine.policies, state.engine.config))
    post(client, "/validate", admission_review(pytorchjob()))
    (record,) = records(log_lines)
    assert record["level"] == "error"
    assert record["error"] == "RuntimeError"
    assert any("test_app.py" in frame for frame in record["error_at"])
    assert "boom" not in log_lines.getvalue()


def test_request_values_of_megabytes_are_logged_cut_short(client: TestClient, log_lines: io.StringIO) -> None:
    huge = "n" * 1_000_000
    job = pytorchjob(queue=False)
    response = post(client, "/validate", admission_review(job, name=huge, namespace=huge))
    assert response.status_code == 200 and response.json()["response"]["allowed"] is False
    (record,) = records(log_lines)
    assert len(record["object_name"]) < 400 and record["object_name"].endswith("(1000000 characters)")
    assert len(record["namespace"]) < 400
    assert len(log_lines.getvalue()) < 4000


FAILURES_WHILE_READING = [
    pytest.param(
        "loads", RecursionError("maximum recursion depth exceeded"), "RecursionError", id="decode-recursion"
    ),
    pytest.param("loads", MemoryError(), "MemoryError", id="decode-memory"),
    pytest.param("parse_review", MemoryError(), "MemoryError", id="check-memory"),
    pytest.param("parse_review", RecursionError(), "RecursionError", id="check-recursion"),
]


@pytest.mark.parametrize(("step", "error", "named"), FAILURES_WHILE_READING)
def test_an_error_while_reading_a_review_is_a_400_never_a_500(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, step: str, error: BaseException, named: str
) -> None:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(codec, step, fail)
    response = post(client, "/validate", admission_review(pytorchjob()))
    assert response.status_code == 400
    assert named in response.json()["error"]


# -- the validating call reuses what the mutating call adapted -------------------------------------


def _reusing_client(policies: PolicySet) -> tuple[TestClient, ServerState]:
    """The app as `serve` wires it: one store of adaptations, counted on /metrics. The decision made
    ahead may take an hour here, not the inline slice: these tests are about what is decided."""
    metrics = Metrics(sample_every=1000)  # an admission whose policies are timed decides itself
    kept = Adaptations(on_lookup=metrics.observe_adaptation, ahead_seconds=3600.0)
    state = ServerState(metrics=metrics, adaptations=kept)
    state.install(build_engine(policies, load_config(), adaptations=state.adaptations))
    return TestClient(create_app(state)), state


def _as_the_api_server_sends_it(obj: dict[str, Any], patch: str) -> dict[str, Any]:
    """The object after the mutating call's patch, with what the API server adds before the
    validating call (metadata.uid, creationTimestamp, generation; status)."""
    patched: dict[str, Any] = jsonpatch.apply_patch(obj, orjson.loads(base64.b64decode(patch)))
    patched["metadata"] |= {"uid": UID, "creationTimestamp": "2026-12-04T21:21:14Z", "generation": 1}
    patched["status"] = {}
    return patched


def _reused(text: str) -> dict[str, float]:
    return _counted(text, "trainguard_adaptations_reused_total", ("hit", "miss"))


def _counted(text: str, counter: str, results: tuple[str, ...]) -> dict[str, float]:
    return {
        result: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        for result in results
        if line.startswith(f'{counter}{{result="{result}"}}')
    }


@pytest.mark.parametrize(
    ("change", "reused", "ahead"),
    [
        pytest.param(
            lambda obj: None, {"hit": 1.0, "miss": 0.0}, {"used": 1.0, "not-used": 0.0}, id="as-patched"
        ),
        pytest.param(
            lambda obj: obj["metadata"]["labels"].update({"team": "b"}),
            {"hit": 0.0, "miss": 1.0},
            {"used": 0.0, "not-used": 1.0},
            id="changed-by-another-webhook",
        ),
    ],
)
def test_the_validating_call_reuses_the_mutating_calls_adaptation_and_decides_the_same(
    policies: PolicySet, client: TestClient, change: Any, reused: dict[str, float], ahead: dict[str, float]
) -> None:
    job = pytorchjob(replicas=2)
    del job["metadata"]["annotations"]  # its validation depends on what the mutation adds
    reusing, state = _reusing_client(policies)
    with captured_logs(state, "test.trainguard.ahead") as out, reusing:
        mutated = post(reusing, "/mutate", admission_review(job)).json()["response"]
        assert mutated["allowed"] and mutated["patch"]
        # Adapted once the mutating call was answered, before the validating call comes
        assert state.adaptations is not None and state.adaptations.entries == 1
        arrived = _as_the_api_server_sends_it(job, mutated["patch"])
        change(arrived)
        answer = post(reusing, "/validate", admission_review(arrived)).json()
        scraped = reusing.get("/metrics").text
        assert _reused(scraped) == reused
        assert _counted(scraped, "trainguard_validations_decided_ahead_total", ("used", "not-used")) == ahead
    validating = [r for r in records(out) if r["endpoint"] == "validate"]
    assert [r.get("decided_ahead", False) for r in validating] == [bool(ahead["used"])]
    # The same call to a server that keeps nothing
    assert answer == post(client, "/validate", admission_review(arrived)).json()

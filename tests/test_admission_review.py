"""The AdmissionReview v1 codec: requests parse or fail naming the field; responses say it all."""

from __future__ import annotations

import base64
import copy
import random
from typing import Any

import jsonpatch
import orjson
import pytest

from webhook.config import load_config
from webhook.engine import (
    Decision,
    Engine,
    Finding,
    PolicyResult,
    build_engine,
    default_policies_dir,
    load_policy_set,
)
from webhook.serve import admission_review as codec
from webhook.serve.admission_review import ReviewError, build_response, parse_request

UID = "705ab4f5-6393-11e8-b7cc-42010a800002"
CHECKPOINT = {
    "trainguard.dev/checkpoint-interval": "30m",
    "trainguard.dev/checkpoint-uri": "s3://bucket/run",
    "trainguard.dev/checkpoint-owner": "team-llm",
}


def pytorchjob(
    workers: int = 3,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    elastic: dict[str, int] | None = None,
    grace: int | None = None,
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "containers": [
            {
                "name": "pytorch",
                "image": "registry.example/train:1",
                "resources": {"limits": {"nvidia.com/gpu": 8}},
                "env": [{"name": "HF_TOKEN", "value": "not-for-logs"}],
            }
        ]
    }
    if grace is not None:
        pod["terminationGracePeriodSeconds"] = grace
    spec: dict[str, Any] = {
        "pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "template": {"spec": copy.deepcopy(pod)}},
            "Worker": {"replicas": workers, "template": {"spec": copy.deepcopy(pod)}},
        }
    }
    if elastic is not None:
        spec["elasticPolicy"] = elastic
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {
            "name": "train",
            "namespace": "research",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


GANG_MISSING = pytorchjob()
QUEUED = pytorchjob(labels={"kueue.x-k8s.io/queue-name": "research"})
ELASTIC_WITHOUT_RESTART_BOUND = pytorchjob(
    labels={"kueue.x-k8s.io/queue-name": "research"},
    annotations=CHECKPOINT,
    elastic={"minReplicas": 2, "maxReplicas": 4},
    grace=120,
)


def admission_review(obj: Any = None, **request: Any) -> dict[str, Any]:
    """A complete AdmissionReview as the API server sends it; keyword arguments override request fields."""
    body: dict[str, Any] = {
        "uid": UID,
        "kind": {"group": "kubeflow.org", "version": "v1", "kind": "PyTorchJob"},
        "resource": {"group": "kubeflow.org", "version": "v1", "resource": "pytorchjobs"},
        "namespace": "research",
        "name": "train",
        "operation": "CREATE",
        "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": None,
        "dryRun": False,
    }
    body.update(request)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": body}


def encode(value: Any) -> bytes:
    return orjson.dumps(value)


@pytest.fixture(scope="module")
def engine() -> Engine:
    # Compiling the shipped policies takes a fraction of a second: once per module.
    return build_engine(load_policy_set([default_policies_dir()]), load_config())


def decide(engine: Engine, obj: Any, **request: Any) -> tuple[codec.ParsedReview, Decision]:
    parsed = parse_request(encode(admission_review(obj, **request)))
    return parsed, engine.decide(parsed.admission)


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    assert response["patchType"] == "JSONPatch"
    patch: list[dict[str, Any]] = orjson.loads(base64.b64decode(response["patch"]))
    return patch


# -- parse_request --------------------------------------------------------------------------------


def test_parse_reads_the_request_fields() -> None:
    parsed = parse_request(encode(admission_review(QUEUED, dryRun=True)))
    assert (parsed.uid, parsed.operation, parsed.kind) == (UID, "CREATE", "PyTorchJob")
    assert (parsed.namespace, parsed.name, parsed.dry_run) == ("research", "train", True)
    assert parsed.admission.object is not None and parsed.admission.object["kind"] == "PyTorchJob"
    assert parsed.admission.user_info["username"] == "alice"
    assert parsed.admission.dry_run is True


def test_parse_takes_the_kind_from_the_object_when_the_request_has_none() -> None:
    parsed = parse_request(encode(admission_review(QUEUED, kind=None)))
    assert parsed.kind == "PyTorchJob"


MALFORMED = [
    pytest.param(b"", None, id="empty-body"),
    pytest.param(b"{not json", None, id="not-json"),
    pytest.param(b"[1, 2]", None, id="json-array"),
    pytest.param(b'"AdmissionReview"', None, id="json-string"),
    pytest.param(
        encode({**admission_review(QUEUED), "apiVersion": "admission.k8s.io/v1beta1"}),
        "apiVersion",
        id="v1beta1",
    ),
    pytest.param(
        encode({**admission_review(QUEUED), "kind": "ConversionReview"}), "apiVersion", id="wrong-kind"
    ),
    pytest.param(
        encode({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}), "request", id="no-request"
    ),
    pytest.param(
        encode({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": []}),
        "request",
        id="request-not-a-mapping",
    ),
    pytest.param(encode(admission_review(QUEUED, uid=None)), "request.uid", id="no-uid"),
    pytest.param(encode(admission_review(QUEUED, uid="")), "request.uid", id="empty-uid"),
    pytest.param(encode(admission_review(QUEUED, uid=42)), "request.uid", id="uid-not-a-string"),
    pytest.param(
        encode(admission_review(QUEUED, operation="PATCH")), "request.operation", id="unknown-operation"
    ),
    pytest.param(encode(admission_review(QUEUED, operation=None)), "request.operation", id="no-operation"),
    pytest.param(encode(admission_review(None)), "request.object", id="create-without-object"),
    pytest.param(encode(admission_review([QUEUED])), "request.object", id="object-is-a-list"),
    pytest.param(encode(admission_review("PyTorchJob")), "request.object", id="object-is-a-string"),
    pytest.param(
        encode(admission_review(QUEUED, operation="UPDATE", oldObject=[1])),
        "request.oldObject",
        id="old-object-is-a-list",
    ),
    pytest.param(
        b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u",'
        b'"operation":"CREATE","object":{},"kind":' + b'{"kind":' * 990 + b'"Pod"' + b"}" * 991 + b"}",
        None,
        id="kind-nested-990-levels",
    ),
    pytest.param(b"[" * 200 + b"]" * 200, None, id="lists-nested-200-levels"),
    pytest.param(
        encode(admission_review(QUEUED, kind={"kind": ["PyTorchJob"]})), "request.kind.kind", id="kind-a-list"
    ),
    pytest.param(encode(admission_review(QUEUED, name={"a": 1})), "request.name", id="name-an-object"),
    pytest.param(encode(admission_review(QUEUED, namespace=7)), "request.namespace", id="namespace-a-number"),
    pytest.param(encode(admission_review(QUEUED, uid="u" * 129)), "request.uid", id="uid-of-129-characters"),
]


@pytest.mark.parametrize(("body", "field"), MALFORMED)
def test_malformed_review_is_a_review_error_naming_the_field(body: bytes, field: str | None) -> None:
    with pytest.raises(ReviewError) as caught:
        parse_request(body)
    assert caught.value.field == field
    described = caught.value.describe()
    assert described.startswith("AdmissionReview")
    if field is not None:
        assert f"field {field}" in described


# -- nesting, checked on the text --------------------------------------------------------------------


def _lists(depth: int, inner: bytes = b"1") -> bytes:
    return b"[" * depth + inner + b"]" * depth


def _alternating(depth: int) -> bytes:
    opens = b"".join(b'{"k":' if i % 2 else b"[" for i in range(depth))
    closes = b"".join(b"}" if i % 2 else b"]" for i in reversed(range(depth)))
    return opens + b"1" + closes


DEPTHS = [
    pytest.param(_lists(codec.MAX_DEPTH), True, id="lists-at-the-limit"),
    pytest.param(_lists(codec.MAX_DEPTH + 1), False, id="lists-one-past-the-limit"),
    pytest.param(_alternating(codec.MAX_DEPTH), True, id="maps-and-lists-alternating-at-the-limit"),
    pytest.param(_alternating(codec.MAX_DEPTH + 1), False, id="maps-and-lists-alternating-one-past"),
    pytest.param(_lists(codec.MAX_DEPTH - 1, b"[]"), True, id="empty-list-innermost-at-the-limit"),
    pytest.param(_lists(codec.MAX_DEPTH, b"{}"), False, id="empty-map-innermost-one-past"),
    pytest.param(b'{"a":"' + b"[" * 500 + b'"}', True, id="brackets-inside-a-string"),
    pytest.param(rb'{"a":"x\"[[[[\\","b":' + _lists(3) + b"}", True, id="escaped-quotes-in-a-string"),
    pytest.param(b"[" + b"[1]," * 5000 + b"[1]]", True, id="wide-and-shallow"),
    # A managedFields key holds braces (and escaped quotes) inside a string.
    pytest.param(
        rb'{"k:{\"name\":\"x\"}":' + _lists(codec.MAX_DEPTH - 1) + b"}",
        True,
        id="braces-in-a-key-at-the-limit",
    ),
    pytest.param(
        rb'{"k:{\"name\":\"x\"}":' + _lists(codec.MAX_DEPTH) + b"}",
        False,
        id="braces-in-a-key-one-past",
    ),
    pytest.param(
        b'["a","' + b"]" * 200 + b'",' + _lists(codec.MAX_DEPTH) + b"]",
        False,
        id="closing-brackets-in-a-string",
    ),
    # More brackets than the rounds take (codec._ROUNDS_UP_TO): depth summed in one pass.
    pytest.param(
        b"[" + b"[1]," * 5000 + _lists(codec.MAX_DEPTH - 1) + b"]",
        True,
        id="wide-with-a-branch-at-the-limit",
    ),
    pytest.param(
        b"[" + b"[1]," * 5000 + _lists(codec.MAX_DEPTH) + b"]",
        False,
        id="wide-with-a-branch-one-past",
    ),
    # The depth carried from one chunk of brackets into the next.
    pytest.param(
        b"[" * 50 + b"[1]," * 40_000 + _lists(codec.MAX_DEPTH - 50) + b"]" * 50,
        True,
        id="deep-after-two-chunks-at-the-limit",
    ),
    pytest.param(
        b"[" * 50 + b"[1]," * 40_000 + _lists(codec.MAX_DEPTH - 49) + b"]" * 50,
        False,
        id="deep-after-two-chunks-one-past",
    ),
]


@pytest.mark.parametrize(("body", "accepted"), DEPTHS)
def test_nesting_is_bounded_on_the_text(body: bytes, accepted: bool) -> None:
    """Every container counts, empty ones too, and no bracket inside a string does."""
    if accepted:
        codec._check_text_depth(body)
    else:
        with pytest.raises(ReviewError) as caught:
            codec._check_text_depth(body)
        assert "nested deeper than 100 levels" in caught.value.describe()


def test_nesting_is_read_across_chunks_of_the_text() -> None:
    """A body longer than a chunk, its cuts falling inside strings that hold brackets."""
    filler = b'"' + b"[" * 1000 + b'",'
    count = 3 * codec._TEXT_CHUNK // len(filler)
    codec._check_text_depth(b"[" + filler * count + b"1]")
    with pytest.raises(ReviewError):
        codec._check_text_depth(b"[" + filler * count + _lists(codec.MAX_DEPTH) + b"]")


def _depth(value: Any) -> int:
    """How deep the containers of a decoded value nest: what the text's check must agree with."""
    depth, level = 0, [value]
    while level := [c for c in level if isinstance(c, dict | list)]:
        depth += 1
        level = [v for c in level for v in (c.values() if isinstance(c, dict) else c)]
    return depth


# What the API server writes into every object: managedFields keys quoting keys inside a string.
MANAGED_KEY = rb'"k:{\"name\":\"main\"}"'
ESCAPED_TEXTS = [
    pytest.param(
        b'{"a":' + MANAGED_KEY + b"," + b'"b":' + _lists(codec.MAX_DEPTH - 1) + b"}", id="managed-key-value"
    ),
    pytest.param(
        b'{"f:metadata":{' + MANAGED_KEY + b":" + _lists(codec.MAX_DEPTH - 2) + b"}}",
        id="managed-key-at-the-limit",
    ),
    pytest.param(
        b'{"f:metadata":{' + MANAGED_KEY + b":" + _lists(codec.MAX_DEPTH - 1) + b"}}",
        id="managed-key-one-past",
    ),
    pytest.param(
        b"[" + (MANAGED_KEY + b",") * 3000 + _lists(codec.MAX_DEPTH - 1) + b"]",
        id="many-managed-keys-at-the-limit",
    ),
    pytest.param(
        b"[" + (MANAGED_KEY + b",") * 3000 + _lists(codec.MAX_DEPTH) + b"]", id="many-managed-keys-one-past"
    ),
    pytest.param(rb'["\"[[[[", ' + _lists(codec.MAX_DEPTH - 1) + b"]", id="escaped-quote-before-brackets"),
    pytest.param(
        rb'["\"[[[[", ' + _lists(codec.MAX_DEPTH) + b"]", id="escaped-quote-before-brackets-one-past"
    ),
    pytest.param(
        rb'["a\\", "]]]]", ' + _lists(codec.MAX_DEPTH) + b"]", id="string-ending-in-a-backslash-then-closers"
    ),
    pytest.param(
        rb'["a\\\\", "[[[[", ' + _lists(codec.MAX_DEPTH - 1) + b"]", id="string-ending-in-two-backslashes"
    ),
    pytest.param(
        rb'["\\\"]]]]\\", ' + _lists(codec.MAX_DEPTH) + b"]", id="backslash-then-escaped-quote-then-closers"
    ),
    pytest.param(
        rb'["\n\"[[\/\\", ' + _lists(codec.MAX_DEPTH - 1) + b"]", id="letter-escapes-around-an-escaped-quote"
    ),
    pytest.param(
        rb'["\n\"]]\/\\", ' + _lists(codec.MAX_DEPTH) + b"]", id="letter-escapes-then-closers-one-past"
    ),
    pytest.param(
        rb'["\u0022]]]]\u005c", ' + _lists(codec.MAX_DEPTH) + b"]", id="unicode-escaped-quote-and-backslash"
    ),
    pytest.param(rb'["\b\f\r\t\u005b", ' + _lists(codec.MAX_DEPTH - 1) + b"]", id="every-letter-escape"),
    pytest.param(
        b'["' + b"[" * 101 + b'", ' + _lists(codec.MAX_DEPTH - 1) + b"]", id="101-deep-inside-a-string"
    ),
    pytest.param(
        b'["' + b"[" * 101 + b'", ' + _lists(codec.MAX_DEPTH) + b"]", id="101-deep-inside-and-outside"
    ),
    pytest.param(
        b'["' + b"\\\\" * 5000 + b'", ' + _lists(codec.MAX_DEPTH) + b"]",
        id="long-run-of-backslashes-one-past",
    ),
    pytest.param(
        b'["' + b'\\"[' * 5000 + b'", ' + _lists(codec.MAX_DEPTH - 1) + b"]", id="long-run-of-escaped-quotes"
    ),
]


@pytest.mark.parametrize("body", ESCAPED_TEXTS)
def test_nesting_on_the_text_agrees_with_the_decoded_value(body: bytes) -> None:
    """Escapes and brackets inside strings: the text refuses exactly what nests past the limit."""
    if _depth(orjson.loads(body)) <= codec.MAX_DEPTH:
        codec._check_text_depth(body)
    else:
        with pytest.raises(ReviewError, match="nested deeper than 100 levels"):
            codec._check_text_depth(body)


_STRING_PIECES = ["[", "]", "{", "}", '"', "\\", "\n", "/", 'k:{"name":"x"}', "é", "\0", "a"]


def _random_value(rng: random.Random, depth: int) -> Any:
    """`depth` containers nested, each with strings (keys too) built of quotes, backslashes and brackets."""
    text = "".join(rng.choice(_STRING_PIECES) for _ in range(rng.randrange(6)))
    if depth == 0:
        return text
    inner = _random_value(rng, depth - 1)
    if rng.random() < 0.5:
        return [text, inner, text + "\\"] if rng.random() < 0.5 else [inner]
    return {text: text, "k" + text: inner}


GENERATED = [
    pytest.param(seed, depth, id=f"seed-{seed}-depth-{depth}")
    for seed in range(40)
    for depth in (codec.MAX_DEPTH - 1, codec.MAX_DEPTH, codec.MAX_DEPTH + 1)
]


@pytest.mark.parametrize(("seed", "depth"), GENERATED)
def test_nesting_on_the_text_of_generated_values(seed: int, depth: int) -> None:
    value = _random_value(random.Random(seed), depth)
    body = orjson.dumps(value)
    if depth <= codec.MAX_DEPTH:
        codec._check_text_depth(body)
    else:
        with pytest.raises(ReviewError, match="nested deeper than 100 levels"):
            codec._check_text_depth(body)


@pytest.mark.parametrize(
    ("body", "accepted"),
    [
        *DEPTHS,
        *(pytest.param(*p.values, None, id=p.id) for p in ESCAPED_TEXTS),
        *(
            pytest.param(
                orjson.dumps(_random_value(random.Random(s), d)),
                d <= codec.MAX_DEPTH,
                id=f"seed-{s}-depth-{d}",
            )
            for s in range(10)
            for d in (codec.MAX_DEPTH, codec.MAX_DEPTH + 1)
        ),
    ],
)
def test_the_encoder_bounds_nesting_as_the_text_does(body: bytes, accepted: bool | None) -> None:
    """The bound on the decoded value (orjson's own limit on what it encodes) agrees with the text."""
    value = orjson.loads(body)
    if accepted is None:
        accepted = _depth(value) <= codec.MAX_DEPTH
    assert codec._encodes_within_depth(value) is accepted


def _managed_pod(extra: Any) -> dict[str, Any]:
    """A Pod as the API server sends it, managedFields and all, with `extra` under spec."""
    fields: dict[str, Any] = {
        "f:spec": {"f:containers": {MANAGED_KEY.decode()[1:-1].replace('\\"', '"'): {".": {}, "f:image": {}}}}
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train-0",
            "namespace": "research",
            "annotations": {"note": "ends in a backslash \\", "path": 'C:\\runs\\"]]'},
            "managedFields": [
                {
                    "manager": "kubectl-client-side-apply",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields,
                }
            ],
        },
        "spec": {"containers": [{"name": "main", "image": "registry.example/train:1"}], "extra": extra},
    }


def _chain(depth: int) -> Any:
    value: Any = "[[[" * 40
    for _ in range(depth):
        value = [value]
    return value


# The object is level 1, its spec 2: 98 lists under spec.extra reach the limit of 100.
def _large(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with an annotation that takes its review past the bodies whose depth the encoder bounds."""
    obj["metadata"]["annotations"]["padding"] = '"]' * 40_000
    return obj


REVIEWS_WITH_MANAGED_FIELDS = [
    pytest.param(_managed_pod(_chain(98)), None, id="at-the-limit"),
    pytest.param(_managed_pod(_chain(99)), "request.object.spec.extra.0.0.….0.0", id="one-past"),
    pytest.param(_managed_pod("[" * 200), None, id="brackets-only-in-a-string"),
    pytest.param(_large(_managed_pod(_chain(98))), None, id="large-body-at-the-limit"),
    pytest.param(
        _large(_managed_pod(_chain(99))), "request.object.spec.extra.0.0.….0.0", id="large-body-one-past"
    ),
]


@pytest.mark.parametrize(("obj", "field"), REVIEWS_WITH_MANAGED_FIELDS)
def test_reviews_with_managed_fields_are_refused_only_past_the_limit(
    obj: dict[str, Any], field: str | None
) -> None:
    assert (_depth(obj) > 100) == (field is not None)
    body = encode(admission_review(obj))
    assert rb"k:{\"name\":\"main\"}" in body
    assert (len(body) > codec._ENCODED_UP_TO) == ("padding" in obj["metadata"]["annotations"])
    if field is None:
        assert parse_request(body).admission.object == obj
        return
    with pytest.raises(ReviewError) as caught:
        parse_request(body)
    assert caught.value.field == field
    assert "nested deeper than 100 levels" in caught.value.describe()
    assert f"field {caught.value.field}" in caught.value.describe()


# -- build_response -------------------------------------------------------------------------------


def test_response_echoes_the_uid_and_is_an_admission_review(engine: Engine) -> None:
    parsed, decision = decide(engine, QUEUED)
    out = build_response(parsed.uid, decision, mutating=False)
    assert out["apiVersion"] == "admission.k8s.io/v1"
    assert out["kind"] == "AdmissionReview"
    assert out["response"]["uid"] == UID


def test_allowed_response_has_no_status(engine: Engine) -> None:
    parsed, decision = decide(engine, QUEUED)
    response = build_response(parsed.uid, decision, mutating=False)["response"]
    assert response["allowed"] is True
    assert "status" not in response


def test_denied_response_has_403_and_a_message_naming_policy_and_field(engine: Engine) -> None:
    parsed, decision = decide(engine, GANG_MISSING)
    response = build_response(parsed.uid, decision, mutating=False)["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert response["status"]["reason"] == "Forbidden"
    assert response["status"]["message"].startswith("gang-required: ")
    assert "(field metadata.labels)" in response["status"]["message"]


@pytest.mark.parametrize(
    ("reasons", "code", "reason"),
    [
        pytest.param(["Invalid"], 422, "Invalid", id="invalid-422"),
        pytest.param(["Forbidden"], 403, "Forbidden", id="forbidden-403"),
        pytest.param(["Unauthorized"], 401, "Unauthorized", id="unauthorized-401"),
        pytest.param(["RequestEntityTooLarge"], 413, "RequestEntityTooLarge", id="too-large-413"),
        pytest.param(["Invalid", "Forbidden"], 422, "Invalid", id="first-violation-sets-the-status"),
        pytest.param(["InternalError", "Invalid"], 422, "Invalid", id="a-policy-that-ran-beats-an-error"),
        pytest.param(["InternalError"], 500, "InternalError", id="only-errors-500"),
        pytest.param(["NoSuchReason"], 403, "Forbidden", id="unknown-reason-forbidden"),
    ],
)
def test_denial_status_carries_the_validation_reason(reasons: list[str], code: int, reason: str) -> None:
    decision = Decision(False, violations=[Finding(f"p{i}", "no", None, r) for i, r in enumerate(reasons)])
    status = build_response(UID, decision, mutating=False)["response"]["status"]
    assert (status["code"], status["reason"]) == (code, reason)


def test_a_policy_reason_reaches_the_response(tmp_path: Any) -> None:
    (tmp_path / "p.yaml").write_text(
        "apiVersion: trainguard.dev/v1alpha1\nkind: TrainingPolicy\nmetadata:\n  name: sized\n"
        "spec:\n  validations:\n    - expression: 'false'\n      message: too big\n"
        "      reason: RequestEntityTooLarge\n"
    )
    engine = build_engine(load_policy_set([tmp_path]), load_config())
    parsed = parse_request(orjson.dumps(admission_review(GANG_MISSING)))
    decision = engine.decide(parsed.admission, mutate=False)
    assert [(f.policy, f.reason) for f in decision.violations] == [("sized", "RequestEntityTooLarge")]
    status = build_response(parsed.uid, decision, mutating=False)["response"]["status"]
    assert (status["code"], status["reason"], status["message"]) == (
        413,
        "RequestEntityTooLarge",
        "sized: too big",
    )


def test_warnings_name_the_policy(engine: Engine) -> None:
    parsed, decision = decide(engine, ELASTIC_WITHOUT_RESTART_BOUND)
    response = build_response(parsed.uid, decision, mutating=False)["response"]
    assert response["allowed"] is True
    assert [w.split(": ", 1)[0] for w in response["warnings"]] == ["recovery-policy"]


def test_long_warnings_are_cut_to_what_the_api_server_shows() -> None:
    decision = Decision(True, warnings=[Finding("p", "x" * 5000)])
    response = build_response(UID, decision, mutating=False)["response"]
    assert len(response["warnings"][0]) == 1024


def test_mutating_response_carries_a_base64_json_patch_that_applies(engine: Engine) -> None:
    parsed, decision = decide(engine, QUEUED)
    response = build_response(parsed.uid, decision, mutating=True)["response"]
    patched = jsonpatch.apply_patch(QUEUED, decoded_patch(response))
    assert patched["metadata"]["labels"]["trainguard.dev/class"] == "B"
    assert patched == decision.mutated
    assert QUEUED["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "research"}  # input untouched


def test_validating_response_never_carries_a_patch(engine: Engine) -> None:
    parsed, decision = decide(engine, QUEUED)
    assert decision.patch
    response = build_response(parsed.uid, decision, mutating=False)["response"]
    assert "patch" not in response and "patchType" not in response


def test_empty_patch_is_left_out() -> None:
    response = build_response(UID, Decision(True), mutating=True)["response"]
    assert "patch" not in response and "patchType" not in response


AUDITS = [
    pytest.param(
        Decision(True, audits=[Finding("cost-report", "no team label")]),
        {"cost-report": "no team label"},
        id="one-audit",
    ),
    pytest.param(
        Decision(True, audits=[Finding("cost-report", "no team label"), Finding("cost-report", "no budget")]),
        {"cost-report": "no team label; no budget"},
        id="two-audits-of-one-policy-joined",
    ),
    pytest.param(
        Decision(
            True,
            results=[PolicyResult("gang-required", "exempt", ("no gang",), (), (), "INC-42 until Friday")],
        ),
        {"gang-required-exempted": "INC-42 until Friday: no gang"},
        id="exemption-recorded",
    ),
]


@pytest.mark.parametrize(("decision", "annotations"), AUDITS)
def test_audits_and_exemptions_become_audit_annotations(
    decision: Decision, annotations: dict[str, str]
) -> None:
    response = build_response(UID, decision, mutating=False)["response"]
    assert response["auditAnnotations"] == annotations
    assert response["allowed"] is True


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_and_connect_are_allowed_without_patch(engine: Engine, operation: str) -> None:
    parsed, decision = decide(engine, None, operation=operation, oldObject=GANG_MISSING)
    for mutating in (True, False):
        response = build_response(parsed.uid, decision, mutating=mutating)["response"]
        assert response == {"uid": UID, "allowed": True}


@pytest.mark.parametrize("obj", [pytest.param(GANG_MISSING, id="denied"), pytest.param(QUEUED, id="allowed")])
def test_dry_run_gets_the_same_decision(engine: Engine, obj: dict[str, Any]) -> None:
    wet = decide(engine, obj)[1]
    dry = decide(engine, obj, dryRun=True)[1]
    for mutating in (True, False):
        assert comparable(build_response(UID, dry, mutating=mutating)) == comparable(
            build_response(UID, wet, mutating=mutating)
        )


def comparable(out: dict[str, Any]) -> dict[str, Any]:
    """The response with its patch decoded: CEL maps do not promise a key order, so bytes may differ."""
    response = dict(out["response"])
    if "patch" in response:
        response["patch"] = decoded_patch(response)
    return response

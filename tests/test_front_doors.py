"""`check`, `review` and the webhook give one answer on objects that cannot be read as Kubernetes
objects: exit 2 from both commands and 400 from the webhook, each naming the document and field.

These objects reach every front door through the same structural checks (webhook.documents), so
no engine cache ever sees a name that is a mapping or a value nested past the bound.
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.exceptions import StarletteDeprecationWarning

from webhook import documents
from webhook.cli import main
from webhook.config import load_config
from webhook.documents import MAX_DEPTH, MAX_TEXT_ENTRIES
from webhook.engine import build_engine, default_policies_dir, load_policy_set
from webhook.serve.app import ServerState, create_app

with warnings.catch_warnings():
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient


def pod(**metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", **metadata},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


class Nested:
    """`depth` mappings nested in one another, written out only as text (encoders stop far sooner)."""

    def __init__(self, depth: int) -> None:
        self.text = '{"a":' * depth + "1" + "}" * depth


def nested(depth: int) -> dict[str, Any]:
    """A Pod whose spec carries `depth` mappings nested in one another under spec.extra."""
    obj = pod()
    obj["spec"]["extra"] = Nested(depth)
    return obj


def encode(value: Any) -> str:
    deep: list[Nested] = []

    def mark(n: Nested) -> str:
        deep.append(n)
        return "\0deep"

    text = json.dumps(value, default=mark)
    return text.replace('"\\u0000deep"', deep[0].text) if deep else text


# (object, the field named in every answer, words of the message)
UNREADABLE = [
    pytest.param(pod(namespace={"a": "b"}), "metadata.namespace", "must be a string", id="namespace-mapping"),
    pytest.param(pod(namespace=["a"]), "metadata.namespace", "must be a string", id="namespace-list"),
    pytest.param(
        {**pod(), "metadata": {"name": {"x": 1}}}, "metadata.name", "must be a string", id="name-mapping"
    ),
    pytest.param(
        pod(generateName=["g-"]), "metadata.generateName", "must be a string", id="generate-name-list"
    ),
    pytest.param(pod(labels=["a", "b"]), "metadata.labels", "mapping of strings", id="labels-list"),
    pytest.param(
        pod(labels={"app": {"x": "y"}}), "metadata.labels.app", "must be a string", id="label-value-map"
    ),
    pytest.param(
        pod(annotations={"note": ["x"]}),
        "metadata.annotations.note",
        "must be a string",
        id="annotation-list",
    ),
    pytest.param(
        pod(ownerReferences={"kind": "Job"}), "metadata.ownerReferences", "list", id="owners-mapping"
    ),
    pytest.param(
        pod(finalizers=[{"a": 1}]), "metadata.finalizers[0]", "must be a string", id="finalizer-map"
    ),
    pytest.param(
        pod(managedFields=["f"]), "metadata.managedFields[0]", "must be a mapping", id="managed-field-string"
    ),
    pytest.param(pod(generation=True), "metadata.generation", "must be an integer", id="generation-boolean"),
    pytest.param(pod(uid=False), "metadata.uid", "must be a string", id="uid-boolean"),
    pytest.param({**pod(), "metadata": ["p"]}, "metadata", "must be a mapping", id="metadata-list"),
    pytest.param(nested(990), "spec.extra.a.a", f"nested deeper than {MAX_DEPTH} levels", id="990-deep"),
    pytest.param(
        nested(MAX_DEPTH), "spec.extra.a.a", f"nested deeper than {MAX_DEPTH} levels", id="one-past"
    ),
]


def write(tmp_path: Path, obj: dict[str, Any]) -> Path:
    path = tmp_path / "in.yaml"
    # A ConfigMap first: the document number in the message must be the Pod's.
    path.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n---\n" + encode(obj))
    return path


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    state = ServerState()
    state.install(build_engine(load_policy_set([default_policies_dir()]), load_config()))
    with TestClient(create_app(state)) as c:
        yield c


def admit(client: TestClient, obj: dict[str, Any], path: str = "/validate") -> Any:
    body = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "object": obj,
            "userInfo": {"username": "tenant"},
        },
    }
    return client.post(path, content=encode(body), headers={"content-type": "application/json"})


@pytest.mark.parametrize("command", ["check", "review"])
@pytest.mark.parametrize(("obj", "field", "words"), UNREADABLE)
def test_the_commands_exit_2_naming_document_and_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, obj: Any, field: str, words: str
) -> None:
    path = write(tmp_path, obj)
    code = main([command, str(path)])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert f"{path}, document 2" in err
    assert f"field {field}" in err and words in err
    assert "Traceback" not in out + err


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
@pytest.mark.parametrize(("obj", "field", "words"), UNREADABLE)
def test_the_webhook_answers_400_naming_the_field(
    client: TestClient, path: str, obj: Any, field: str, words: str
) -> None:
    response = admit(client, obj, path)
    assert response.status_code == 400, response.text
    assert f"field request.object.{field}" in response.text and words in response.text


def test_an_object_at_the_depth_bound_is_decided_everywhere(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, client: TestClient
) -> None:
    obj = nested(MAX_DEPTH - 2)  # the Pod, spec and extra's mappings: MAX_DEPTH levels in all
    path = write(tmp_path, obj)
    for command in ("check", "review"):
        assert main([command, str(path)]) == 0, capsys.readouterr()
    capsys.readouterr()
    response = admit(client, obj)
    assert response.status_code == 200 and response.json()["response"]["allowed"] is True


def test_a_file_of_millions_of_keys_is_refused_before_it_is_decoded(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """31 MB of YAML with 2.7 million keys: refused on a count of the text, naming the cap."""
    path = tmp_path / "huge.yaml"
    with path.open("w") as f:
        f.write("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: huge}\ndata:\n")
        f.writelines(f" {i:x}: v\n" for i in range(2_700_000))
    started = time.process_time()
    for command in ("check", "review"):
        assert main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert f"{path}: holds more than {MAX_TEXT_ENTRIES:,} lines and flow entries" in err
    # CPU, not wall time: the parser would take tens of CPU seconds; the count takes a fraction of one.
    assert time.process_time() - started < 10


@pytest.mark.parametrize("values", [100, 101], ids=["at-the-cap", "one-past"])
def test_an_object_of_more_values_than_the_cap_is_refused_everywhere(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    client: TestClient,
    monkeypatch: pytest.MonkeyPatch,
    values: int,
) -> None:
    """Under a file's bound but over an object's. The cap is lowered to keep the test small: the
    shipped MAX_VALUES takes seconds of decoding to reach."""
    monkeypatch.setattr(documents, "MAX_VALUES", 100)
    obj = pod()
    # The Pod's own values (metadata, name, spec, containers, …) with the list's fill to `values`.
    obj["spec"]["extra"] = []
    obj["spec"]["extra"] = [0] * (values - count_values(obj))
    accepted = values <= 100
    path = write(tmp_path, obj)
    for command in ("check", "review"):
        code = main([command, str(path)])
        err = capsys.readouterr().err
        assert code == (0 if accepted else 2), err
        assert accepted or "holds more than 100 values" in err
    # A body of more than 200 bytes: the webhook counts.
    response = admit(client, obj)
    assert response.status_code == (200 if accepted else 400), response.text
    assert accepted or "holds more than 100 values" in response.text


def count_values(value: Any) -> int:
    if isinstance(value, dict):
        return len(value) + sum(count_values(v) for v in value.values())
    if isinstance(value, list):
        return len(value) + sum(count_values(v) for v in value)
    return 0


def test_a_large_real_object_is_decided_by_the_webhook(client: TestClient) -> None:
    """Over a megabyte, under the cap on values: counted on the text, then decided."""
    obj = pod()
    obj["spec"]["containers"][0]["env"] = [{"name": f"V{i}", "value": "x" * 48} for i in range(20_000)]
    response = admit(client, obj)
    assert len(encode(obj)) > 1024 * 1024
    assert response.status_code == 200 and response.json()["response"]["allowed"] is True


def test_a_list_is_bounded_item_by_item(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `kubectl get -o yaml` prints for a large cluster: many objects, each under the cap."""
    monkeypatch.setattr(documents, "MAX_VALUES", 100)
    items = [pod() for _ in range(20)]
    for i, item in enumerate(items):
        item["metadata"]["name"] = f"p{i}"
    path = tmp_path / "list.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    assert main(["check", str(path)]) == 0, capsys.readouterr()
    items[3]["spec"]["extra"] = [0] * 100
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    assert main(["check", str(path)]) == 2
    assert "field items[3]: holds more than 100 values" in capsys.readouterr().err

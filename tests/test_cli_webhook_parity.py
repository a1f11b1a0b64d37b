"""The CLI and the webhook give the same answer for every manifest of the corpus and of deploy/examples.

The CLI mutates then validates in one call. The API server calls the mutating webhook, applies its
patch, then calls the validating webhook with the mutated object. Both paths must agree on the
decision, the patch, the warnings and the audit annotations, and a second /mutate of the mutated
object must return no patch (the API server re-invokes mutating webhooks: `reinvocationPolicy`).
"""

from __future__ import annotations

import base64
import copy
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
from starlette.exceptions import StarletteDeprecationWarning

from tests.conftest import REPO, shared_dir
from webhook.cli._file_engine import decide_all
from webhook.config import PlatformConfig, load_config
from webhook.context import context_objects
from webhook.documents import Document, read_manifests
from webhook.engine import (
    ClusterFacts,
    Decision,
    PolicySet,
    build_engine,
    default_policies_dir,
    load_policy_set,
)
from webhook.serve import admission_review as codec
from webhook.serve.app import ServerState, create_app

with warnings.catch_warnings():
    # Starlette 1.x prefers httpx2 for its TestClient and warns when it falls back to httpx, which
    # serves these tests the same.
    warnings.simplefilter("ignore", StarletteDeprecationWarning)
    from starlette.testclient import TestClient

NAMESPACE = "default"  # what `trainguard check` assumes for objects that name none


SHARED = shared_dir()


def manifest_files() -> list[Path]:
    roots = [REPO / "deploy" / "examples", *([SHARED / "corpus"] if SHARED else [])]
    return sorted(
        p for root in roots if root.is_dir() for p in root.rglob("*") if p.suffix in (".yaml", ".yml")
    )


def file_id(path: Path) -> str:
    for root in (*([SHARED] if SHARED else []), REPO):
        if path.is_relative_to(root):
            return str(path.relative_to(root))
    return str(path)


FILES = manifest_files()


@pytest.fixture(scope="module")
def policies() -> PolicySet:
    # Compiling the shipped policies takes a fraction of a second: once for the whole corpus.
    return load_policy_set([default_policies_dir()])


@pytest.fixture(scope="module")
def config() -> PlatformConfig:
    return load_config()


@pytest.fixture(scope="module")
def webhook() -> Iterator[tuple[ServerState, TestClient]]:
    state = ServerState()
    with TestClient(create_app(state)) as client:
        yield state, client


def admission_review(obj: dict[str, Any], uid: str) -> bytes:
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    meta = obj.get("metadata") or {}
    return orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": group, "version": version, "kind": obj.get("kind")},
                "namespace": meta.get("namespace") or NAMESPACE,
                "name": meta.get("name"),
                "operation": "CREATE",
                "userInfo": {"username": "parity"},
                "object": obj,
            },
        }
    )


def call(client: TestClient, path: str, obj: dict[str, Any], uid: str) -> dict[str, Any]:
    response = client.post(
        path, content=admission_review(obj, uid), headers={"content-type": "application/json"}
    )
    assert response.status_code == 200, response.text
    out: dict[str, Any] = response.json()["response"]
    assert out["uid"] == uid
    return out


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    if "patch" not in response:
        return []
    assert response["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = orjson.loads(base64.b64decode(response["patch"]))
    return ops


def cli_view(decision: Decision) -> dict[str, Any]:
    """What the API server would see from the CLI's decision, in the webhook's words."""
    out = codec.build_response("cli", decision, mutating=True)["response"]
    return {
        "allowed": decision.allowed,
        "message": out.get("status", {}).get("message"),
        "warnings": sorted(out.get("warnings", [])),
        "audits": out.get("auditAnnotations", {}),
        "patch": decision.patch,
    }


def webhook_view(client: TestClient, obj: dict[str, Any], uid: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Mutate, apply the patch, validate the result: the view, and the mutated object."""
    mutated = call(client, "/mutate", obj, uid)
    patch = patch_of(mutated)
    # jsonpatch inserts op values by reference (later ops then edit them): apply a copy.
    patched = jsonpatch.apply_patch(obj, copy.deepcopy(patch)) if patch else obj
    if not mutated["allowed"]:  # the API server stops at the first denial
        validated: dict[str, Any] = {"allowed": True}
    else:
        validated = call(client, "/validate", patched, uid)
    view = {
        "allowed": mutated["allowed"] and validated["allowed"],
        "message": (mutated if not mutated["allowed"] else validated).get("status", {}).get("message"),
        "warnings": sorted([*mutated.get("warnings", []), *validated.get("warnings", [])]),
        "audits": {**mutated.get("auditAnnotations", {}), **validated.get("auditAnnotations", {})},
        "patch": patch,
    }
    return view, patched


@pytest.mark.skipif(not FILES, reason="no manifests in the shared corpus or deploy/examples")
@pytest.mark.parametrize("path", FILES, ids=[file_id(p) for p in FILES])
def test_cli_and_webhook_agree(
    path: Path, policies: PolicySet, config: PlatformConfig, webhook: tuple[ServerState, TestClient]
) -> None:
    docs: list[Document] = read_manifests([str(path)])
    runtimes, priority_classes = context_objects(d.data for d in docs)
    # The CLI finds TrainingRuntimes and PriorityClasses beside the workloads; the webhook gets the
    # same from its cluster caches.
    engine = build_engine(
        policies, config, ClusterFacts(priority_classes=priority_classes, runtimes=runtimes)
    )
    state, client = webhook
    state.install(engine)
    for doc, decision in zip(docs, decide_all(engine, docs, NAMESPACE), strict=True):
        uid = f"{file_id(path)}#{doc.index}"
        view, patched = webhook_view(client, doc.data, uid)
        assert view == cli_view(decision), uid
        assert patch_of(call(client, "/mutate", patched, uid)) == [], f"{uid}: a second /mutate patches again"

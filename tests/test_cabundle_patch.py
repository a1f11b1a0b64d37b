"""The JSON Patch that writes only caBundle, applied with the jsonpatch library to what it reads."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from webhook.cluster import ca_bundle_patch

NEW, OLD = "TkVX", "T0xE"


def configuration(*bundles: str | None) -> dict[str, Any]:
    hooks = []
    for index, bundle in enumerate(bundles):
        client_config: dict[str, Any] = {"url": f"https://127.0.0.1:8443/{index}"}
        if bundle is not None:
            client_config["caBundle"] = bundle
        hooks.append(
            {"name": f"hook-{index}.trainguard.dev", "clientConfig": client_config, "sideEffects": "None"}
        )
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "metadata": {"name": "trainguard"},
        "webhooks": hooks,
    }


@pytest.mark.parametrize(
    ("bundles", "writes"),
    [
        pytest.param((None,), 1, id="no-caBundle-yet"),
        pytest.param((OLD,), 1, id="rotated-ca"),
        pytest.param((NEW,), 0, id="already-current-no-write"),
        pytest.param((NEW, None, OLD), 2, id="only-the-stale-webhooks"),
        pytest.param((), 0, id="no-webhooks"),
    ],
)
def test_the_patch_sets_every_caBundle_and_touches_nothing_else(
    bundles: tuple[str | None, ...], writes: int
) -> None:
    before = configuration(*bundles)
    ops = ca_bundle_patch(before, NEW)
    assert len([op for op in ops if op["op"] == "add"]) == writes
    after = jsonpatch.apply_patch(before, ops)
    expected = copy.deepcopy(before)
    for hook in expected["webhooks"]:
        hook["clientConfig"]["caBundle"] = NEW
    assert after == expected


def test_a_configuration_reordered_since_the_read_fails_the_test_op() -> None:
    read = configuration(None, None)
    ops = ca_bundle_patch(read, NEW)
    reordered = copy.deepcopy(read)
    reordered["webhooks"].reverse()
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(reordered, ops)

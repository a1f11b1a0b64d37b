"""Every PlatformConfig field is typed by one schema: a wrong type is refused naming the field, by
`check` (exit 2, no traceback), by `serve` at start (exit 2) and on reload (the last good config
keeps serving)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import yaml

from tests.conftest import REPO
from tests.test_server_tls import (
    UID,
    client_context,
    metric,
    running,
    serve_argv,
    settings_for,
    validate,
    wait_for,
)
from webhook.cli import main
from webhook.config import load_config, schema

EXAMPLE = REPO / "deploy" / "examples" / "finetune-single-node-a.yaml"

# (config text, the field named, words of the message)
MISTYPED = [
    pytest.param("tiers: {values: 5}\n", "tiers.values", "must be a mapping", id="tiers-values-a-number"),
    pytest.param("tiers: {values: {high: lots}}\n", "tiers.values.high", "an integer", id="priority-value-text"),
    pytest.param("topology: {rackKey: [a, b]}\n", "topology.rackKey", "a non-empty string or null", id="rack-key-list"),
    pytest.param("topology: {hostKey: null}\n", "topology.hostKey", "a non-empty string", id="host-key-null"),
    pytest.param("pools: {assignTraining: 'yes'}\n", "pools.assignTraining", "true or false", id="switch-a-string"),
    pytest.param("pools: {labelKey: ''}\n", "pools.labelKey", "a non-empty string", id="pool-key-empty"),
    pytest.param("restarts: {max: many}\n", "restarts.max", "an integer", id="restarts-text"),
    pytest.param("restarts: {max: -1}\n", "restarts.max", "an integer >= 0", id="restarts-negative"),
    pytest.param(
        "checkpoint: {minGracePeriodSeconds: true}\n", "checkpoint.minGracePeriodSeconds", "an integer",
        id="grace-a-boolean",
    ),
    pytest.param("checkpoint: {minInterval: 300}\n", "checkpoint.minInterval", "a duration", id="interval-number"),
    pytest.param("checkpoint: {schemes: s3}\n", "checkpoint.schemes", "a list", id="schemes-not-a-list"),
    pytest.param("queues: {namespaces: {team-a: [lq]}}\n", "queues.namespaces.team-a", "a non-empty string",
                 id="queue-a-list"),
    pytest.param("queues: {namespaces: [team-a]}\n", "queues.namespaces", "a mapping", id="queues-a-list"),
    pytest.param("tiers: {priorityClasses: {guaranteed: high}}\n", "tiers.priorityClasses.guaranteed", "a list",
                 id="priority-classes-a-string"),
    pytest.param("tiers: {assign: {preemptible: 3}}\n", "tiers.assign.preemptible", "a non-empty string or null",
                 id="assigned-class-a-number"),
    pytest.param("excludedNamespaces: kube-system\n", "excludedNamespaces", "a list", id="excluded-a-string"),
    pytest.param("excludedNamespaces: [Not_A_Namespace]\n", "excludedNamespaces.0", "matching",
                 id="excluded-not-a-name"),
    pytest.param(
        "recovery: {tiers: {preemptible: {cooldown: 5}}}\n", "recovery.tiers.preemptible.cooldown", "a duration",
        id="recovery-duration-a-number",
    ),
    pytest.param(
        "recovery: {tiers: {preemptible: {maxResumingPerQueue: 0}}}\n",
        "recovery.tiers.preemptible.maxResumingPerQueue", "an integer >= 1", id="recovery-count-zero",
    ),
    pytest.param("recovery: {tiers: {spot: {}}}\n", "recovery.tiers.spot", "unknown field", id="recovery-unknown-tier"),
    pytest.param("pools: {lableKey: x}\n", "pools.lableKey", "unknown field", id="unknown-nested-field"),
]  # fmt: skip


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "platform.yaml"
    path.write_text("apiVersion: trainguard.dev/v1alpha1\nkind: PlatformConfig\n" + text)
    return path


@pytest.mark.parametrize(("text", "field", "words"), MISTYPED)
def test_check_exits_2_naming_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str, field: str, words: str
) -> None:
    path = write(tmp_path, text)
    code = main(["check", "--config", str(path), str(EXAMPLE)])
    out, err = capsys.readouterr()
    assert code == 2, out + err
    assert f"{path}: " in err and field in err and words in err, err
    assert "Traceback" not in out + err


def leaves(value: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(value, dict) and value and path[-1:] not in (("namespaces",), ("values",)):
        return [leaf for k, v in value.items() for leaf in leaves(v, (*path, k))]
    return [path]


def test_every_field_of_the_defaults_has_a_type() -> None:
    """A field added to the defaults without a type in the schema fails here."""
    defaults = yaml.safe_load((REPO / "webhook" / "_data" / "platform-defaults.yaml").read_text("utf-8"))
    jsonschema.Draft7Validator(schema()).validate(defaults)
    for path in leaves(defaults):
        node = schema()
        for key in path:
            node = node.get("properties", {}).get(key) or next(
                (s["properties"][key] for s in node.get("oneOf", ()) if key in s.get("properties", {})), {}
            )
        assert "type" in node or "oneOf" in node or "const" in node, f"{'.'.join(path)} has no type"


def test_well_typed_config_loads(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "tiers: {values: {high: 1000}, priorityClasses: {preemptible: [spot]}}\n"
        "topology: {rackKey: cloud.example.com/rack}\n"
        "recovery: {tiers: {preemptible: {cooldown: 10m, preemptionsPerHour: 0.5}}}\n",
    )
    config = load_config(path)
    assert config.raw["topology"]["rackKey"] == "cloud.example.com/rack"
    assert config.tier_for_priority_class("spot") == "preemptible"
    assert config.raw["recovery"]["tiers"]["preemptible"]["cooldownSeconds"] == 600


def test_serve_refuses_to_start_with_a_mistyped_config(files: Path) -> None:
    path = write(files, "tiers: {values: 5}\n")
    argv = [*serve_argv(files, "--config", str(path)), "--port", "0"]
    # A process of its own: its exit code and stderr are what an operator sees.
    served = subprocess.run(
        [sys.executable, "-m", "webhook", *argv], capture_output=True, text=True, timeout=120, check=False
    )
    assert served.returncode == 2, served.stderr
    assert "field tiers.values must be a mapping" in served.stderr
    assert "Traceback" not in served.stderr


def test_a_reload_to_a_mistyped_config_keeps_the_last_good_one(files: Path) -> None:
    config = write(files, "excludedNamespaces: [research]\n")
    with (
        running(settings_for(files, config=str(config))) as server,
        httpx.Client(verify=client_context(files)) as client,
    ):
        assert validate(client, server) == {"uid": UID, "allowed": True}  # its namespace is excluded
        write(files, "excludedNamespaces: [research]\ntopology: {rackKey: [a, b]}\n")
        wait_for(
            lambda: metric(server, "trainguard_reloads_total", source="config", result="failure") == 1,
            "the mistyped config to be rejected",
        )
        assert validate(client, server) == {"uid": UID, "allowed": True}
        assert server.state.engine is not None
        assert server.state.engine.config.raw["topology"]["rackKey"] is None

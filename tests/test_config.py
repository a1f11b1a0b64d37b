"""PlatformConfig: embedded defaults, field-by-field overrides, and refusals that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.config import load_config, parse_duration
from webhook.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("30m", 1800, id="minutes"),
        pytest.param("1h", 3600, id="hours"),
        pytest.param("1h30m", 5400, id="hours-and-minutes"),
        pytest.param("90s", 90, id="seconds"),
        pytest.param("", None, id="empty"),
        pytest.param("30", None, id="bare-number"),
        pytest.param("half an hour", None, id="words"),
        pytest.param("1d", None, id="days-are-not-go-durations"),
    ],
)
def test_parse_duration(text: str, seconds: int | None) -> None:
    assert parse_duration(text) == seconds


def test_embedded_defaults_match_the_design() -> None:
    config = load_config()
    cp = config.raw["checkpoint"]
    assert (cp["minIntervalSeconds"], cp["maxIntervalSeconds"], cp["minGracePeriodSeconds"]) == (
        300,
        7200,
        60,
    )
    assert config.raw["queues"]["namespaces"] == {}
    assert (config.pool_label_key, config.raw["pools"]["training"], config.raw["pools"]["inference"]) == (
        "trainguard.dev/pool",
        "training",
        "inference",
    )
    assert config.raw["pools"]["assignTraining"] is False
    # NVIDIA (whole GPUs and MIG slices), AMD and Intel Gaudi count as GPUs by default.
    assert {"nvidia.com/gpu", "nvidia.com/mig-*", "amd.com/gpu", "habana.ai/gaudi"} <= set(
        config.accelerators
    )


def test_file_overrides_only_the_fields_it_names(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "apiVersion: trainguard.dev/v1alpha1\nkind: PlatformConfig\n"
        "queues:\n  namespaces: {team-a: lq-a}\ncheckpoint:\n  maxInterval: 4h\n"
        "tiers:\n  priorityClasses:\n    preemptible: [spot]\n"
    )
    config = load_config(path)
    assert config.raw["queues"]["namespaces"] == {"team-a": "lq-a"}
    assert config.raw["checkpoint"]["maxIntervalSeconds"] == 4 * 3600
    assert config.raw["checkpoint"]["minInterval"] == "5m"
    assert config.tier_for_priority_class("spot") == "preemptible"
    assert config.tier_for_priority_class("other") is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        pytest.param("queus: {}\n", "unknown field queus", id="typo-at-top-level"),
        pytest.param("pools:\n  lableKey: x\n", "unknown field pools.lableKey", id="typo-nested"),
        pytest.param("checkpoint:\n  minInterval: 3h\n", "min <= max", id="bounds-inverted"),
        pytest.param(
            "checkpoint:\n  maxInterval: soon\n",
            "field checkpoint.maxInterval must be a duration such as 90s",
            id="bound-not-a-duration",
        ),
        pytest.param("kind: Policy\n", "kind must be PlatformConfig", id="wrong-kind"),
        pytest.param("a: 1\na: 2\n", "duplicate key 'a'", id="duplicate-key"),
        pytest.param(
            "restarts:\n  max: many\n", "field restarts.max must be an integer", id="restarts-not-int"
        ),
        pytest.param(
            "accelerators: nvidia.com/gpu\n", "accelerators must be a list", id="accelerators-not-a-list"
        ),
        pytest.param(
            "accelerators: [nvidia.com/gpu, 8]\n",
            "field accelerators.1 must be a string (got 8)",
            id="accelerator-not-a-name",
        ),
        pytest.param(
            "accelerators: ['*']\n", "accelerators[0] must be a resource name", id="accelerator-only-a-star"
        ),
        pytest.param(
            "accelerators: [gpu]\n",
            "accelerators[0] is 'gpu': write a domain-prefixed",
            id="accelerator-no-domain",
        ),
        pytest.param(
            "accelerators: ['nvidia.com/*gpu']\n", "a prefix ending in *", id="accelerator-star-inside"
        ),
    ],
)
def test_bad_config_is_refused_naming_the_field(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert words in str(info.value)
    assert str(path) in str(info.value)

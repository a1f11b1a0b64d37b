"""PlatformConfig `recovery`: defaults that govern nothing, filled-in tier blocks, refusals naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.config import load_config
from webhook.errors import ConfigError


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "platform.yaml"
    path.write_text("apiVersion: trainguard.dev/v1alpha1\nkind: PlatformConfig\n" + body, encoding="utf-8")
    return path


def test_embedded_defaults_govern_no_tier() -> None:
    config = load_config()
    assert config.recovery("preemptible") is None
    assert config.recovery("guaranteed") is None


def test_a_tier_block_is_filled_with_defaults_and_seconds(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path, "recovery:\n  tiers:\n    preemptible: {cooldown: 10m, resumePriorityClass: resume}\n"
        )
    )
    assert config.recovery("preemptible") == {
        "resumePriorityClass": "resume",
        "cooldown": "10m",
        "cooldownSeconds": 600,
        "maxResumingPerQueue": 1,
        "maxGated": "30m",
        "maxGatedSeconds": 1800,
        "settle": "60s",
        "settleSeconds": 60,
        "preemptionsPerHour": 0.0,
        "restartTime": "2m",
        "restartTimeSeconds": 120,
    }
    assert config.recovery("guaranteed") is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(
            "recovery:\n  tiers:\n    spot: {}\n", "unknown field recovery.tiers.spot", id="unknown-tier"
        ),
        pytest.param(
            "recovery:\n  tiers:\n    preemptible: {cooldwn: 5m}\n",
            "unknown field recovery.tiers.preemptible.cooldwn",
            id="misspelt-field",
        ),
        pytest.param(
            "recovery:\n  tiers:\n    preemptible: {cooldown: 5}\n",
            "recovery.tiers.preemptible.cooldown must be a duration such as 90s, 5m or 1h (got 5)",
            id="cooldown-not-a-duration",
        ),
        pytest.param(
            "recovery:\n  tiers:\n    preemptible: {maxResumingPerQueue: 0}\n",
            "recovery.tiers.preemptible.maxResumingPerQueue must be an integer >= 1 (got 0)",
            id="zero-concurrency",
        ),
        pytest.param(
            "recovery:\n  tiers:\n    preemptible: {preemptionsPerHour: -1}\n",
            "recovery.tiers.preemptible.preemptionsPerHour must be a number >= 0 (got -1)",
            id="negative-rate",
        ),
        pytest.param(
            "recovery:\n  tiers:\n    preemptible: {resumePriorityClass: 7}\n",
            "recovery.tiers.preemptible.resumePriorityClass must be a PriorityClass name or null (got 7)",
            id="class-not-a-name",
        ),
        pytest.param(
            "recovery:\n  tiers:\n    preemptible: {cooldown: 1h, maxGated: 10m}\n",
            "recovery.tiers.preemptible.maxGated (10m) must not be shorter than its cooldown (1h)",
            id="bound-shorter-than-cooldown",
        ),
        pytest.param(
            "recovery:\n  tiers:\n    preemptible: 5m\n",
            "recovery.tiers.preemptible must be a mapping",
            id="tier-not-a-mapping",
        ),
    ],
)
def test_bad_recovery_settings_are_refused_naming_the_field(tmp_path: Path, body: str, message: str) -> None:
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value).startswith(str(path) + ": ")
    assert message in str(info.value)

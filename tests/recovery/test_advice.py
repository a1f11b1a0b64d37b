"""Checkpoint-interval advice against hand-computed values, and review question 4 as a user reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webhook.cli import main
from webhook.reviewgate.advice import checkpoint_advice, duration, interval_cost, young_daly

# Hand computation for C = 60 s, λ = 0.5/h (1/7200 per s), restart R = 120 s:
#   τ = √(2·60·7200) = √864000 = 929.516 s
#   at τ:  lost = τ/2 + R = 584.758 s; overhead = 60/929.516 = 0.064550;
#          waste = 0.064550 + 584.758/7200 = 0.145766
#   at 1h: lost = 1800 + 120 = 1920 s; overhead = 60/3600 = 0.016667;
#          waste = 0.016667 + 1920/7200 = 0.283333


def test_young_daly_interval() -> None:
    assert young_daly(60, 0.5) == pytest.approx(929.516, abs=1e-3)
    assert young_daly(10, 6) == pytest.approx(109.545, abs=1e-3)  # √(2·10·600)


@pytest.mark.parametrize(
    ("interval", "lost", "overhead", "waste"),
    [
        pytest.param(929.516, 584.758, 0.064550, 0.145766, id="at-tau"),
        pytest.param(3600, 1920, 0.016667, 0.283333, id="one-hour"),
        pytest.param(300, 270, 0.2, 0.2375, id="five-minutes"),  # 60/300; 0.2 + 270/7200
    ],
)
def test_interval_cost(interval: float, lost: float, overhead: float, waste: float) -> None:
    cost = interval_cost(interval, 60, 0.5, 120)
    assert cost.lost_per_preemption == pytest.approx(lost, abs=1e-3)
    assert cost.overhead == pytest.approx(overhead, abs=1e-6)
    assert cost.waste == pytest.approx(waste, abs=1e-6)


def test_tau_is_the_least_waste() -> None:
    a = checkpoint_advice(60, 0.5, 120, None)
    assert a is not None
    for factor in (0.5, 0.9, 1.1, 2.0):
        assert interval_cost(a.suggested.interval * factor, 60, 0.5, 120).waste > a.suggested.waste


@pytest.mark.parametrize(
    ("declared", "far"),
    [
        pytest.param(900, False, id="15m-near"),
        pytest.param(1800, False, id="30m-within-2x"),
        pytest.param(1900, True, id="just-over-2x"),
        pytest.param(420, True, id="7m-under-half"),
    ],
)
def test_far_means_more_than_twice_away(declared: float, far: bool) -> None:
    a = checkpoint_advice(60, 0.5, 120, declared)
    assert a is not None and a.far is far


@pytest.mark.parametrize(
    ("save", "rate"), [pytest.param(None, 0.5, id="no-save-time"), pytest.param(60, 0, id="no-rate")]
)
def test_no_advice_without_a_trade_off(save: float | None, rate: float) -> None:
    assert checkpoint_advice(save, rate, 120, 900) is None


@pytest.mark.parametrize(
    ("seconds", "text"), [(45, "45s"), (929.5, "15m30s"), (1920, "32m"), (7500, "2h5m"), (3600, "1h")]
)
def test_duration(seconds: float, text: str) -> None:
    assert duration(seconds) == text


JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: spot-train
  namespace: ml
  labels: {trainguard.dev/tier: preemptible, kueue.x-k8s.io/queue-name: team-lq}
  annotations:
    trainguard.dev/checkpoint-interval: 1h
    trainguard.dev/checkpoint-uri: s3://bucket/run
    trainguard.dev/checkpoint-owner: team-a
    trainguard.dev/checkpoint-save-seconds: "60"
spec:
  backoffLimit: 3
  template:
    spec:
      restartPolicy: Never
      terminationGracePeriodSeconds: 120
      containers: [{name: t, image: x}]
"""
CONFIG = """\
apiVersion: trainguard.dev/v1alpha1
kind: PlatformConfig
tiers: {values: {training-resume: 5000}}
recovery:
  tiers:
    preemptible:
      resumePriorityClass: training-resume
      cooldown: 5m
      maxResumingPerQueue: 2
      preemptionsPerHour: 0.5
"""


def test_review_question_4_names_the_platforms_answer_and_the_advice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "job.yaml").write_text(JOB)
    (tmp_path / "platform.yaml").write_text(CONFIG)
    code = main(
        ["review", str(tmp_path / "job.yaml"), "--config", str(tmp_path / "platform.yaml"), "-o", "json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    (workload,) = out["reviews"]
    (q4,) = [a for a in workload["answers"] if a["question"] == "recovery"]
    assert q4["verdict"] == "needs attention"  # the checkpoint-interval-advice warning is about it
    assert (
        "The platform gates its pods after a preemption: resumes at priority class training-resume "
        "(value 5000), 5m cooldown, at most 2 workload(s) of queue team-lq resuming at once, "
        "never gated longer than 30m." in q4["summary"]
    )
    assert (
        "Checkpoint advice (save time 60 s, 0.5 preemptions/hour, restart 2m): every 15m30s (Young/Daly), "
        "losing about 9m45s per preemption with 6.5% of the time spent saving (14.6% wasted in all); "
        "the declared 1h loses about 32m per preemption with 1.7% spent saving (28.3% wasted in all), "
        "more than 2x from the suggestion." in q4["summary"]
    )
    fields = {e["field"]: e["value"] for e in q4["evidence"]}
    assert fields["PlatformConfig recovery.tiers.preemptible.cooldown"] == "5m"
    assert fields["metadata.annotations[trainguard.dev/checkpoint-save-seconds]"] == "60"
    assert fields["metadata.annotations[trainguard.dev/checkpoint-interval]"] == "1h"
    assert fields["PlatformConfig recovery.tiers.preemptible.preemptionsPerHour"] == 0.5
    (finding,) = workload["findings"]
    assert (finding["policy"], finding["level"], finding["line"]) == ("checkpoint-interval-advice", "warn", 8)


def test_review_without_recovery_config_adds_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "job.yaml").write_text(JOB)
    main(["review", str(tmp_path / "job.yaml"), "-o", "json"])
    text = capsys.readouterr().out
    assert "Checkpoint advice" not in text and "The platform gates" not in text

"""Review question 4's recovery content: the platform's resume settings and checkpoint-interval advice.

Pure functions of the PlatformConfig and the Workload. The checkpoint arithmetic is the first-order
Young/Daly model: with a save that takes C seconds and preemptions arriving at λ per second, saving
every τ seconds costs C/τ of the time in saves, and each preemption loses on average τ/2 of work
since the last save plus the restart time R. The sum, C/τ + λ(τ/2 + R), is least at τ = √(2C/λ).
(The checkpoint-interval-advice policy makes the same comparison on squares, in CEL.)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from webhook.config import PlatformConfig
from webhook.workloads import Workload

SAVE_SECONDS = "trainguard.dev/checkpoint-save-seconds"
CHECKPOINT_INTERVAL = "trainguard.dev/checkpoint-interval"
_NUMBER = re.compile(r"^[0-9]+(\.[0-9]+)?$")
FAR = 2.0  # an interval more than this factor from τ is worth a warning


@dataclass(frozen=True, slots=True)
class IntervalCost:
    interval: float  # seconds between checkpoints
    lost_per_preemption: float  # seconds of work lost by one preemption: interval/2 + restart
    overhead: float  # fraction of time spent saving: C/interval
    waste: float  # fraction of time lost in all: overhead + λ · lost_per_preemption


@dataclass(frozen=True, slots=True)
class CheckpointAdvice:
    save_seconds: float
    preemptions_per_hour: float
    restart_seconds: float
    suggested: IntervalCost
    declared: IntervalCost | None

    @property
    def far(self) -> bool:
        """The declared interval is more than FAR times away from the suggested one."""
        if self.declared is None:
            return False
        ratio = self.declared.interval / self.suggested.interval
        return ratio > FAR or ratio < 1 / FAR


def young_daly(save_seconds: float, preemptions_per_hour: float) -> float:
    """τ = √(2C/λ) in seconds, λ given per hour."""
    return math.sqrt(2.0 * save_seconds / (preemptions_per_hour / 3600.0))


def interval_cost(
    interval: float, save_seconds: float, preemptions_per_hour: float, restart_seconds: float
) -> IntervalCost:
    lost = interval / 2.0 + restart_seconds
    overhead = save_seconds / interval
    return IntervalCost(interval, lost, overhead, overhead + preemptions_per_hour / 3600.0 * lost)


def parse_save_seconds(text: str | None) -> float | None:
    if text is None or not _NUMBER.match(text.strip()):
        return None
    value = float(text)
    return value if value > 0 else None


def checkpoint_advice(
    save_seconds: float | None,
    preemptions_per_hour: float,
    restart_seconds: float,
    declared_interval: float | None,
) -> CheckpointAdvice | None:
    """None without a save time or a preemption rate (nothing to trade off)."""
    if save_seconds is None or save_seconds <= 0 or preemptions_per_hour <= 0:
        return None
    tau = young_daly(save_seconds, preemptions_per_hour)
    declared = (
        interval_cost(declared_interval, save_seconds, preemptions_per_hour, restart_seconds)
        if declared_interval
        else None
    )
    return CheckpointAdvice(
        save_seconds,
        preemptions_per_hour,
        restart_seconds,
        interval_cost(tau, save_seconds, preemptions_per_hour, restart_seconds),
        declared,
    )


@dataclass(frozen=True, slots=True)
class RecoveryAdvice:
    summary: str  # sentences added to question 4's summary ("" when there is nothing to say)
    evidence: tuple[tuple[str, Any], ...]  # (field, value)


def recovery_advice(config: PlatformConfig, w: Workload, priority_values: dict[str, int]) -> RecoveryAdvice:
    """The platform's resume priority, cooldown and concurrency for the workload's tier, its own
    checkpoint bounds, and the checkpoint-interval advice, each with the field it comes from."""
    settings = config.recovery(w.tier)
    if settings is None:
        return RecoveryAdvice("", ())
    base = f"PlatformConfig recovery.tiers.{w.tier}"
    queue = w.gang.queue_name or (f"namespace {w.namespace}" if w.namespace else "its namespace")
    pc = settings["resumePriorityClass"]
    value = priority_values.get(pc) if pc else None
    priority = (
        f"resumes at priority class {pc}" + (f" (value {value})" if value is not None else "")
        if pc and w.tier == "preemptible"
        else "resumes at its own priority"
    )
    parts = [
        f"The platform gates its pods after a preemption: {priority}, {settings['cooldown']} cooldown, "
        f"at most {settings['maxResumingPerQueue']} workload(s) of queue {queue} resuming at once, "
        f"never gated longer than {settings['maxGated']}."
    ]
    evidence: list[tuple[str, Any]] = [
        (f"{base}.resumePriorityClass", pc),
        (f"{base}.cooldown", settings["cooldown"]),
        (f"{base}.maxResumingPerQueue", settings["maxResumingPerQueue"]),
        (f"{base}.maxGated", settings["maxGated"]),
    ]
    raw_save = w.annotations.get(SAVE_SECONDS)
    if raw_save is not None:
        evidence.append((f"metadata.annotations[{SAVE_SECONDS}]", raw_save))
    rate = float(settings["preemptionsPerHour"])
    advice = checkpoint_advice(
        parse_save_seconds(raw_save),
        rate,
        float(settings["restartTimeSeconds"]),
        w.checkpoint.interval_seconds,
    )
    if advice is not None:
        if w.checkpoint.interval is not None:
            evidence.append((f"metadata.annotations[{CHECKPOINT_INTERVAL}]", w.checkpoint.interval))
        evidence.append((f"{base}.preemptionsPerHour", settings["preemptionsPerHour"]))
        evidence.append((f"{base}.restartTime", settings["restartTime"]))
        parts.append(describe(advice, w.checkpoint.interval))
    elif raw_save is not None and parse_save_seconds(raw_save) is None:
        parts.append(f"{SAVE_SECONDS} is {raw_save!r}, not a number of seconds: no checkpoint advice.")
    return RecoveryAdvice(" ".join(parts), tuple(evidence))


def describe(a: CheckpointAdvice, declared_text: str | None) -> str:
    s = a.suggested
    out = (
        f"Checkpoint advice (save time {_num(a.save_seconds)} s, "
        f"{_num(a.preemptions_per_hour)} preemptions/hour, restart {duration(a.restart_seconds)}): "
        f"every {duration(s.interval)} (Young/Daly), losing about "
        f"{duration(s.lost_per_preemption)} per preemption with {_pct(s.overhead)} of the time spent saving "
        f"({_pct(s.waste)} wasted in all)"
    )
    d = a.declared
    if d is None:
        return out + "; no checkpoint interval declared."
    verdict = f", more than {_num(FAR)}x from the suggestion" if a.far else ""
    return (
        out + f"; the declared {declared_text or duration(d.interval)} loses about "
        f"{duration(d.lost_per_preemption)} per preemption with {_pct(d.overhead)} spent saving "
        f"({_pct(d.waste)} wasted in all){verdict}."
    )


def duration(seconds: float) -> str:
    """A rounded, readable duration: 45s, 15m30s, 2h5m."""
    total = round(seconds)
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h}h{m}m" if m else f"{h}h"
    if m:
        return f"{m}m{s}s" if s else f"{m}m"
    return f"{s}s"


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.1f}%"


def _num(value: float) -> str:
    return f"{value:g}"

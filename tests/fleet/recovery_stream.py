"""An arrival stream for the recovery side by side, driven on the fleet and read back as figures.

A seeded stream, in compressed time (seconds where production has minutes): a backlog of
preemptible jobs of three priority levels (more than the ClusterQueue holds, so a waiting job of a
higher level preempts a running one of a lower, Kueue's LowerPriority), and bursts of guaranteed
jobs that preempt any preemptible one and finish after their duration. Preemptible jobs keep
training until the horizon. The same stream runs with the resume gate on and off.

Figures come from the cluster's record, sampled about once a second:
- a preemption is an increase of a Workload's eviction count (Kueue's scheduling stats);
- a re-preemption is a preemption of a job within `window` seconds of its previous comeback
  (the moment its pods could start again: their release from the gate, or their creation
  without one);
- rollback: at each preemption, each of the job's pods that was Running loses its Running time
  since its last checkpoint (checkpoints every `checkpoint` seconds of Running), times its GPUs;
- time to resume: from a preemption to every pod of the job Running and Ready again;
- gated past maxGated: any comeback whose release came later than the bound (plus one tick).
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from webhook.recovery.plan import RELEASED_AT, parse_time

from . import recovery
from .fleet import GPUS_PER_NODE, Fleet

NAMESPACE = recovery.PRIORITY_NS
LEVELS = ("spot-0", "spot-1", "spot-2")
# A release at the bound is stamped on the tick after it, to the second.
BOUND_SLACK = 5.0


@dataclass(frozen=True)
class Arrival:
    name: str
    at: float  # seconds after the arm starts
    pods: int
    priority: str
    tier: str
    duration: float = 0.0  # guaranteed: seconds Running before it finishes; preemptible: never
    checkpoint: float = 20.0  # seconds of Running between checkpoints


@dataclass(frozen=True)
class StreamParams:
    horizon: float = 180.0
    backlog: int = 5  # preemptible jobs, all there at the start
    burst_every: float = 40.0  # mean seconds between guaranteed bursts
    window: float = 30.0  # a re-preemption this soon after a comeback is a thrash


def make_stream(p: StreamParams, seed: int) -> list[Arrival]:
    rng = random.Random(seed)
    out = [
        Arrival(
            f"spot-{i}",
            0.0,
            rng.choice((1, 2)),
            rng.choice(LEVELS),
            "preemptible",
            checkpoint=rng.choice((10.0, 20.0, 40.0)),
        )
        for i in range(p.backlog)
    ]
    t = rng.expovariate(1 / p.burst_every)
    n = 0
    while t < p.horizon * 0.8:  # the last bursts still have time to preempt and end
        at = t
        for _ in range(rng.randint(1, 2)):
            out.append(
                Arrival(
                    f"urgent-{n}",
                    round(at, 1),
                    rng.choice((2, 4)),
                    "urgent",
                    "guaranteed",
                    duration=rng.uniform(15, 45),
                )
            )
            n += 1
            at += rng.expovariate(1 / 5.0)
        t += rng.expovariate(1 / p.burst_every)
    return sorted(out, key=lambda a: a.at)


@dataclass
class JobTrack:
    arrival: Arrival
    evictions: list[datetime] = field(default_factory=list)
    comebacks: list[datetime] = field(default_factory=list)  # when pods could start again
    ready: dict[str, datetime] = field(default_factory=dict)  # pod name -> Ready since (live pods)
    # Per preemption: seconds from it to every pod Ready again (None: preempted again before that).
    resumed: list[float | None] = field(default_factory=list)
    finished: bool = False


@dataclass
class ArmResult:
    gate: bool
    preemptions: int = 0
    re_preemptions: int = 0
    evicted_while_gated: int = 0
    rollback_gpu_seconds: float = 0.0
    resume_seconds: list[float] = field(default_factory=list)
    unresumed: int = 0  # preemptions not followed by a full comeback before the horizon
    longest_gated: float = 0.0
    gated_past_max: bool = False

    def figures(self) -> dict[str, Any]:
        return {
            "preemptions": self.preemptions,
            "re_preemptions": self.re_preemptions,
            "evicted_while_gated": self.evicted_while_gated,
            "rollback_gpu_s": round(self.rollback_gpu_seconds, 1),
            "resume_s_median": round(statistics.median(self.resume_seconds), 1)
            if self.resume_seconds
            else None,
            "unresumed": self.unresumed,
            "longest_gated_s": round(self.longest_gated, 1),
            "gated_past_max": self.gated_past_max,
        }


def _job_of(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("labels") or {}).get(recovery.JOB_NAME_LABEL, ""))


def run_arm(fleet: Fleet, stream: list[Arrival], p: StreamParams, *, gate: bool, prefix: str) -> ArmResult:
    """Apply the stream on the recovery ClusterQueue, finish guaranteed jobs after their duration,
    and read the figures back; the namespace is cleared after. Jobs are named `prefix` + their
    arrival's name: an eviction record of an earlier arm's job of the same name, still in serve's
    cache for a moment after its deletion, must not gate a fresh job."""
    observer = recovery.Observer(fleet, [NAMESPACE])
    stream = [replace(a, name=prefix + a.name) for a in stream]
    tracks = {a.name: JobTrack(a) for a in stream}
    result = ArmResult(gate)
    pending = list(stream)
    began = time.monotonic()
    seen_evictions: dict[str, int] = {}
    try:
        while True:
            elapsed = time.monotonic() - began
            while pending and pending[0].at <= elapsed:
                a = pending.pop(0)
                fleet.apply(
                    [
                        recovery.job(
                            a.name,
                            NAMESPACE,
                            pods=a.pods,
                            priority=a.priority,
                            tier=a.tier,
                            checkpoint=a.checkpoint,
                        )
                    ]
                )
            previous = {name: dict(t.ready) for name, t in tracks.items()}
            pods = observer.sample()
            now = datetime.now(UTC)
            _update(tracks, pods, now)
            for key, count in observer.evicted.items():
                name = key.split("/", 1)[1]
                track = tracks.get(name)
                if track is None or count <= seen_evictions.get(name, 0):
                    continue
                for _ in range(count - seen_evictions.get(name, 0)):
                    _preempted(result, track, previous[name], now, p.window)
                seen_evictions[name] = count
            for track in tracks.values():
                a = track.arrival
                done = a.tier == "guaranteed" and not track.finished and len(track.ready) == a.pods
                if done and (now - max(track.ready.values())).total_seconds() >= a.duration:
                    recovery.finish(fleet, f"{NAMESPACE}/{a.name}")
                    track.finished = True
            if elapsed >= p.horizon and not pending:
                break
            time.sleep(max(0.0, 1.0 - (time.monotonic() - began - elapsed)))
        for t in tracks.values():
            result.resume_seconds += [s for s in t.resumed if s is not None]
            result.unresumed += len(t.evictions) - sum(s is not None for s in t.resumed)
        result.longest_gated = observer.longest_gated()
        result.gated_past_max = result.longest_gated > recovery.MAX_GATED + BOUND_SLACK
        return result
    finally:
        fleet.clear(NAMESPACE)


def _update(tracks: dict[str, JobTrack], pods: list[dict[str, Any]], now: datetime) -> None:
    live: dict[str, dict[str, datetime]] = {}
    starts: dict[str, datetime] = {}
    for pod in pods:
        meta = pod["metadata"]
        name = _job_of(pod)
        if name not in tracks or meta.get("deletionTimestamp"):
            continue
        ready = recovery.ready_since(pod)
        if ready is not None:
            live.setdefault(name, {})[meta["name"]] = ready
        # When this generation's pods could start: released from the gate, or created ungated.
        annotations = meta.get("annotations") or {}
        could = parse_time(annotations.get(RELEASED_AT))
        if could is None and not recovery.is_gated(pod):
            could = parse_time(meta.get("creationTimestamp"))
        if could is not None:
            starts[name] = min(starts.get(name, could), could)
    for name, track in tracks.items():
        track.ready = live.get(name, {})
        start = starts.get(name)
        new = not track.comebacks or (track.evictions and track.comebacks[-1] < track.evictions[-1])
        if track.evictions and start is not None and start > track.evictions[-1] and new:
            track.comebacks.append(start)
        all_ready = len(track.ready) == track.arrival.pods
        if all_ready and len(track.resumed) < len(track.evictions):
            since = track.evictions[-1]
            if min(track.ready.values()) >= since.replace(microsecond=0):
                track.resumed.append((max(track.ready.values()) - since).total_seconds())


def _preempted(
    result: ArmResult,
    track: JobTrack,
    ready_before: dict[str, datetime],
    now: datetime,
    window: float,
) -> None:
    result.preemptions += 1
    if track.evictions and track.comebacks and track.comebacks[-1] > track.evictions[-1]:
        if (now - track.comebacks[-1]).total_seconds() < window:
            result.re_preemptions += 1
    elif track.evictions:
        # Admitted again (Kueue evicts only admitted workloads) but preempted before its pods could
        # start: behind the gate, or in the moment between admission and pod creation.
        result.evicted_while_gated += 1
        result.re_preemptions += 1
    for since in ready_before.values():
        ran = max(0.0, (now - since).total_seconds())
        result.rollback_gpu_seconds += (ran % track.arrival.checkpoint) * GPUS_PER_NODE
    # A preemption before the previous one was resumed: that one never was.
    while len(track.resumed) < len(track.evictions):
        track.resumed.append(None)
    track.evictions.append(now)

"""Which gated workload resumes next: a pure function of the pods the resume gate marked, the tiers'
settings and the time.

The controller reads pods, calls `plan()`, and carries out what it says; everything that decides
lives here so that it is tested without an API server. A workload is the set of pods sharing the
`trainguard.dev/resume-workload` annotation (the mutation writes it), and is released whole.

    gated       at least one of its pods still carries the gate
    resuming    released, and not yet settled: some pod not Running and Ready for `settle`
                (terminated pods do not count). A released workload stops counting as resuming
                `maxGated` after its release even if it never settles, so one workload that can
                never start cannot block its queue for ever.

Order: eligible workloads (cooldown over, every expected pod created) are released highest pod
priority first, then earliest evicted, then by name, while their queue has fewer than its tier's
`maxResumingPerQueue` resuming. A workload gated for `maxGated` is released whatever the queue says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

GATE = "trainguard.dev/resume"
LABEL = "trainguard.dev/resume"  # "gated" until the controller lifts the gate, then "released"
WORKLOAD = "trainguard.dev/resume-workload"
QUEUE = "trainguard.dev/resume-queue"
TIER = "trainguard.dev/resume-tier"
EVICTED_AT = "trainguard.dev/resume-evicted-at"
PODS = "trainguard.dev/resume-pods"
EVIDENCE = "trainguard.dev/resume-evidence"
RELEASED_AT = "trainguard.dev/resume-released-at"


@dataclass(frozen=True, slots=True)
class TierSettings:
    cooldown: float  # seconds
    max_resuming: int
    max_gated: float
    settle: float

    @classmethod
    def from_config(cls, block: Mapping[str, Any]) -> TierSettings:
        return cls(
            cooldown=float(block["cooldownSeconds"]),
            max_resuming=int(block["maxResumingPerQueue"]),
            max_gated=float(block["maxGatedSeconds"]),
            settle=float(block["settleSeconds"]),
        )


@dataclass(frozen=True, slots=True)
class PodState:
    name: str
    uid: str
    created: datetime
    gated: bool
    priority: int = 0
    released_at: datetime | None = None
    ready_since: datetime | None = None  # Running and Ready since then; None otherwise
    terminated: bool = False  # Succeeded or Failed
    gate_index: int | None = None  # position of the gate in spec.schedulingGates


@dataclass(frozen=True, slots=True)
class ResumeWorkload:
    key: str  # "namespace/Kind/name", as the mutation wrote it
    namespace: str
    queue: str
    tier: str
    evicted_at: datetime | None
    expected_pods: int
    evidence: str
    pods: tuple[PodState, ...]

    @property
    def gated(self) -> tuple[PodState, ...]:
        return tuple(p for p in self.pods if p.gated)

    @property
    def priority(self) -> int:
        return max((p.priority for p in self.pods), default=0)

    @property
    def gated_since(self) -> datetime:
        return min(p.created for p in self.gated) if self.gated else min(p.created for p in self.pods)

    @property
    def released_at(self) -> datetime | None:
        # Pods of an earlier resume that finished or failed do not make this one "released".
        times = [p.released_at for p in self.pods if p.released_at is not None and not p.terminated]
        return min(times) if times else None


@dataclass(frozen=True, slots=True)
class Release:
    workload: ResumeWorkload
    reason: str  # event reason: ResumeReleased | ResumeBoundReached | ResumeUngoverned | ResumeRest
    message: str


@dataclass(frozen=True, slots=True)
class Plan:
    releases: tuple[Release, ...] = ()
    waiting: Mapping[str, str] = field(default_factory=dict)  # key -> why it waits
    resuming: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # queue -> workload keys
    # Released workloads that reached `maxGated` after their release without settling: their queue
    # no longer waits for them (the platform sees these: something keeps them from starting).
    unsettled: tuple[str, ...] = ()

    def still_gated(self, workloads: Iterable[ResumeWorkload]) -> dict[str, int]:
        """Tier -> workloads that keep a gate after this plan's releases."""
        released = {r.workload.key for r in self.releases}
        out: dict[str, int] = {}
        for w in workloads:
            if w.gated and w.key not in released:
                out[w.tier] = out.get(w.tier, 0) + 1
        return out


def is_resuming(w: ResumeWorkload, settings: TierSettings | None, now: datetime) -> bool:
    """Released, and not yet settled (see the module docstring)."""
    if w.gated or w.released_at is None:
        return False
    bound = settings.max_gated if settings is not None else 0.0
    if now - w.released_at >= timedelta(seconds=bound):
        return False
    live = [p for p in w.pods if not p.terminated]
    if not live:
        return False
    settle = timedelta(seconds=settings.settle if settings is not None else 0.0)
    settled = all(p.ready_since is not None and now - p.ready_since >= settle for p in live)
    return not settled


def is_unsettled(w: ResumeWorkload, settings: TierSettings | None, now: datetime) -> bool:
    """Released `maxGated` ago or more, and some live pod still not Running and Ready for `settle`."""
    if settings is None or w.gated or w.released_at is None:
        return False
    if now - w.released_at < timedelta(seconds=settings.max_gated):
        return False
    live = [p for p in w.pods if not p.terminated]
    settle = timedelta(seconds=settings.settle)
    return any(p.ready_since is None or now - p.ready_since < settle for p in live)


def plan(
    workloads: Iterable[ResumeWorkload], settings: Mapping[str, TierSettings | None], now: datetime
) -> Plan:
    """What to release now, and why each other gated workload waits."""
    workloads = list(workloads)
    resuming: dict[str, list[str]] = {}
    for w in workloads:
        if is_resuming(w, settings.get(w.tier), now):
            resuming.setdefault(w.queue, []).append(w.key)
    releases: list[Release] = []
    waiting: dict[str, str] = {}
    gated = sorted(
        (w for w in workloads if w.gated), key=lambda w: (-w.priority, w.evicted_at or w.gated_since, w.key)
    )
    for w in gated:
        outcome = _release_or_wait(w, settings.get(w.tier), now, resuming)
        if isinstance(outcome, Release):
            releases.append(outcome)
        else:
            waiting[w.key] = outcome
    unsettled = tuple(w.key for w in workloads if is_unsettled(w, settings.get(w.tier), now))
    return Plan(tuple(releases), waiting, {q: tuple(keys) for q, keys in resuming.items()}, unsettled)


def _release_or_wait(
    w: ResumeWorkload, s: TierSettings | None, now: datetime, resuming: dict[str, list[str]]
) -> Release | str:
    """A gated workload's release now, or why it waits; a release for its queue's room is added
    to `resuming` (workloads decided after it see the queue fuller)."""
    if s is None:
        return Release(w, "ResumeUngoverned", f"tier {w.tier} is no longer governed: released")
    if w.released_at is not None:  # pods created after the rest of the workload was released
        return Release(w, "ResumeRest", "the rest of the workload was already released")
    gated_for = (now - w.gated_since).total_seconds()
    if gated_for >= s.max_gated:
        return Release(
            w,
            "ResumeBoundReached",
            f"gated for {_human(gated_for)}, the longest the platform allows "
            f"({_human(s.max_gated)}): released without waiting for its queue",
        )
    busy = resuming.get(w.queue, [])
    why = _why_waiting(w, s, now, busy)
    if why is not None:
        return why
    resuming[w.queue] = [*busy, w.key]
    return Release(
        w,
        "ResumeReleased",
        f"cooldown over, queue {w.queue} has room ({len(busy) + 1} of {s.max_resuming} resuming): "
        f"released {len(w.gated)} pods at priority {w.priority}",
    )


def _why_waiting(w: ResumeWorkload, s: TierSettings, now: datetime, busy: list[str]) -> str | None:
    """Why a gated workload within its bound waits (cooldown, missing pods, a full queue), if it does."""
    start = w.evicted_at or w.gated_since
    cooled = start + timedelta(seconds=s.cooldown)
    if now < cooled:
        return (
            f"cooldown after its eviction at {_stamp(start)}: waits until {_stamp(cooled)} "
            f"({_human(s.cooldown)} for the {w.tier} tier)"
        )
    if len(w.gated) < w.expected_pods:
        return f"{len(w.gated)} of its {w.expected_pods} pods exist: released together when all do"
    if len(busy) >= s.max_resuming:
        resuming = ", ".join(sorted(busy))
        return f"queue {w.queue} has {len(busy)} of {s.max_resuming} workloads resuming ({resuming})"
    return None


# -- reading pods -------------------------------------------------------------------------------


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def pod_state(pod: Mapping[str, Any]) -> tuple[str, ResumeWorkload, PodState] | None:
    """(workload key, the workload as this pod describes it, the pod) for a pod the mutation marked."""
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    key = annotations.get(WORKLOAD)
    created = parse_time(meta.get("creationTimestamp"))
    if not isinstance(key, str) or not key or created is None:
        return None
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    gates = spec.get("schedulingGates") or []
    gate_index = next((i for i, g in enumerate(gates) if isinstance(g, dict) and g.get("name") == GATE), None)
    ready_since = None
    if status.get("phase") == "Running":
        for c in status.get("conditions") or ():
            if isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True":
                ready_since = parse_time(c.get("lastTransitionTime")) or created
    priority = spec.get("priority")
    state = PodState(
        name=str(meta.get("name")),
        uid=str(meta.get("uid") or ""),
        created=created,
        gated=gate_index is not None,
        priority=priority if isinstance(priority, int) else 0,
        released_at=parse_time(annotations.get(RELEASED_AT)),
        ready_since=ready_since,
        terminated=status.get("phase") in ("Succeeded", "Failed"),
        gate_index=gate_index,
    )
    expected = annotations.get(PODS)
    workload = ResumeWorkload(
        key=key,
        namespace=str(meta.get("namespace") or ""),
        queue=str(annotations.get(QUEUE) or meta.get("namespace") or ""),
        tier=str(annotations.get(TIER) or ""),
        evicted_at=parse_time(annotations.get(EVICTED_AT)),
        expected_pods=int(expected) if isinstance(expected, str) and expected.isdigit() else 1,
        evidence=str(annotations.get(EVIDENCE) or ""),
        pods=(state,),
    )
    return key, workload, state


def group_pods(pods: Iterable[Mapping[str, Any]]) -> list[ResumeWorkload]:
    """The marked pods as workloads (a pod being deleted is left out: it will not run)."""
    found: dict[str, ResumeWorkload] = {}
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        parsed = pod_state(pod)
        if parsed is None:
            continue
        key, workload, state = parsed
        seen = found.get(key)
        if seen is None:
            found[key] = workload
            continue
        found[key] = ResumeWorkload(
            key=key,
            namespace=seen.namespace,
            queue=seen.queue,
            tier=seen.tier,
            evicted_at=max(
                (t for t in (seen.evicted_at, workload.evicted_at) if t is not None), default=None
            ),
            expected_pods=max(seen.expected_pods, workload.expected_pods),
            evidence=seen.evidence or workload.evidence,
            pods=(*seen.pods, state),
        )
    return sorted(found.values(), key=lambda w: w.key)


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _human(seconds: float) -> str:
    seconds = round(seconds)
    if seconds % 3600 == 0 and seconds >= 3600:
        return f"{seconds // 3600}h"
    if seconds % 60 == 0 and seconds >= 60:
        return f"{seconds // 60}m"
    return f"{seconds}s"

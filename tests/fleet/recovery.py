"""Recovery on the fleet: Kueue preempts for real, and trainguard's resume gate governs the return.

Kueue's own preemption does the evicting: a ClusterQueue with ``withinClusterQueue: LowerPriority``
(WorkloadPriorityClasses order the jobs), and two ClusterQueues in a cohort where one borrows the
other's idle quota and is preempted when the lender reclaims it (``reclaimWithinCohort: Any``).
An evicted batch Job is suspended by Kueue (its pods are deleted), requeued, and when Kueue admits it
again the Job controller creates new pods: trainguard's mutation sees the Workload's eviction record
and creates them behind the ``trainguard.dev/resume`` gate, and the resume controller inside
``trainguard serve`` (leader-elected, as in production) lifts the gates per the PlatformConfig's
``recovery`` block. Time is compressed: cooldowns and settle times of seconds.

What is observed comes from the cluster's own record, read by polling: pods' labels, annotations,
Ready transitions and creation times; Workloads' eviction counts. A pod's progress is its Running
time since its last checkpoint, checkpoints being taken every `checkpoint` seconds of Running (the
checkpoint contract's interval, compressed): what an eviction rolls back.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import yaml

from webhook.recovery.plan import EVICTED_AT, GATE, LABEL, QUEUE, RELEASED_AT, parse_time

from .fleet import FLAVOR, GPUS_PER_NODE, QUEUE_LABEL, Fleet, wait_until
from .processes import FINISH_LABEL
from .workloads import IMAGE, toleration

PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
TIER_LABEL = "trainguard.dev/tier"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
API = "kueue.x-k8s.io/v1beta2"
# Compressed time: a production minute is a second here (cooldowns, settle times, checkpoint
# intervals: a job declaring checkpoints every 20m checkpoints every 20 s of Running).
COMPRESSION = 60.0
COOLDOWN = 5.0
SETTLE = 3.0
MAX_GATED = 90.0
MAX_RESUMING = 1
# Priorities as a platform would name them: three preemptible levels (a job of a higher one may
# preempt one of a lower, Kueue's LowerPriority) and the guaranteed level that preempts them all.
PRIORITIES = {"spot-0": 100, "spot-1": 200, "spot-2": 300, "urgent": 10000}

# One ClusterQueue preempting by priority, and a cohort of two where team-b borrows team-a's quota.
PRIORITY_NS = "fleet-recovery"
COHORT_A_NS = "fleet-recovery-a"
COHORT_B_NS = "fleet-recovery-b"
LOCAL_QUEUE = "recovery-lq"
COHORT = "recovery-cohort"


def recovery_block(gate: bool = True) -> dict[str, Any]:
    """The PlatformConfig's `recovery`: the preemptible tier governed (gate) or not."""
    tiers: dict[str, Any] = {}
    if gate:
        tiers["preemptible"] = {
            "cooldown": f"{COOLDOWN:g}s",
            "settle": f"{SETTLE:g}s",
            "maxGated": f"{MAX_GATED:g}s",
            "maxResumingPerQueue": MAX_RESUMING,
        }
    return {"tiers": tiers}


@dataclass(frozen=True)
class Queues:
    """GPU quota (in nodes' worth) of the recovery ClusterQueues."""

    priority_nodes: int = 6
    team_a_nodes: int = 2
    team_b_nodes: int = 2

    @property
    def total_nodes(self) -> int:
        return self.priority_nodes + self.team_a_nodes + self.team_b_nodes


def _cluster_queue(
    name: str, nodes: int, preemption: Mapping[str, Any], cohort: str | None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "queueingStrategy": "BestEffortFIFO",
        "preemption": dict(preemption),
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": FLAVOR,
                        "resources": [
                            {"name": "cpu", "nominalQuota": "10000"},
                            {"name": "memory", "nominalQuota": "10Ti"},
                            {"name": "nvidia.com/gpu", "nominalQuota": nodes * GPUS_PER_NODE},
                        ],
                    }
                ],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def queue_objects(queues: Queues) -> list[dict[str, Any]]:
    objects: list[dict[str, Any]] = [
        {"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": {"name": n}, "value": v}
        for n, v in PRIORITIES.items()
    ]
    objects += [
        _cluster_queue(
            "recovery-priority", queues.priority_nodes, {"withinClusterQueue": "LowerPriority"}, None
        ),
        _cluster_queue("recovery-team-a", queues.team_a_nodes, {"reclaimWithinCohort": "Any"}, COHORT),
        _cluster_queue("recovery-team-b", queues.team_b_nodes, {"reclaimWithinCohort": "Any"}, COHORT),
    ]
    for namespace, cluster_queue in (
        (PRIORITY_NS, "recovery-priority"),
        (COHORT_A_NS, "recovery-team-a"),
        (COHORT_B_NS, "recovery-team-b"),
    ):
        objects.append(
            {
                "apiVersion": API,
                "kind": "LocalQueue",
                "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
                "spec": {"clusterQueue": cluster_queue},
            }
        )
    return objects


def set_up(fleet: Fleet, queues: Queues = Queues()) -> None:
    """The namespaces, priority classes and queues (idempotent), the quota within the training pool."""
    if queues.total_nodes > len(fleet.training_nodes):
        raise ValueError(f"the recovery queues need {queues.total_nodes} training nodes")
    for namespace in (PRIORITY_NS, COHORT_A_NS, COHORT_B_NS):
        if fleet.plane.kubectl("get", "namespace", namespace, check=False).returncode != 0:
            fleet.kubectl("create", "namespace", namespace)
    objects = queue_objects(queues)

    def applied() -> bool:  # through Kueue's webhooks: retried until they answer
        return fleet.plane.kubectl("apply", "-f", "-", input=_yaml(objects), check=False).returncode == 0

    wait_until(applied, 120, "the recovery queues created")
    wait_until(lambda: _active(fleet) >= 3, 120, "the recovery ClusterQueues are Active")


def _yaml(objects: Iterable[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(list(objects))


def _active(fleet: Fleet) -> int:
    active = 0
    for queue in fleet.items("clusterqueues.kueue.x-k8s.io"):
        if not queue["metadata"]["name"].startswith("recovery-"):
            continue
        conditions = queue.get("status", {}).get("conditions") or []
        active += any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions)
    return active


def job(
    name: str, namespace: str, *, pods: int, priority: str, tier: str, checkpoint: float = 20.0
) -> dict[str, Any]:
    """An indexed batch Job of `pods` 8-GPU torchrun workers in the namespace's recovery queue,
    checkpointing every `checkpoint` compressed seconds (declared in production minutes)."""
    command = ["torchrun", f"--nnodes={pods}", f"--nproc-per-node={GPUS_PER_NODE}", "train.py"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {QUEUE_LABEL: LOCAL_QUEUE, PRIORITY_LABEL: priority, TIER_LABEL: tier},
            "annotations": {
                "trainguard.dev/checkpoint-interval": f"{checkpoint * COMPRESSION / 60:g}m",
                "trainguard.dev/checkpoint-uri": f"s3://checkpoints/{namespace}/{name}",
                "trainguard.dev/checkpoint-owner": "ml-platform",
            },
        },
        "spec": {
            "completions": pods,
            "parallelism": pods,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {TIER_LABEL: tier}},
                "spec": {
                    "restartPolicy": "Never",
                    # The checkpoint contract's time to save on SIGTERM.
                    "terminationGracePeriodSeconds": 60,
                    "tolerations": [toleration("training")],
                    "containers": [
                        {
                            "name": "pytorch",
                            "image": IMAGE,
                            "command": command,
                            "resources": {"limits": {"nvidia.com/gpu": GPUS_PER_NODE}},
                        }
                    ],
                },
            },
        },
    }


# --- what the cluster records ---------------------------------------------------------------------


def ready_since(pod: Mapping[str, Any]) -> datetime | None:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return None
    for c in status.get("conditions") or ():
        if c.get("type") == "Ready" and c.get("status") == "True":
            return parse_time(c.get("lastTransitionTime"))
    return None


def is_gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in (pod.get("spec") or {}).get("schedulingGates") or ())


def evictions(workload: Mapping[str, Any]) -> int:
    """How often Kueue evicted this Workload (its scheduling stats, else its Evicted condition)."""
    stats = (workload.get("status") or {}).get("schedulingStats") or {}
    counted = sum(int(e.get("count") or 0) for e in stats.get("evictions") or ())
    if counted:
        return counted
    conditions = (workload.get("status") or {}).get("conditions") or ()
    return int(any(c.get("type") == "Evicted" and c.get("status") == "True" for c in conditions))


def job_of_workload(workload: Mapping[str, Any]) -> str:
    for ref in workload["metadata"].get("ownerReferences") or ():
        if ref.get("kind") == "Job":
            return str(ref["name"])
    return ""


def admitted(workload: Mapping[str, Any]) -> bool:
    conditions = (workload.get("status") or {}).get("conditions") or ()
    return any(c.get("type") == "Admitted" and c.get("status") == "True" for c in conditions)


@dataclass
class Resumed:
    """One comeback of one job, as its gated pods record it."""

    job: str
    queue: str
    pods: dict[str, datetime] = field(default_factory=dict)  # pod -> creation
    released: dict[str, datetime] = field(default_factory=dict)  # pod -> released-at
    ready: dict[str, datetime] = field(default_factory=dict)  # pod -> Ready since

    @property
    def gated_since(self) -> datetime:
        return min(self.pods.values())

    @property
    def released_at(self) -> datetime | None:
        return min(self.released.values()) if self.released else None

    def settled_at(self, settle: float) -> datetime | None:
        """When every pod had been Ready for `settle` (None while some pod has not been Ready)."""
        if not self.pods or set(self.ready) != set(self.pods):
            return None
        return max(self.ready.values()) + timedelta(seconds=settle)


class Observer:
    """Polls the recovery namespaces and keeps what the gate did, per job and per comeback.

    A comeback is keyed by the job and the eviction its pods were gated for (the eviction time the
    mutation wrote on them): a job evicted twice comes back twice, with new pods each time.
    """

    def __init__(self, fleet: Fleet, namespaces: Iterable[str]) -> None:
        self.fleet = fleet
        self.namespaces = tuple(namespaces)
        self.comebacks: dict[tuple[str, str], Resumed] = {}  # (job, evicted-at) -> comeback
        self.ungated_after_eviction: set[str] = set()  # pods of evicted jobs created without the gate
        self.partial_gates: set[str] = set()  # jobs seen with some pods released and others gated
        self.evicted: dict[str, int] = {}  # job -> evictions Kueue counted
        # Jobs seen with gated pods while Kueue had admitted their Workload (its quota reserved).
        self.gated_while_admitted: set[str] = set()
        self._evicted_at: dict[str, datetime] = {}  # job -> when we first saw its latest eviction

    def sample(self) -> list[dict[str, Any]]:
        pods: list[dict[str, Any]] = []
        holding: set[str] = set()
        for namespace in self.namespaces:
            for workload in self.fleet.items("workloads.kueue.x-k8s.io", namespace):
                name = f"{namespace}/{job_of_workload(workload)}"
                if admitted(workload):
                    holding.add(name)
                count = evictions(workload)
                if count > self.evicted.get(name, 0):
                    self._evicted_at[name] = datetime.now(UTC)
                self.evicted[name] = max(count, self.evicted.get(name, 0))
            pods += self.fleet.pods(namespace)
        by_job: dict[str, list[dict[str, Any]]] = {}
        for pod in pods:
            meta = pod["metadata"]
            job = f"{meta['namespace']}/{(meta.get('labels') or {}).get(JOB_NAME_LABEL, '')}"
            by_job.setdefault(job, []).append(pod)
            created = parse_time(meta.get("creationTimestamp"))
            evicted_at = self._evicted_at.get(job)
            marked = (meta.get("labels") or {}).get(LABEL)
            if marked is None:
                if evicted_at is not None and created is not None and created > evicted_at:
                    self.ungated_after_eviction.add(f"{meta['namespace']}/{meta['name']}")
                continue
            if is_gated(pod) and job in holding:
                self.gated_while_admitted.add(job)
            annotations = meta.get("annotations") or {}
            key = (job, str(annotations.get(EVICTED_AT)))
            comeback = self.comebacks.setdefault(key, Resumed(job, str(annotations.get(QUEUE))))
            if created is not None:
                comeback.pods[meta["name"]] = created
            released = parse_time(annotations.get(RELEASED_AT))
            if released is not None:
                comeback.released[meta["name"]] = released
            ready = ready_since(pod)
            if ready is not None:
                comeback.ready.setdefault(meta["name"], ready)
        for job, job_pods in by_job.items():
            states = {is_gated(p) for p in job_pods if (p["metadata"].get("labels") or {}).get(LABEL)}
            # Between two patches of one release a poll may catch a workload half released: a
            # whole-workload release writes one released-at stamp on all its pods (checked below).
            if states == {True, False} and not any(
                parse_time((p["metadata"].get("annotations") or {}).get(RELEASED_AT)) for p in job_pods
            ):
                self.partial_gates.add(job)
        return pods

    def max_resuming(self, settle: float) -> dict[str, int]:
        """Queue -> the most comebacks resuming at once (released, not yet settled), from the stamps."""
        edges: dict[str, list[tuple[datetime, int]]] = {}
        for c in self.comebacks.values():
            start = c.released_at
            if start is None:
                continue
            end = c.settled_at(settle)
            edges.setdefault(c.queue, []).append((start, 1))
            if end is not None:
                edges[c.queue].append((end, -1))
        out: dict[str, int] = {}
        for queue, points in edges.items():
            # An end and a start at the same stamp: the end first (intervals are half-open).
            running = peak = 0
            for _, delta in sorted(points, key=lambda p: (p[0], p[1])):
                running += delta
                peak = max(peak, running)
            out[queue] = peak
        return out

    def release_stamps(self) -> dict[str, set[datetime]]:
        """Comeback -> the distinct released-at stamps of its pods (one: released as a whole)."""
        return {f"{c.job} {key}": set(c.released.values()) for (_, key), c in self.comebacks.items()}

    def longest_gated(self) -> float:
        """Seconds from a comeback's first gated pod to its release, the longest seen."""
        return max(
            (
                (c.released_at - c.gated_since).total_seconds()
                for c in self.comebacks.values()
                if c.released_at
            ),
            default=0.0,
        )


def poll_until(observer: Observer, done: Any, what: str, timeout: float = 300.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        pods = observer.sample()
        if done(pods):
            return pods
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        time.sleep(0.5)


def running(pods: list[dict[str, Any]], job: str, count: int) -> bool:
    """`count` pods of `job` ("namespace/name"), all Running and Ready."""
    namespace, name = job.split("/", 1)
    mine = [
        p
        for p in pods
        if p["metadata"]["namespace"] == namespace
        and (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == name
        and not p["metadata"].get("deletionTimestamp")
    ]
    return len(mine) == count and all(ready_since(p) is not None for p in mine)


def finish(fleet: Fleet, job: str) -> None:
    """End a job's pods as done (KWOK's pod-finish stage turns them Succeeded)."""
    namespace, name = job.split("/", 1)
    fleet.kubectl("label", "pods", "-n", namespace, "-l", f"{JOB_NAME_LABEL}={name}", f"{FINISH_LABEL}=true")


def clear(fleet: Fleet) -> None:
    for namespace in (PRIORITY_NS, COHORT_A_NS, COHORT_B_NS):
        fleet.clear(namespace)


# --- the scenarios --------------------------------------------------------------------------------


@dataclass
class Outcome:
    evicted: dict[str, int]  # job -> evictions Kueue counted
    observer: Observer


def priority_preemption(fleet: Fleet, observer: Observer) -> Outcome:
    """Three preemptible jobs fill the ClusterQueue; a guaranteed one twice their size arrives and
    Kueue preempts the two of lowest priority; when it is done, both come back."""
    spots = {"spot-a": "spot-0", "spot-b": "spot-1", "spot-c": "spot-2"}
    for name, priority in spots.items():
        fleet.apply([job(name, PRIORITY_NS, pods=2, priority=priority, tier="preemptible")])
        poll_until(observer, lambda pods, n=name: running(pods, f"{PRIORITY_NS}/{n}", 2), f"{name} running")
    fleet.apply([job("urgent", PRIORITY_NS, pods=4, priority="urgent", tier="guaranteed")])
    victims = (f"{PRIORITY_NS}/spot-a", f"{PRIORITY_NS}/spot-b")
    poll_until(
        observer,
        lambda pods: (
            running(pods, f"{PRIORITY_NS}/urgent", 4) and all(observer.evicted.get(v) for v in victims)
        ),
        "urgent running, spot-a and spot-b evicted",
    )
    finish(fleet, f"{PRIORITY_NS}/urgent")
    poll_until(observer, lambda pods: all(running(pods, v, 2) for v in victims), "spot-a and spot-b back")
    return Outcome(dict(observer.evicted), observer)


def cohort_reclaim(fleet: Fleet, observer: Observer) -> Outcome:
    """team-b runs two jobs, one on quota borrowed from team-a; team-a submits a job of its lowest
    priority and reclaims its quota (Kueue preempts the borrower); when team-a is done, the
    evicted job borrows again and comes back."""
    for name in ("b-0", "b-1"):
        fleet.apply([job(name, COHORT_B_NS, pods=2, priority="spot-1", tier="preemptible")])
        poll_until(observer, lambda pods, n=name: running(pods, f"{COHORT_B_NS}/{n}", 2), f"{name} running")
    fleet.apply([job("a-0", COHORT_A_NS, pods=2, priority="spot-0", tier="guaranteed")])
    poll_until(
        observer,
        lambda pods: (
            running(pods, f"{COHORT_A_NS}/a-0", 2)
            and any(observer.evicted.get(f"{COHORT_B_NS}/{n}") for n in ("b-0", "b-1"))
        ),
        "a-0 running on its reclaimed quota, a team-b job evicted",
    )
    finish(fleet, f"{COHORT_A_NS}/a-0")
    poll_until(
        observer,
        lambda pods: all(running(pods, f"{COHORT_B_NS}/{n}", 2) for n in ("b-0", "b-1")),
        "both team-b jobs running again",
    )
    return Outcome(dict(observer.evicted), observer)

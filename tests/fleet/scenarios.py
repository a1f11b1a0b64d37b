"""The fleet's scenarios: each applies workloads, waits on conditions, and returns what it observed.

The tests assert the outcomes; tests/bench/fleet.py prints the same figures with trainguard on and
off. Waits are on conditions with generous deadlines; nothing here asserts a duration. The only
figures that involve time (GPU-seconds held by partial jobs, a burst's seconds to all pods bound)
are measured for the benchmark, and tests only compare them with zero.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jsonpatch
import yaml

from tests.e2e.webhook_server import trainguard
from webhook.config import config_from_mapping
from webhook.workloads import AdaptContext, build_workload

from .fleet import GPUS_PER_NODE, NODES_PER_RACK, QUEUE, Arm, Fleet, platform_config, wait_until
from .processes import FINISH_LABEL
from .workloads import indexed_job, inference, node_agent, pytorchjob

TIMEOUT = 300.0
JOB_LABELS = ("training.kubeflow.org/job-name", "batch.kubernetes.io/job-name", "job-name")
CLASS_LABEL = "trainguard.dev/class"


# --- reading pods ---------------------------------------------------------------------------------


def job_of(pod: dict[str, Any]) -> str:
    labels = pod["metadata"].get("labels") or {}
    for key in JOB_LABELS:
        if labels.get(key):
            return str(labels[key])
    return ""


def bound(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName"))


def unschedulable(pod: dict[str, Any]) -> bool:
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "Unschedulable":
            return True
    return False


def gpus(pod: dict[str, Any]) -> int:
    total = 0
    for container in pod["spec"]["containers"]:
        limits = (container.get("resources") or {}).get("limits") or {}
        total += int(limits.get("nvidia.com/gpu", 0))
    return total


def by_job(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    jobs: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        jobs.setdefault(job_of(pod), []).append(pod)
    return jobs


@dataclass
class PartialMeter:
    """GPU-seconds held by bound pods of jobs that also have a pod the scheduler could not place.

    Sampled at each poll: a job is partial while some of its pods are bound and another is
    Unschedulable (waiting for capacity that a whole-job admission would have waited for).
    """

    gpu_seconds: float = 0.0
    partial_samples: int = 0
    _last: float | None = None

    def sample(self, pods: list[dict[str, Any]]) -> None:
        now = time.monotonic()
        held = 0
        for job_pods in by_job(pods).values():
            if any(unschedulable(p) for p in job_pods) and any(bound(p) for p in job_pods):
                held += sum(gpus(p) for p in job_pods if bound(p))
        if held:
            self.partial_samples += 1
        if self._last is not None:
            self.gpu_seconds += held * (now - self._last)
        self._last = now


def poll(
    fleet: Fleet,
    namespace: str,
    done: Callable[[list[dict[str, Any]]], bool],
    what: str,
    *,
    meter: PartialMeter | None = None,
    watch: Callable[[list[dict[str, Any]]], None] | None = None,
    timeout: float = TIMEOUT,
) -> list[dict[str, Any]]:
    """Poll the namespace's pods until `done(pods)`; each sample goes to `meter` and `watch`."""
    deadline = time.monotonic() + timeout
    while True:
        pods = fleet.pods(namespace)
        if meter is not None:
            meter.sample(pods)
        if watch is not None:
            watch(pods)
        if done(pods):
            return pods
        if time.monotonic() > deadline:
            states = {job: f"{sum(bound(p) for p in ps)}/{len(ps)} bound" for job, ps in by_job(pods).items()}
            raise AssertionError(f"not within {timeout:.0f} s: {what}; pods by job: {states}")
        time.sleep(0.5)


def all_bound(jobs: dict[str, int]) -> Callable[[list[dict[str, Any]]], bool]:
    """True once each named job has its expected number of pods, all bound."""

    def check(pods: list[dict[str, Any]]) -> bool:
        grouped = by_job(pods)
        return all(sum(bound(p) for p in grouped.get(job, [])) == count for job, count in jobs.items())

    return check


def gone(job: str) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda pods: not by_job(pods).get(job)


def finish(fleet: Fleet, namespace: str, job: str) -> None:
    """End a job's pods as if their work were done (KWOK's pod-finish stage turns them Succeeded)."""
    for key in JOB_LABELS:
        fleet.kubectl(
            "label", "pods", "-n", namespace, "-l", f"{key}={job}", f"{FINISH_LABEL}=true", "--overwrite"
        )


def workloads_pending(fleet: Fleet, namespace: str, count: int) -> bool:
    """Kueue holds `count` Workloads in `namespace` without quota (considered, not admitted)."""
    pending = 0
    for workload in fleet.items("workloads.kueue.x-k8s.io", namespace):
        conditions = workload.get("status", {}).get("conditions") or []
        if any(c.get("type") == "QuotaReserved" and c.get("status") == "False" for c in conditions):
            pending += 1
    return pending >= count


# --- gang -----------------------------------------------------------------------------------------


@dataclass
class GangResult:
    on: bool
    bound_before_fit: dict[str, int]  # job -> most pods seen bound while it did not fit
    bound_after: dict[str, int]
    sizes: dict[str, int]
    partial_gpu_seconds: float


def gang(fleet: Fleet, arm: Arm, free_nodes: int = 2) -> GangResult:
    """A blocker leaves `free_nodes` training nodes free; then a 4-pod PyTorchJob and a 4-pod
    indexed Job arrive, each larger than what is free; then the blocker finishes."""
    namespace = arm.namespace
    blocker_pods = len(fleet.training_nodes) - free_nodes
    fleet.apply([indexed_job("blocker", namespace, pods=blocker_pods, pool="training")])
    poll(fleet, namespace, all_bound({"blocker": blocker_pods}), "the blocker bound")

    sizes = {"gang-pytorch": 4, "gang-indexed": 4}
    fleet.apply(
        [
            pytorchjob("gang-pytorch", namespace, pods=sizes["gang-pytorch"], pool="training"),
            indexed_job("gang-indexed", namespace, pods=sizes["gang-indexed"], pool="training"),
        ]
    )
    meter = PartialMeter()
    seen = dict.fromkeys(sizes, 0)

    def watch(pods: list[dict[str, Any]]) -> None:
        grouped = by_job(pods)
        for job in sizes:
            seen[job] = max(seen[job], sum(bound(p) for p in grouped.get(job, [])))

    if arm.on:
        # Kueue has considered both and holds them: nothing of them may be bound meanwhile.
        wait_until(lambda: workloads_pending(fleet, namespace, 2), TIMEOUT, "Kueue holds both jobs")
        samples = iter(range(3))
        poll(
            fleet,
            namespace,
            lambda pods: next(samples, None) is None,
            "samples while held",
            meter=meter,
            watch=watch,
        )
    else:

        def stuck(pods: list[dict[str, Any]]) -> bool:
            grouped = by_job(pods)
            placed = sum(bound(p) for job in sizes for p in grouped.get(job, []))
            waiting = sum(unschedulable(p) for job in sizes for p in grouped.get(job, []))
            return placed == free_nodes and waiting == sum(sizes.values()) - free_nodes

        poll(
            fleet, namespace, stuck, "the free nodes taken, the rest Unschedulable", meter=meter, watch=watch
        )
        # A few more samples of the partial state, so that its GPU-seconds are measured at all.
        target = meter.partial_samples + 3
        poll(fleet, namespace, lambda pods: meter.partial_samples >= target, "partial samples", meter=meter)
    before = dict(seen)
    finish(fleet, namespace, "blocker")
    pods = poll(fleet, namespace, all_bound(sizes), "both jobs bound", meter=meter, watch=watch)
    grouped = by_job(pods)
    after = {job: sum(bound(p) for p in grouped.get(job, [])) for job in sizes}
    return GangResult(arm.on, before, after, sizes, meter.gpu_seconds)


# --- topology -------------------------------------------------------------------------------------


@dataclass
class TopologyResult:
    on: bool
    racks: dict[str, set[str]]  # job -> racks of its pods

    @property
    def same_rack_share(self) -> float:
        return sum(len(r) == 1 for r in self.racks.values()) / len(self.racks) if self.racks else 0.0


def topology(fleet: Fleet, arm: Arm, jobs: int) -> TopologyResult:
    """A stream of 4-node class B PyTorchJobs, each applied once the one before is bound, with
    at most half the training racks' worth running (the oldest deleted to make room)."""
    namespace = arm.namespace
    rack_of = {n.name: n.rack for n in fleet.nodes}
    training_racks = len({n.rack for n in fleet.training_nodes})
    running_max = max(1, training_racks // 2)
    running: list[str] = []
    racks: dict[str, set[str]] = {}
    for number in range(jobs):
        if len(running) == running_max:
            oldest = running.pop(0)
            fleet.kubectl("delete", "pytorchjob", oldest, "-n", namespace, "--wait=false")
            poll(fleet, namespace, gone(oldest), f"{oldest} gone")
        name = f"stream-{number:03d}"
        fleet.apply([pytorchjob(name, namespace, pods=NODES_PER_RACK, pool="training")])
        pods = poll(fleet, namespace, all_bound({name: NODES_PER_RACK}), f"{name} bound")
        racks[name] = {rack_of[p["spec"]["nodeName"]] for p in by_job(pods)[name]}
        running.append(name)
    return TopologyResult(arm.on, racks)


# --- pools ----------------------------------------------------------------------------------------


@dataclass
class PoolsResult:
    on: bool
    training_on_inference: int
    inference_on_training: int
    bound_training: int

    @property
    def violations(self) -> int:
        return self.training_on_inference + self.inference_on_training


def pools(fleet: Fleet, arm: Arm) -> PoolsResult:
    """Serving pinned to the inference pool on half its nodes; training that tolerates any pool,
    one 4-node job more than the training pool holds."""
    namespace = arm.namespace
    pool_of = {n.name: n.pool for n in fleet.nodes}
    replicas = max(1, len(fleet.inference_nodes) // 2)
    fleet.apply([inference("serving", namespace, replicas=replicas)])

    def serving(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [p for p in pods if (p["metadata"].get("labels") or {}).get("app") == "serving"]

    poll(fleet, namespace, lambda pods: sum(bound(p) for p in serving(pods)) == replicas, "serving bound")
    jobs = len(fleet.training_nodes) // NODES_PER_RACK + 1
    names = [f"train-{n}" for n in range(jobs)]
    fleet.apply(indexed_job(name, namespace, pods=NODES_PER_RACK, pool=None) for name in names)
    total = jobs * NODES_PER_RACK
    free = len(fleet.nodes) - replicas
    if arm.on:
        # The queue admits what the training pool's quota holds; the last job waits in Kueue.
        expected = len(fleet.training_nodes)
        wait_until(lambda: workloads_pending(fleet, namespace, 1), TIMEOUT, "Kueue holds the extra job")
    else:
        expected = min(total, free)

    def settled(pods: list[dict[str, Any]]) -> bool:
        training = [p for p in pods if job_of(p) in names]
        placed = sum(bound(p) for p in training)
        return placed == expected and all(bound(p) or unschedulable(p) for p in training)

    pods = poll(fleet, namespace, settled, f"{expected} training pods bound, the rest waiting")
    training = [p for p in pods if job_of(p) in names and bound(p)]
    return PoolsResult(
        arm.on,
        training_on_inference=sum(pool_of[p["spec"]["nodeName"]] == "inference" for p in training),
        inference_on_training=sum(
            pool_of[p["spec"]["nodeName"]] == "training" for p in serving(pods) if bound(p)
        ),
        bound_training=len(training),
    )


# --- members --------------------------------------------------------------------------------------


@dataclass
class Member:
    pod: str
    workload: str
    agrees: dict[str, bool]  # "class", "tier", "decision" -> equal to the workload's


@dataclass
class MembersResult:
    members: list[Member]
    env: dict[str, dict[str, tuple[str | None, str | None]]]  # pod -> PET_* -> (injected, derived)

    @property
    def member_pods_agree(self) -> tuple[int, int]:
        return sum(all(m.agrees.values()) for m in self.members), len(self.members)

    @property
    def operator_env_agree(self) -> tuple[int, int]:
        return sum(all(a == b for a, b in values.values()) for values in self.env.values()), len(self.env)


def _decisions(fleet: Fleet, namespace: str) -> dict[tuple[str, str], str]:
    """(kind, name) -> trainguard's decision on its CREATE, from the server's admission records."""
    decisions: dict[tuple[str, str], str] = {}
    for line in fleet.server.log.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if (
            record.get("msg") == "admission"
            and record.get("endpoint") == "validate"
            and record.get("operation") == "CREATE"
            and record.get("namespace") == namespace
            and not record.get("dry_run")
        ):
            decisions[(str(record.get("kind")), str(record.get("object_name")))] = str(record.get("decision"))
    return decisions


def _tier(priority_class: str | None) -> str | None:
    assigned = platform_config()["tiers"]["assign"]
    return next((tier for tier, name in assigned.items() if name == priority_class), None)


def members(fleet: Fleet, namespace: str) -> MembersResult:
    """A PyTorchJob (pods from the training operator) and an indexed Job (pods from the Job
    controller), with trainguard on: each pod is decided as a member of its workload."""
    sizes = {"members-pytorch": 4, "members-indexed": 2}
    # The decisions are read from trainguard's records, which only debug level writes for every
    # admission: the fleet serves at info otherwise, as a deployment would.
    with fleet.debug_log():
        fleet.apply(
            [
                pytorchjob("members-pytorch", namespace, pods=sizes["members-pytorch"], pool="training"),
                indexed_job("members-indexed", namespace, pods=sizes["members-indexed"], pool="training"),
            ]
        )
        pods = poll(fleet, namespace, all_bound(sizes), "the members bound")
    stored = {
        "members-pytorch": fleet.plane.kubectl_json("get", "pytorchjob", "members-pytorch", "-n", namespace),
        "members-indexed": fleet.plane.kubectl_json("get", "job.batch", "members-indexed", "-n", namespace),
    }
    decisions = _decisions(fleet, namespace)
    config = config_from_mapping(platform_config(), "fleet platform config")
    result = MembersResult([], {})
    for pod in pods:
        job = job_of(pod)
        if job not in stored:
            continue
        workload = stored[job]
        kind = workload["kind"]
        templates = (
            [spec["template"] for spec in workload["spec"]["pytorchReplicaSpecs"].values()]
            if kind == "PyTorchJob"
            else [workload["spec"]["template"]]
        )
        workload_tiers = {_tier(t["spec"].get("priorityClassName")) for t in templates}
        name = pod["metadata"]["name"]
        result.members.append(
            Member(
                name,
                f"{kind}/{job}",
                {
                    "class": (pod["metadata"].get("labels") or {}).get(CLASS_LABEL)
                    == (workload["metadata"].get("labels") or {}).get(CLASS_LABEL),
                    "tier": workload_tiers == {_tier(pod["spec"].get("priorityClassName"))},
                    "decision": decisions.get(("Pod", name)) is not None
                    and decisions.get(("Pod", name)) == decisions.get((kind, job)),
                },
            )
        )
        if kind == "PyTorchJob":
            built = build_workload(workload, AdaptContext(config=config))
            assert built is not None
            derived: dict[str, str | None] = {}
            for _group, _container, spec in built.torchrun:
                derived = {"PET_NNODES": spec.nnodes, "PET_NPROC_PER_NODE": spec.nproc_per_node}
            env = {e["name"]: e.get("value") for c in pod["spec"]["containers"] for e in c.get("env") or []}
            result.env[name] = {key: (env.get(key), value) for key, value in derived.items()}
    return result


# --- node agents ----------------------------------------------------------------------------------


@dataclass
class AgentsResult:
    nodes: int
    ready: int
    refused_while_stopped: str  # the API server's answer to a training job meanwhile


def node_agents(fleet: Fleet, namespace: str) -> AgentsResult:
    """Stop trainguard (its validating webhook fails closed), then roll out a DaemonSet."""
    fleet.server.stop()
    try:
        refused = fleet.plane.kubectl(
            "create",
            "-f",
            "-",
            input=json.dumps(indexed_job("while-stopped", namespace, pods=2, pool="training")),
            check=False,
        )
        fleet.apply([node_agent("gpu-agent", namespace)])

        def ready(pods: list[dict[str, Any]]) -> bool:
            running = [
                p
                for p in pods
                if bound(p)
                and any(
                    c.get("type") == "Ready" and c.get("status") == "True"
                    for c in p.get("status", {}).get("conditions") or []
                )
            ]
            return len({p["spec"]["nodeName"] for p in running}) == len(fleet.nodes)

        pods = poll(fleet, namespace, ready, "an agent Ready on every node")
        return AgentsResult(
            len(fleet.nodes), len({p["spec"]["nodeName"] for p in pods if bound(p)}), refused.stderr
        )
    finally:
        fleet.server.start()
        fleet.server.wait_for_cluster_caches()


# --- burst ----------------------------------------------------------------------------------------


@dataclass
class BurstResult:
    on: bool
    jobs: int
    pods: int
    seconds: float
    histograms: dict[str, dict[float, float]] = field(default_factory=dict)  # webhook -> le -> count
    trainguard_cpu_seconds: float = 0.0  # of the server's processes, from the apply to all bound
    trainguard_calls: float = 0.0  # admissions the API server sent trainguard meanwhile


BURST_PODS_PER_JOB = 4
BURST_GPUS_PER_POD = 2


def burst_capacity(training_nodes: int) -> int:
    """How many burst jobs the training pool holds at once."""
    return training_nodes * (GPUS_PER_NODE // BURST_GPUS_PER_POD) // BURST_PODS_PER_JOB


def burst_manifests(
    namespace: str, jobs: int, pods_per_job: int = BURST_PODS_PER_JOB, gpus_per_pod: int = BURST_GPUS_PER_POD
) -> list[dict[str, Any]]:
    return [
        indexed_job(
            f"burst-{n:04d}", namespace, pods=pods_per_job, gpus=gpus_per_pod, queue=QUEUE, pool="training"
        )
        for n in range(jobs)
    ]


def as_trainguard_mutates(
    fleet: Fleet, manifests: list[dict[str, Any]], namespace: str
) -> list[dict[str, Any]]:
    """`manifests` with the patches trainguard would answer (from `trainguard check` on the fleet's
    config): the same objects the "on" arm stores (class labels, pool affinity, priority class, the
    rack preference), so that an arm without the webhook schedules exactly the same pods."""
    result = trainguard(
        "check",
        "-",
        "--config",
        str(fleet.config),
        "--namespace",
        namespace,
        "-o",
        "json",
        input=yaml.safe_dump_all(manifests),
    )
    if result.returncode != 0:
        raise AssertionError(
            f"trainguard check refused the burst (exit {result.returncode}):\n{result.stderr}"
        )
    decided = json.loads(result.stdout)["results"]
    if len(decided) != len(manifests):
        raise AssertionError(f"trainguard check decided {len(decided)} of {len(manifests)} burst jobs")
    return [jsonpatch.apply_patch(m, d.get("patch") or []) for m, d in zip(manifests, decided, strict=True)]


def burst(
    fleet: Fleet,
    arm: Arm,
    jobs: int,
    pods_per_job: int = BURST_PODS_PER_JOB,
    gpus_per_pod: int = BURST_GPUS_PER_POD,
    *,
    premutated: bool = False,
) -> BurstResult:
    """`jobs` indexed Jobs already queued (their own queue label, so Kueue acts in both arms),
    applied in one kubectl call; seconds from the apply to every pod bound. With `premutated` the
    Jobs are applied as trainguard would have mutated them (for an arm without its webhook: the
    difference to "on" is then the admission calls alone, not the placement they ask for)."""
    namespace = arm.namespace
    capacity = len(fleet.training_nodes) * (GPUS_PER_NODE // gpus_per_pod)
    if jobs * pods_per_job > capacity:
        raise ValueError(f"{jobs} jobs of {pods_per_job} pods exceed the training pool's {capacity} pods")
    manifests = burst_manifests(namespace, jobs, pods_per_job, gpus_per_pod)
    if premutated:
        manifests = as_trainguard_mutates(fleet, manifests, namespace)
    before = admission_histograms(fleet)
    cpu_before = fleet.server.cpu_seconds()
    started = time.monotonic()
    fleet.apply(manifests)
    expected = {m["metadata"]["name"]: pods_per_job for m in manifests}
    poll(fleet, namespace, all_bound(expected), "the burst bound", timeout=max(TIMEOUT, 3.0 * jobs))
    seconds = time.monotonic() - started
    cpu = fleet.server.cpu_seconds() - cpu_before
    after = admission_histograms(fleet)
    diff = {
        name: {le: count - before.get(name, {}).get(le, 0.0) for le, count in buckets.items()}
        for name, buckets in after.items()
    }
    calls = sum(max(b.values(), default=0.0) for name, b in diff.items() if "trainguard" in name)
    return BurstResult(arm.on, jobs, jobs * pods_per_job, seconds, diff, cpu, calls)


def admission_histograms(fleet: Fleet) -> dict[str, dict[float, float]]:
    """The API server's `apiserver_admission_webhook_admission_duration_seconds` buckets per webhook
    (summed over operations and outcomes): webhook name -> upper bound -> cumulative count."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[float, float]] = {}
    for family in text_string_to_metric_families(fleet.apiserver_metrics()):
        if family.name != "apiserver_admission_webhook_admission_duration_seconds":
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                buckets = out.setdefault(sample.labels["name"], {})
                le = float(sample.labels["le"])
                buckets[le] = buckets.get(le, 0.0) + sample.value
    return out


def quantile(buckets: dict[float, float], q: float) -> float | None:
    """histogram_quantile over cumulative buckets (linear within a bucket, as Prometheus does)."""
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for upper in bounds:
        count = buckets[upper]
        if count >= rank:
            if upper == float("inf"):
                return lower
            return lower + (upper - lower) * ((rank - below) / (count - below) if count > below else 0.0)
        lower, below = upper, count
    return lower

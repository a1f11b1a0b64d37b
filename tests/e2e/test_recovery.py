"""The resume gate and its controller against the real API server.

Two ``trainguard serve`` replicas with cluster access (both run the resume controller; one holds the
``trainguard-resume`` Lease), registered as the webhooks. Kueue Workload objects are created by
hand and given an eviction condition through the status subresource, as Kueue would; then the pods
of those workloads are created as a user (or a higher-level controller) re-creates them:

- pods of an evicted workload are created with the gate and the evidence, and a resumed
  preemptible pod gets the resume priority class with its value (the API server's Priority plugin
  accepts the pair); a first start is never gated;
- the controller lifts the gates after the cooldown, one workload per queue at a time (the queue is
  busy until the released workload's pods are Running and Ready for the settle time), higher
  priority first, with events saying why a workload waits;
- a workload short of its pods is released by the bound, with a Warning event;
- the controller's metrics (the dashboard's resume row) say what it did: a workload gated now, a
  release with its reason and how long the workload waited;
- when the leading replica stops, the other takes the Lease and carries on.

There is no kubelet: "Running and Ready" is written through the pods' status subresource.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.deploy.test_monitoring import resume_metric_names

from .controlplane import ControlPlane
from .webhook_server import (
    CONFIGURATION_NAME,
    IMAGE,
    SYSTEM_NS,
    WebhookServer,
    _checked,
    trainguard,
)

GATE = "trainguard.dev/resume"
QUEUE = "resume-lq"
COOLDOWN = 10.0
SETTLE = 2.0
MAX_GATED = 25.0
PRIORITY_CLASSES = {"resume-e2e-high": 100000, "resume-e2e-resume": 5000}
CONFIG: dict[str, Any] = {
    "apiVersion": "trainguard.dev/v1alpha1",
    "kind": "PlatformConfig",
    "recovery": {
        "tiers": {
            "guaranteed": {
                "cooldown": f"{COOLDOWN:g}s",
                "settle": f"{SETTLE:g}s",
                "maxGated": f"{MAX_GATED:g}s",
            },
            "preemptible": {
                "cooldown": f"{COOLDOWN:g}s",
                "settle": f"{SETTLE:g}s",
                "maxGated": f"{MAX_GATED:g}s",
                "maxResumingPerQueue": 1,
                "resumePriorityClass": "resume-e2e-resume",
            },
        }
    },
}


@dataclass
class Setup:
    plane: ControlPlane
    servers: list[WebhookServer]
    certs: Path
    config: Path

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> Any:
        return self.plane.kubectl(*args, input=input, check=check)

    def register(self, server: WebhookServer) -> None:
        """Point both webhook configurations at `server`."""
        rendered = _checked(
            trainguard(
                "webhook-config",
                "--certs",
                str(self.certs),
                "--url",
                server.url,
                "--config",
                str(self.config),
                "--validating-failure-policy",
                "Fail",
                "--mutating-failure-policy",
                "Fail",
                "-o",
                "yaml",
            ),
            "trainguard webhook-config",
        ).stdout
        self.kubectl("apply", "-f", "-", input=rendered)

    def lease_holder(self) -> str | None:
        result = self.kubectl("get", "lease", "trainguard-resume", "-n", SYSTEM_NS, "-o", "json", check=False)
        if result.returncode != 0:
            return None
        holder: str | None = json.loads(result.stdout)["spec"].get("holderIdentity")
        return holder


@pytest.fixture(scope="module")
def setup(
    control_plane: ControlPlane, webhook_certs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Setup]:
    workdir = tmp_path_factory.mktemp("trainguard-recovery")
    config = workdir / "platform.yaml"
    config.write_text(yaml.safe_dump(CONFIG, sort_keys=False), encoding="utf-8")
    if control_plane.kubectl("get", "namespace", SYSTEM_NS, check=False).returncode != 0:
        control_plane.kubectl("create", "namespace", SYSTEM_NS)
    control_plane.kubectl(
        "apply",
        "-f",
        "-",
        input=yaml.safe_dump_all(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": n},
                "value": v,
            }
            for n, v in PRIORITY_CLASSES.items()
        ),
    )
    servers = [
        WebhookServer(
            certs=webhook_certs,
            config=config,
            kubeconfig=control_plane.kubeconfig,
            log=workdir / f"serve-{i}.log",
        )
        for i in range(2)
    ]
    for server in servers:
        server.start()
    ready = Setup(control_plane, servers, webhook_certs, config)
    try:
        for server in servers:
            server.wait_for_cluster_caches()
        ready.register(servers[0])
        yield ready
    finally:
        for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
            control_plane.kubectl("delete", kind, CONFIGURATION_NAME, "--ignore-not-found", check=False)
        for server in servers:
            try:
                if server.running():
                    server.stop()
            finally:
                server.kill()


@pytest.fixture
def ns(setup: Setup) -> str:
    name = f"e2e-resume-{uuid.uuid4().hex[:6]}"
    setup.kubectl("create", "namespace", name)
    return name


def now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def evicted_workload(setup: Setup, ns: str, name: str, count: int, at: str | None = None) -> None:
    """A Kueue Workload for a pod group, then an Evicted condition through the status subresource."""
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "queueName": QUEUE,
            "podSets": [
                {
                    "name": "main",
                    "count": count,
                    "template": {"spec": {"containers": [{"name": "main", "image": IMAGE}]}},
                }
            ],
        },
    }
    setup.kubectl("create", "-f", "-", input=json.dumps(workload))
    status = {
        "status": {
            "conditions": [
                {
                    "type": "Evicted",
                    "status": "True",
                    "reason": "Preempted",
                    "message": "Preempted to accommodate a workload due to prioritization in the ClusterQueue",
                    "lastTransitionTime": at or now_stamp(),
                    "observedGeneration": 1,
                }
            ],
            "requeueState": {"count": 1},
        }
    }
    setup.kubectl(
        "patch",
        "workloads.kueue.x-k8s.io",
        name,
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )


def group_pod(
    ns: str, name: str, group: str, count: int, *, tier: str, priority_class: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 120,
        "containers": [{"name": "main", "image": IMAGE, "command": ["python", "train.py"]}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"trainguard.dev/tier": tier, "kueue.x-k8s.io/queue-name": QUEUE},
            "annotations": {
                "kueue.x-k8s.io/pod-group-name": group,
                "kueue.x-k8s.io/pod-group-total-count": str(count),
                "trainguard.dev/checkpoint-interval": "30m",
                "trainguard.dev/checkpoint-uri": "s3://bucket/run",
                "trainguard.dev/checkpoint-owner": "team-e2e",
            },
        },
        "spec": spec,
    }


def create(setup: Setup, manifest: dict[str, Any]) -> dict[str, Any]:
    result = setup.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(manifest), check=False)
    assert result.returncode == 0, result.stderr
    created: dict[str, Any] = json.loads(result.stdout)
    return created


def pods(setup: Setup, ns: str) -> dict[str, dict[str, Any]]:
    items = json.loads(setup.kubectl("get", "pods", "-n", ns, "-o", "json").stdout)["items"]
    return {p["metadata"]["name"]: p for p in items}


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == GATE for g in pod["spec"].get("schedulingGates") or ())


def until(predicate: Callable[[], bool], seconds: float, what: str, setup: Setup) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    logs = "\n".join(s.log_tail(15) for s in setup.servers if s.process is not None)
    raise AssertionError(f"not within {seconds:.0f} s: {what}\n{logs}")


def mark_ready(setup: Setup, ns: str, name: str) -> None:
    stamp = now_stamp()
    status = {
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": stamp},
                {"type": "Ready", "status": "True", "lastTransitionTime": stamp},
            ],
        }
    }
    setup.kubectl(
        "patch", "pod", name, "-n", ns, "--subresource=status", "--type=merge", "-p", json.dumps(status)
    )


def events(setup: Setup, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(setup.kubectl("get", "events", "-n", ns, "-o", "json").stdout)[
        "items"
    ]
    return [e for e in items if e.get("source", {}).get("component") == "trainguard-resume"]


def wait_for_gating(setup: Setup, ns: str, group: str) -> None:
    """Until the webhook's eviction cache has the Workload: a server-side dry run comes back gated."""

    def probe() -> bool:
        manifest = group_pod(ns, f"probe-{uuid.uuid4().hex[:5]}", group, 1, tier="preemptible")
        result = setup.kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(manifest), check=False
        )
        return result.returncode == 0 and gated(json.loads(result.stdout))

    until(probe, 30, f"the webhook gates pods of {ns}/{group}", setup)


def test_gated_resumed_in_priority_order_one_per_queue_first_starts_untouched(setup: Setup, ns: str) -> None:
    # Evicted at the same second, and named so that the name order (the last tie-breaker) would
    # put the preemptible one first: only the priority puts b-high first.
    at = now_stamp()
    evicted_workload(setup, ns, "a-spot", 2, at)
    evicted_workload(setup, ns, "b-high", 2, at)
    wait_for_gating(setup, ns, "a-spot")
    wait_for_gating(setup, ns, "b-high")

    spot = [create(setup, group_pod(ns, f"spot-{i}", "a-spot", 2, tier="preemptible")) for i in range(2)]
    high = [
        create(
            setup,
            group_pod(ns, f"high-{i}", "b-high", 2, tier="guaranteed", priority_class="resume-e2e-high"),
        )
        for i in range(2)
    ]
    fresh = create(setup, group_pod(ns, "fresh-0", "fresh", 1, tier="preemptible"))

    # What the API server stored: the gate, the evidence, and for the preemptible pods the resume
    # class with its value (the Priority plugin re-checks the pair after the webhooks).
    for p in spot + high:
        assert gated(p), p["metadata"]["name"]
        assert p["metadata"]["labels"][GATE] == "gated"
        assert p["metadata"]["annotations"]["trainguard.dev/resume-queue"] == f"{ns}/{QUEUE}"
        assert p["metadata"]["annotations"]["trainguard.dev/resume-evidence"].endswith(
            "condition Evicted=True reason Preempted"
        )
    assert {(p["spec"]["priorityClassName"], p["spec"]["priority"]) for p in spot} == {
        ("resume-e2e-resume", 5000)
    }
    assert {(p["spec"]["priorityClassName"], p["spec"]["priority"]) for p in high} == {
        ("resume-e2e-high", 100000)
    }
    assert not gated(fresh) and GATE not in fresh["metadata"].get("labels", {})
    assert fresh["spec"].get("priorityClassName") is None

    # After the cooldown the higher-priority workload goes first, both its pods together; the queue
    # then holds the other one while the first is not Running and Ready for the settle time.
    until(
        lambda: not any(gated(pods(setup, ns)[f"high-{i}"]) for i in range(2)),
        COOLDOWN + 15,
        "high released",
        setup,
    )
    now = pods(setup, ns)
    assert gated(now["spot-0"]) and gated(now["spot-1"])
    assert {now[f"high-{i}"]["metadata"]["labels"][GATE] for i in range(2)} == {"released"}
    time.sleep(SETTLE + 2)
    assert gated(pods(setup, ns)["spot-0"]), "the queue had room although high was still resuming"
    until(
        lambda: any(
            e["reason"] == "ResumeWaiting"
            and e["involvedObject"]["name"] == "a-spot"
            and f"queue {ns}/{QUEUE} has 1 of 1" in e["message"]
            for e in events(setup, ns)
        ),
        10,
        "a ResumeWaiting event on spot naming its full queue",
        setup,
    )

    for i in range(2):
        mark_ready(setup, ns, f"high-{i}")
    until(
        lambda: not any(gated(pods(setup, ns)[f"spot-{i}"]) for i in range(2)),
        SETTLE + 15,
        "spot released",
        setup,
    )
    # On the Kueue Workloads themselves (uid included, so `kubectl describe workload` lists them).
    uids = {
        name: json.loads(
            setup.kubectl("get", "workloads.kueue.x-k8s.io", name, "-n", ns, "-o", "json").stdout
        )["metadata"]["uid"]
        for name in ("a-spot", "b-high")
    }
    released = {
        (e["involvedObject"]["kind"], e["involvedObject"]["name"], e["involvedObject"].get("uid"))
        for e in events(setup, ns)
        if e["reason"] == "ResumeReleased"
    }
    assert released == {("Workload", name, uid) for name, uid in uids.items()}
    assert not gated(pods(setup, ns)["fresh-0"])


def test_a_workload_short_of_pods_is_released_by_the_bound(setup: Setup, ns: str) -> None:
    evicted_workload(setup, ns, "short", 3)
    wait_for_gating(setup, ns, "short")
    for i in range(2):
        assert gated(create(setup, group_pod(ns, f"short-{i}", "short", 3, tier="preemptible")))
    time.sleep(COOLDOWN + 2)
    assert all(gated(p) for p in pods(setup, ns).values()), "released before all its pods existed"
    until(
        lambda: not any(gated(p) for p in pods(setup, ns).values()),
        MAX_GATED + 10,
        "released by the bound",
        setup,
    )
    (bound,) = [e for e in events(setup, ns) if e["reason"] == "ResumeBoundReached"]
    assert bound["type"] == "Warning" and "the longest the platform allows (25s)" in bound["message"]


def _resume_facts(pod: dict[str, Any]) -> dict[str, Any]:
    """What the resume policies write on a pod: trainguard's labels and annotations, the gates."""
    meta = pod["metadata"]
    return {
        "labels": {k: v for k, v in (meta.get("labels") or {}).items() if k.startswith("trainguard.dev/")},
        "annotations": {
            k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith("trainguard.dev/resume")
        },
        "gates": pod["spec"].get("schedulingGates"),
        "priorityClassName": pod["spec"].get("priorityClassName"),
    }


def test_audit_check_and_the_webhook_patch_an_evicted_workloads_pod_alike(
    setup: Setup, ns: str, tmp_path: Path
) -> None:
    evicted_workload(setup, ns, "parity", 1)
    wait_for_gating(setup, ns, "parity")
    manifest = group_pod(ns, "parity-0", "parity", 1, tier="guaranteed")

    # The webhook: both calls of a server-side dry run.
    dry = setup.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(manifest))
    by_webhook = json.loads(dry.stdout)

    # check: the Kueue Workload as the cluster stores it, given beside the pod.
    workload = json.loads(
        setup.kubectl("get", "workloads.kueue.x-k8s.io", "parity", "-n", ns, "-o", "json").stdout
    )
    given = tmp_path / "parity.yaml"
    given.write_text(yaml.safe_dump_all([workload, manifest]), encoding="utf-8")
    checked = trainguard("check", str(given), "--config", str(setup.config), "-o", "json")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    (check_result,) = [r for r in json.loads(checked.stdout)["results"] if r["kind"] == "Pod"]
    by_check = jsonpatch.apply_patch(manifest, check_result["patch"])

    # audit: the same pod stored as written (no webhook registered meanwhile), then "would patch".
    for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
        setup.kubectl("delete", kind, CONFIGURATION_NAME)
    try:

        def unmutated() -> bool:
            probe = {
                **manifest,
                "metadata": {**manifest["metadata"], "name": f"probe-{uuid.uuid4().hex[:5]}"},
            }
            return not gated(create(setup, probe))

        until(unmutated, 30, "the API server stops calling the webhooks", setup)
        stored = create(setup, manifest)
    finally:
        setup.register(setup.servers[0])
    audited = trainguard(
        "audit",
        "--kubeconfig",
        str(setup.plane.kubeconfig),
        "-n",
        ns,
        "--config",
        str(setup.config),
        "-o",
        "json",
    )
    assert audited.returncode in (0, 1), audited.stdout + audited.stderr
    (audit,) = [
        o for o in json.loads(audited.stdout)["results"] if o["kind"] == "Pod" and o["name"] == "parity-0"
    ]
    by_audit = jsonpatch.apply_patch(stored, audit["wouldPatch"])

    assert gated(by_webhook)
    assert _resume_facts(by_check) == _resume_facts(by_webhook) == _resume_facts(by_audit)


def resume_samples(setup: Setup) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The resume metrics of every running replica, summed (only the leader's move)."""
    total: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for server in setup.servers:
        if server.running():
            for key, value in server.metrics().items():
                if key[0].startswith("trainguard_resume_"):
                    total[key] = total.get(key, 0.0) + value
    return total


def released(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], reason: str) -> float:
    return samples.get(("trainguard_resume_releases_total", (("reason", reason),)), 0.0)


def gated_now(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
    return samples.get(("trainguard_resume_gated_workloads", (("tier", "preemptible"),)), 0.0)


def test_the_resume_metrics_show_a_gated_workload_and_its_release(setup: Setup, ns: str) -> None:
    before = resume_samples(setup)
    evicted_workload(setup, ns, "metered", 2)
    wait_for_gating(setup, ns, "metered")
    # One of its two pods: it stays gated (released together when all exist) while we look.
    assert gated(create(setup, group_pod(ns, "metered-0", "metered", 2, tier="preemptible")))
    until(lambda: gated_now(resume_samples(setup)) >= 1, MAX_GATED - 5, "the gated gauge counts it", setup)

    assert gated(create(setup, group_pod(ns, "metered-1", "metered", 2, tier="preemptible")))
    until(
        lambda: not any(gated(p) for p in pods(setup, ns).values()), MAX_GATED + 10, "metered released", setup
    )
    until(
        lambda: released(resume_samples(setup), "ResumeReleased") > released(before, "ResumeReleased"),
        15,
        "the release counted",
        setup,
    )
    after = resume_samples(setup)
    assert gated_now(after) == 0
    waited = ("trainguard_resume_gated_seconds_count", (("reason", "ResumeReleased"),))
    assert after[waited] > before.get(waited, 0.0)
    # Every metric the dashboard's resume row reads, from servers running the controller.
    exported = {name for name, _labels in after}
    assert resume_metric_names() <= exported, sorted(resume_metric_names() - exported)


def test_the_standby_replica_takes_over(setup: Setup, ns: str) -> None:
    until(lambda: setup.lease_holder() is not None, 30, "a resume leader", setup)
    holder = setup.lease_holder()
    # The identity is <host>-<pid>-<random>, the pid of the worker process that campaigns: the
    # replica whose process, or one of its worker processes, holds the Lease leads.
    leader = next(s for s in setup.servers if s.process is not None and _runs(s.process.pid, str(holder)))
    survivor = next(s for s in setup.servers if s is not leader)
    setup.register(survivor)
    leader.stop()
    until(lambda: setup.lease_holder() not in (None, holder), 20, "the standby holds the Lease", setup)

    evicted_workload(setup, ns, "after", 1)
    wait_for_gating(setup, ns, "after")
    # As Kueue's pod webhook leaves it when it runs first: managed, behind Kueue's own gate.
    manifest = group_pod(ns, "after-0", "after", 1, tier="preemptible")
    manifest["metadata"]["labels"]["kueue.x-k8s.io/managed"] = "true"
    manifest["spec"]["schedulingGates"] = [{"name": "kueue.x-k8s.io/admission"}]
    created = create(setup, manifest)
    assert [g["name"] for g in created["spec"]["schedulingGates"]] == ["kueue.x-k8s.io/admission", GATE]
    until(lambda: not gated(pods(setup, ns)["after-0"]), COOLDOWN + 15, "released by the new leader", setup)
    # Only trainguard's gate is lifted: Kueue's stays for Kueue to lift.
    assert pods(setup, ns)["after-0"]["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
    assert "could not lift" not in survivor.log.read_text()


def _runs(pid: int, identity: str) -> bool:
    """Whether `identity` names process `pid` or one of its children (serve's worker processes)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        children = []
    return any(f"-{p}-" in identity for p in [str(pid), *children])

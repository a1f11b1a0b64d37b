"""The resume controller: lifts resume gates as `plan()` says, on the replica that holds the Lease.

Every `interval` seconds the leader reads the marked pods from the watch cache, plans, and for each
release patches every gated pod of the workload (JSON Patch: test that the gate is still at its
index, remove it, mark the pod released). It keeps no state that matters across leaders: what has
been released is written on the pods, so a new leader carries on where the old one stopped.

Events go on the object that holds the eviction record (the Kueue Workload, or the job): why the
workload waits (once per distinct reason) and when it is released.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from webhook.config import PlatformConfig
from webhook.context import Evictions
from webhook.leader import LeaderElector
from webhook.metrics import Metrics
from webhook.recovery.cluster_state import RecoveryState
from webhook.recovery.plan import (
    GATE,
    LABEL,
    RELEASED_AT,
    Plan,
    Release,
    ResumeWorkload,
    TierSettings,
    group_pods,
    plan,
)

log = logging.getLogger("trainguard.resume")

LEASE_NAME = "trainguard-resume"
COMPONENT = "trainguard-resume"
# How long a pod we patched counts as released although the cache still shows its gate: the
# watch normally catches up within a second; until it does the queue must not be over-filled.
_PATCHED_MEMORY = timedelta(seconds=60)


def tier_settings(config: PlatformConfig | None) -> dict[str, TierSettings | None]:
    if config is None:
        return {}
    out: dict[str, TierSettings | None] = {}
    for tier in ("guaranteed", "preemptible"):
        block = config.recovery(tier)
        out[tier] = TierSettings.from_config(block) if block is not None else None
    return out


def default_identity() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def release_patch(gate_index: int, now: datetime) -> list[dict[str, Any]]:
    """The JSON Patch that lifts the gate at `gate_index` and records the release on the pod."""
    return [
        {"op": "test", "path": f"/spec/schedulingGates/{gate_index}/name", "value": GATE},
        {"op": "remove", "path": f"/spec/schedulingGates/{gate_index}"},
        {"op": "add", "path": f"/metadata/labels/{_escape(LABEL)}", "value": "released"},
        {"op": "add", "path": f"/metadata/annotations/{_escape(RELEASED_AT)}", "value": _stamp(now)},
    ]


class ResumeController:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        pods: Callable[[], list[dict[str, Any]] | None],  # None until the pod cache has synced
        records: Callable[[], Evictions] = dict,  # eviction records: the object an event goes on
        config: Callable[[], PlatformConfig | None],
        lease_namespace: str,
        identity: str | None = None,
        interval: float = 1.0,
        lease_seconds: float = 15.0,
        renew_seconds: float = 5.0,
        retry_seconds: float = 2.0,
        metrics: Metrics | None = None,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.metrics = metrics
        self.pods = pods
        self.records = records
        self.config = config
        self.interval = interval
        self.identity = identity or default_identity()
        self.elector = LeaderElector(
            client.CoordinationV1Api(api),
            namespace=lease_namespace,
            name=LEASE_NAME,
            identity=self.identity,
            lease_seconds=lease_seconds,
            renew_seconds=renew_seconds,
            retry_seconds=retry_seconds,
            on_started=self._wake_up,
            on_stopped=self._stepped_down,
        )
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainguard-resume", daemon=True)
        self._patched: dict[str, datetime] = {}  # pod uid -> when we lifted its gate
        self._said: dict[str, str] = {}  # workload key -> the last waiting message sent as an event
        self._unsettled: set[str] = set()  # workloads already counted as unsettled past the bound

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self.elector.start()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.elector.stop()

    def _wake_up(self) -> None:
        log.info("resume controller leading", extra={"identity": self.identity})
        self._said.clear()
        self._wake.set()

    def _stepped_down(self) -> None:
        log.info("resume controller standing by", extra={"identity": self.identity})
        if self.metrics is not None:  # the new leader reports what is gated now
            self.metrics.set_resume_gated({})

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.interval)
            self._wake.clear()
            if self._stop.is_set() or not self.elector.is_leader:
                continue
            try:
                self.tick(datetime.now(UTC))
            except Exception:  # the loop must outlive one bad tick (the next one re-reads everything)
                log.exception("resume controller tick failed")

    # -- one round --------------------------------------------------------------------------------

    def tick(self, now: datetime) -> Plan:
        pods = self.pods()
        if pods is None:  # a plan from a half-listed cache could over-fill a queue
            return Plan()
        settings = tier_settings(self.config())
        workloads = group_pods(self._with_own_patches(pods, now))
        decided = plan(workloads, settings, now)
        for release in decided.releases:
            self._release(release, now)
        by_key = {w.key: w for w in workloads}
        for key, message in decided.waiting.items():
            if self._said.get(key) != message:
                self._said[key] = message
                self._event(by_key[key], "ResumeWaiting", message, "Normal", now)
        for key in list(self._said):
            if key not in decided.waiting:
                del self._said[key]
        self._observe(decided, workloads)
        return decided

    def _observe(self, decided: Plan, workloads: list[ResumeWorkload]) -> None:
        if self.metrics is None:
            return
        self.metrics.set_resume_gated(decided.still_gated(workloads))
        # Counted once per workload; a key leaves the set when its pods are gone.
        new = set(decided.unsettled) - self._unsettled
        if new:
            self.metrics.observe_resume_unsettled(len(new))
        self._unsettled = (self._unsettled | new) & {w.key for w in workloads}

    def _with_own_patches(self, pods: list[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
        """The cache's pods, with the gates we already lifted lifted (the watch may lag behind)."""
        self._patched = {uid: t for uid, t in self._patched.items() if now - t < _PATCHED_MEMORY}
        out = []
        for pod in pods:
            uid = (pod.get("metadata") or {}).get("uid")
            gates = (pod.get("spec") or {}).get("schedulingGates") or []
            if uid in self._patched and any(g.get("name") == GATE for g in gates if isinstance(g, dict)):
                pod = copy.deepcopy(pod)
                pod["spec"]["schedulingGates"] = [g for g in gates if g.get("name") != GATE]
                pod["metadata"].setdefault("annotations", {})[RELEASED_AT] = _stamp(self._patched[uid])
            out.append(pod)
        return out

    def _release(self, release: Release, now: datetime) -> None:
        w = release.workload
        lifted = 0
        for pod in w.gated:
            if pod.gate_index is None:
                continue
            try:
                self.core.patch_namespaced_pod(
                    pod.name,
                    w.namespace,
                    release_patch(pod.gate_index, now),
                    _content_type="application/json-patch+json",
                )
            except ApiException as exc:
                # 404: the pod is gone; 422: its gates changed since the cache saw them. Either
                # way the next tick reads it again.
                log.info(
                    "could not lift a resume gate",
                    extra={"pod": f"{w.namespace}/{pod.name}", "status": exc.status, "reason": exc.reason},
                )
                continue
            self._patched[pod.uid] = now
            lifted += 1
        if lifted:
            if self.metrics is not None:
                self.metrics.observe_resume_release(release.reason, (now - w.gated_since).total_seconds())
            kind = "Warning" if release.reason == "ResumeBoundReached" else "Normal"
            self._event(w, release.reason, release.message, kind, now)
            log.info(
                "resume gates lifted",
                extra={"workload": w.key, "pods": lifted, "reason": release.reason, "queue": w.queue},
            )

    def _event(self, w: ResumeWorkload, reason: str, message: str, kind: str, now: datetime) -> None:
        record = self.records().get(w.key) or {}
        involved = {k: v for k, v in (record.get("object") or {}).items() if v}
        if not involved:  # the record is gone: name the object as the pods' annotation does
            namespace, obj_kind, obj_name = (w.key.split("/", 2) + ["", ""])[:3]
            involved = {"kind": obj_kind, "name": obj_name, "namespace": namespace or w.namespace}
        name = str(involved.get("name") or "workload")
        body = {
            "metadata": {"generateName": f"{name[:40]}.resume-", "namespace": w.namespace},
            "involvedObject": involved,
            "reason": reason,
            "message": message if not w.evidence else f"{message} (evicted before: {w.evidence})",
            "type": kind,
            "source": {"component": COMPONENT},
            "reportingComponent": f"trainguard.dev/{COMPONENT}",
            "reportingInstance": self.identity[:128],
            "firstTimestamp": _stamp(now),
            "lastTimestamp": _stamp(now),
            "count": 1,
        }
        try:
            self.core.create_namespaced_event(w.namespace, body)  # type: ignore[arg-type]  # a dict body is sent as is
        except ApiException as exc:  # an event is worth a log line, not a failed release
            log.info("could not record an event", extra={"workload": w.key, "status": exc.status})


def _stamp(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class RecoveryService:
    """The recovery caches and the resume controller, started and stopped together by `serve`."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        config: Callable[[], PlatformConfig | None],
        lease_namespace: str,
        on_evictions: Callable[[Evictions], None],
        identity: str | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.state = RecoveryState(api, on_evictions)
        self.controller = ResumeController(
            api,
            pods=self._pods,
            records=lambda: self.state.evictions,
            config=config,
            lease_namespace=lease_namespace,
            identity=identity,
            metrics=metrics,
        )

    def _pods(self) -> list[dict[str, Any]] | None:
        return self.state.pods() if self.state.pods_synced else None

    def start(self) -> None:
        self.state.start()
        self.controller.start()

    def stop(self) -> None:
        self.controller.stop()
        self.state.stop()

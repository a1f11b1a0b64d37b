"""What the cluster says about recovery, mirrored by watches (the same WatchCache as webhook.cluster).

    evictions   Kueue Workloads (v1beta2 and v1beta1) and the job kinds that keep their own restart
                record (PyTorchJob, MPIJob, JobSet, Volcano Job), reduced to eviction records keyed
                "namespace/Kind/name" (webhook.context.eviction_entries); policies read them as
                `cluster.evictions`. Only objects with an eviction or restart history are kept.
    pods        pods the resume gate marked (label trainguard.dev/resume), trimmed to what the
                resume controller reads.

A resource whose CRD is not installed is retried with backoff and logged once, as the other caches are.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from webhook.cluster import Resource, WatchCache, namespaced_key
from webhook.context import Evictions, eviction_entries
from webhook.recovery.plan import LABEL

# (cache name, group, version, plural, kind)
EVICTION_SOURCES: tuple[tuple[str, str, str, str, str], ...] = (
    ("kueue-workloads", "kueue.x-k8s.io", "v1beta2", "workloads", "Workload"),
    ("kueue-workloads-v1beta1", "kueue.x-k8s.io", "v1beta1", "workloads", "Workload"),
    ("pytorchjobs", "kubeflow.org", "v1", "pytorchjobs", "PyTorchJob"),
    ("mpijobs", "kubeflow.org", "v2beta1", "mpijobs", "MPIJob"),
    ("jobsets", "jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
    ("volcano-jobs", "batch.volcano.sh", "v1alpha1", "jobs", "Job"),
)


def eviction_value(api_version: str, kind: str) -> Callable[[Mapping[str, Any]], Any]:
    """A cache value: the object's eviction entries, or None (not kept) when it has none."""

    def value(obj: Mapping[str, Any]) -> tuple[tuple[str, dict[str, Any]], ...] | None:
        # List items of some API servers carry no apiVersion/kind: the resource says what they are.
        full = {"apiVersion": api_version, "kind": kind, **obj}
        entries = eviction_entries(full)
        return tuple(entries) if entries else None

    return value


def pod_value(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a pod the resume controller reads."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {
        "metadata": {
            k: meta[k]
            for k in (
                "name",
                "namespace",
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "labels",
                "annotations",
            )
            if k in meta
        },
        "spec": {k: spec[k] for k in ("schedulingGates", "priority") if k in spec},
        "status": {k: status[k] for k in ("phase", "conditions") if k in status},
    }


class RecoveryState:
    """The eviction and pod caches; `on_evictions(records)` after the eviction records change."""

    def __init__(self, api: client.ApiClient, on_evictions: Callable[[Evictions], None]) -> None:
        self._stop = threading.Event()
        self._on_evictions = on_evictions
        custom = client.CustomObjectsApi(api)
        core = client.CoreV1Api(api)

        def crd(group: str, version: str, plural: str) -> Callable[..., Any]:
            def call(**kwargs: Any) -> Any:
                return custom.list_cluster_custom_object(group, version, plural, **kwargs)

            return call

        def marked_pods(**kwargs: Any) -> Any:
            return core.list_pod_for_all_namespaces(label_selector=LABEL, **kwargs)

        self.eviction_caches = [
            WatchCache(
                Resource(
                    name,
                    crd(group, version, plural),
                    namespaced_key,
                    eviction_value(f"{group}/{version}", kind),
                ),
                self._changed,
                self._stop,
            )
            for name, group, version, plural, kind in EVICTION_SOURCES
        ]
        self.pod_cache = WatchCache(
            Resource("resume-pods", marked_pods, namespaced_key, pod_value), _quiet, self._stop
        )

    def start(self) -> None:
        for cache in (*self.eviction_caches, self.pod_cache):
            cache.start()

    def stop(self) -> None:
        self._stop.set()
        for cache in (*self.eviction_caches, self.pod_cache):
            cache.interrupt()

    @property
    def evictions(self) -> Evictions:
        out: Evictions = {}
        for cache in self.eviction_caches:
            for entries in cache.snapshot().values():
                out.update(entries)
        return out

    def pods(self) -> list[dict[str, Any]]:
        return list(self.pod_cache.snapshot().values())

    @property
    def pods_synced(self) -> bool:
        return self.pod_cache.synced.is_set()

    def _changed(self) -> None:
        self._on_evictions(self.evictions)


def _quiet() -> None:
    """Pod changes need no push: the controller reads the pod cache on every tick."""

"""The caches the engine reads from the cluster: PriorityClasses (name -> value), TrainingRuntimes
((namespace, name) -> object), ClusterTrainingRuntimes ((None, name) -> object) and
PolicyExceptions, each a WatchCache."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client

from webhook.cluster.watch import (
    Resource,
    WatchCache,
    cluster_scoped_key,
    metadata_of,
    name_key,
    namespaced_key,
    object_value,
    priority_value,
)
from webhook.context import Runtimes
from webhook.engine import PolicyException, parse_exception
from webhook.errors import PolicyError

log = logging.getLogger("trainguard.cluster")

TRAINER_GROUP, TRAINER_VERSION = "trainer.kubeflow.org", "v1alpha1"
EXCEPTION_GROUP, EXCEPTION_VERSION, EXCEPTION_PLURAL = "trainguard.dev", "v1alpha1", "policyexceptions"


def exception_value(obj: Mapping[str, Any]) -> PolicyException | None:
    """A PolicyException object as the engine honours it; None (and a log line) when it is invalid.

    The server-managed metadata (uid, resourceVersion, managedFields …) and status are not part of
    the contract and are dropped before the strict parse a file gets.
    """
    meta = metadata_of(obj)
    doc = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "metadata": {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if k in meta},
        "spec": obj.get("spec"),
    }
    where = f"PolicyException {meta.get('namespace')}/{meta.get('name')}"
    try:
        return parse_exception(doc, where)
    except PolicyError as exc:
        log.warning("ignoring an invalid PolicyException", extra={"object": where, "problem": str(exc)})
        return None


class ClusterCaches:
    """The caches the engine reads; `on_change(priority_classes, runtimes, exceptions)` after any change."""

    def __init__(
        self,
        api: client.ApiClient,
        on_change: Callable[[Mapping[str, int], Runtimes, list[PolicyException]], None],
    ) -> None:
        self._stop = threading.Event()
        self._on_change = on_change
        custom = client.CustomObjectsApi(api)

        def crd(plural: str) -> Callable[..., Any]:
            def call(**kwargs: Any) -> Any:
                return custom.list_cluster_custom_object(TRAINER_GROUP, TRAINER_VERSION, plural, **kwargs)

            return call

        def exceptions_call(**kwargs: Any) -> Any:
            return custom.list_cluster_custom_object(
                EXCEPTION_GROUP, EXCEPTION_VERSION, EXCEPTION_PLURAL, **kwargs
            )

        resources = [
            Resource(
                "priorityclasses", client.SchedulingV1Api(api).list_priority_class, name_key, priority_value
            ),
            Resource("trainingruntimes", crd("trainingruntimes"), namespaced_key, object_value),
            Resource(
                "clustertrainingruntimes", crd("clustertrainingruntimes"), cluster_scoped_key, object_value
            ),
            Resource("policyexceptions", exceptions_call, namespaced_key, exception_value),
        ]
        self.caches = {r.name: WatchCache(r, self._changed, self._stop) for r in resources}

    def start(self) -> None:
        for cache in self.caches.values():
            cache.start()

    def stop(self) -> None:
        self._stop.set()
        for cache in self.caches.values():
            cache.interrupt()

    @property
    def priority_classes(self) -> dict[str, int]:
        return {str(k): v for k, v in self.caches["priorityclasses"].snapshot().items()}

    @property
    def runtimes(self) -> dict[tuple[str | None, str], dict[str, Any]]:
        out: dict[tuple[str | None, str], dict[str, Any]] = {}
        for name in ("trainingruntimes", "clustertrainingruntimes"):
            out.update(self.caches[name].snapshot())  # type: ignore[arg-type]
        return out

    @property
    def exceptions(self) -> list[PolicyException]:
        return list(self.caches["policyexceptions"].snapshot().values())

    def _changed(self) -> None:
        self._on_change(self.priority_classes, self.runtimes, self.exceptions)

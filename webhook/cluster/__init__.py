"""Optional cluster awareness; without cluster access the server works from its files alone and
nothing here is imported. With webhook/leader.py and the cluster modules of the audit and recovery
packages (`audit.cluster`, `audit.cluster_serve`, `recovery.cluster_state`, `recovery.controller`),
the only code that uses the kubernetes client.

    watch         a generic watch cache (list, watch from the list's resourceVersion, re-list on
                  410 Gone, bounded jittered backoff), with pure event handling
    caches        ClusterCaches: PriorityClasses, TrainingRuntimes, ClusterTrainingRuntimes and
                  PolicyExceptions, each a watch cache
    credentials   an ApiClient from a kubeconfig or the service account
    registration  Registrar: server-side apply of the two webhook configurations with the current CA
    cabundle      CABundleInjector: only the caBundle of the two configurations the install created
"""

from __future__ import annotations

from webhook.cluster.cabundle import CABundleInjector, ca_bundle_patch
from webhook.cluster.caches import (
    EXCEPTION_GROUP,
    EXCEPTION_PLURAL,
    EXCEPTION_VERSION,
    TRAINER_GROUP,
    TRAINER_VERSION,
    ClusterCaches,
    exception_value,
)
from webhook.cluster.credentials import api_client
from webhook.cluster.registration import FIELD_MANAGER, Registrar
from webhook.cluster.watch import (
    WATCH_TIMEOUT_SECONDS,
    Backoff,
    ClusterError,
    Resource,
    WatchCache,
    apply_event,
    cluster_scoped_key,
    name_key,
    namespaced_key,
    object_value,
    priority_value,
    replace_all,
)

__all__ = [
    "EXCEPTION_GROUP",
    "EXCEPTION_PLURAL",
    "EXCEPTION_VERSION",
    "TRAINER_GROUP",
    "TRAINER_VERSION",
    "FIELD_MANAGER",
    "WATCH_TIMEOUT_SECONDS",
    "Backoff",
    "CABundleInjector",
    "ClusterCaches",
    "ClusterError",
    "Registrar",
    "Resource",
    "WatchCache",
    "api_client",
    "apply_event",
    "ca_bundle_patch",
    "cluster_scoped_key",
    "exception_value",
    "name_key",
    "namespaced_key",
    "object_value",
    "priority_value",
    "replace_all",
]

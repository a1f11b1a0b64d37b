"""What a served webhook needs from the cluster: cache contents for the engine, self-registration.

Started once the server listens (on_started) and stopped when it drains (on_stopping); the
kubernetes client runs on its own threads and hands changes to the event loop's thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from webhook.config import PlatformConfig
from webhook.engine import PolicyException
from webhook.kinds import KINDS
from webhook.serve.reload import Reloader, Runtimes, read_file
from webhook.serve.settings import Settings

__all__ = ["cluster_hooks"]


def cluster_hooks(
    settings: Settings, reloader: Reloader
) -> tuple[Callable[[asyncio.AbstractEventLoop, bool], None], Callable[[], None]]:
    """Start/stop callbacks for the cluster caches and self-registration (threads, not the loop).

    Every worker process keeps its own caches (each decides with them); only the worker started
    with `register` writes the webhook configurations and runs the auditor (--audit), so workers
    do not race to apply them or scan the cluster once each.
    """
    from webhook import cluster  # the kubernetes client is imported only with cluster access

    api = cluster.api_client(
        kubeconfig=settings.kubeconfig, in_cluster=settings.in_cluster, connections=connections(settings)
    )
    running: list[Any] = []

    def started(loop: asyncio.AbstractEventLoop, register: bool) -> None:
        running.append(_start_caches(api, loop, reloader))
        if _governs_recovery(reloader.config):
            # Every worker decides, so every worker needs the eviction records; the Lease picks
            # one controller across workers and pods. Only where the config governs a tier: the
            # watches need deploy/rbac-resume.yaml.
            running.append(_start_recovery(api, loop, reloader, settings))
        if (settings.self_register or settings.inject_ca_bundle) and register:
            running.append(_start_registration(api, reloader, settings))
        if settings.audit and register:  # one auditor per pod; the Lease picks one across pods
            running.append(_start_audit(api, loop, reloader, settings))

    def stopping() -> None:
        for component in running:
            component.stop()

    return started, stopping


# `api` below is the kubernetes client's ApiClient, typed Any: only cluster modules import the
# kubernetes client (.importlinter). Each step returns what it started, for the stop.


def _start_caches(api: Any, loop: asyncio.AbstractEventLoop, reloader: Reloader) -> Any:
    from webhook import cluster

    def changed(
        priority_classes: Mapping[str, int], runtimes: Runtimes, exceptions: Sequence[PolicyException]
    ) -> None:
        loop.call_soon_threadsafe(reloader.set_cluster, priority_classes, runtimes, exceptions)

    caches = cluster.ClusterCaches(api, on_change=changed)
    caches.start()
    return caches


def _start_recovery(api: Any, loop: asyncio.AbstractEventLoop, reloader: Reloader, settings: Settings) -> Any:
    from webhook.recovery.controller import RecoveryService

    def evicted(records: Mapping[str, Any]) -> None:
        loop.call_soon_threadsafe(reloader.set_evictions, records)

    recovery = RecoveryService(
        api,
        config=lambda: reloader.config,
        lease_namespace=settings.webhook_namespace,
        on_evictions=evicted,
        metrics=reloader.state.metrics,
    )
    recovery.start()
    return recovery


def _start_registration(api: Any, reloader: Reloader, settings: Settings) -> Any:
    from webhook import cluster

    assert settings.ca_bundle is not None
    # Self-registration writes the whole configurations, caBundle included.
    kind = cluster.Registrar if settings.self_register else cluster.CABundleInjector
    registrar = kind(
        api,
        service=settings.webhook_service,
        namespace=settings.webhook_namespace,
        url=settings.webhook_url,
        platform=lambda: reloader.config,
        metrics=reloader.state.metrics,
    )
    registrar.start(read_file(settings.ca_bundle))
    reloader.on_ca_change = registrar.update
    reloader.on_config_change = registrar.refresh
    return registrar


def _start_audit(api: Any, loop: asyncio.AbstractEventLoop, reloader: Reloader, settings: Settings) -> Any:
    from webhook.audit.cluster_serve import AuditService

    notes = reloader.state.notes
    notes.set("reports", None)  # a note left by an earlier run in a reused directory

    def audit_problem(problem: str | None) -> None:
        loop.call_soon_threadsafe(notes.set, "reports", problem)

    audit = AuditService(
        api,
        engine=lambda: reloader.state.engine,
        on_problem=audit_problem,
        lease_namespace=settings.webhook_namespace,
        report_format=settings.report_format,
        metrics=reloader.state.metrics,
    )
    audit.start()
    return audit


# Requests one process may have open at once on its one ApiClient: a watch per cache (4), the
# resume controller's watches and writes, the Lease, the caBundle writer, and with --audit a watch
# per audited kind plus the report writer.
_BASE_CONNECTIONS = 4 + 8 + 4


def connections(settings: Settings) -> int:
    return _BASE_CONNECTIONS + (len(KINDS) + 2 if settings.audit else 0)


def _governs_recovery(config: PlatformConfig | None) -> bool:
    """The resume controller runs only where the config governs a tier (deploy/rbac-resume.yaml)."""
    return config is not None and any(config.recovery(t) for t in ("guaranteed", "preemptible"))

"""`serve --audit`: workload watches, the Reporter, and a Lease so that one replica writes.

Every replica watches (a standby is warm and takes over with its caches filled); only the holder
of the `trainguard-audit` Lease decides and writes. Stopping releases the Lease, so a standby takes
over within its retry period instead of a whole lease duration.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable

from kubernetes import client

from webhook.audit.cluster import ReportStore, WorkloadCaches
from webhook.audit.report_loop import AuditMetrics, Reporter
from webhook.audit.report_objects import DEFAULT_MAX_BYTES, formats
from webhook.engine import Engine
from webhook.leader import LeaderElector

LEASE_NAME = "trainguard-audit"

log = logging.getLogger("trainguard.audit")


def identity() -> str:
    """This replica's name in the Lease: the pod name when it has one, and something unique."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


class AuditService:
    def __init__(
        self,
        api: client.ApiClient,
        *,
        engine: Callable[[], Engine | None],
        lease_namespace: str,
        report_format: str = "wgpolicy",
        metrics: AuditMetrics | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        writes_per_second: float = 10.0,
        lease_seconds: float = 15.0,
        renew_seconds: float = 5.0,
        retry_seconds: float = 2.0,
        on_problem: Callable[[str | None], None] | None = None,
    ) -> None:
        self.api = api
        self.caches: WorkloadCaches | None = None  # built in the start thread (discovery is I/O)
        self.reporter = Reporter(
            objects=lambda: self.caches.objects() if self.caches is not None else iter(()),
            engine=engine,
            store=ReportStore(api),
            formats=formats(report_format),
            metrics=metrics,
            ready=lambda: self.caches is not None and self.caches.synced,
            max_bytes=max_bytes,
            writes_per_second=writes_per_second,
        )
        self.elector = LeaderElector(
            client.CoordinationV1Api(api),
            namespace=lease_namespace,
            name=LEASE_NAME,
            identity=identity(),
            lease_seconds=lease_seconds,
            renew_seconds=renew_seconds,
            retry_seconds=retry_seconds,
            on_started=self.reporter.start_leading,
            on_stopped=self.reporter.stop_leading,
            on_problem=on_problem,
        )
        self._stopped = threading.Event()
        self._starter = threading.Thread(target=self._start, name="trainguard-audit-start", daemon=True)

    def _changed(self) -> None:
        self.reporter.wake()

    def start(self) -> None:
        """Returns at once: finding the served kinds takes a LIST per kind."""
        self._starter.start()

    def _start(self) -> None:
        caches = WorkloadCaches(self.api, on_change=self._changed)
        if caches.missing:
            log.info("audit: kinds not served, not watched", extra={"kinds": caches.missing})
        if self._stopped.is_set():
            return
        self.caches = caches
        caches.start()
        self.reporter.start()
        self.elector.start()

    def stop(self) -> None:
        self._stopped.set()
        self.reporter.stop()
        self.elector.stop()  # releases the Lease: a standby takes over at its next retry
        if self.caches is not None:
            self.caches.stop()

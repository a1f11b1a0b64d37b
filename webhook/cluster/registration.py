"""Self-registration: create-or-patch (server-side apply) of webhookconfig.render()'s two objects
with the current CA bundle; again whenever the CA file or the platform config changes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client

from webhook import webhookconfig
from webhook.cluster.watch import Backoff
from webhook.config import PlatformConfig
from webhook.metrics import Metrics

log = logging.getLogger("trainguard.cluster")

FIELD_MANAGER = "trainguard"


class Registrar:
    """Applies the two webhook configurations with the current CA; retries in the background.

    `update()` (a new CA) and `refresh()` (a new platform config) only wake the thread: each wake
    is one more apply of the latest state, however many arrived while it was busy.
    """

    doing = "self-registration"  # in the log lines of failures
    done = "webhook configurations applied"

    def __init__(
        self,
        api: client.ApiClient,
        *,
        service: str,
        namespace: str,
        url: str | None,
        platform: Callable[[], PlatformConfig | None],
        metrics: Metrics | None = None,
        backoff: Backoff | None = None,
    ) -> None:
        self.admission = client.AdmissionregistrationV1Api(api)
        self.backoff = backoff or Backoff(base=1.0, cap=60.0)
        self.service, self.namespace, self.url = service, namespace, url
        self.platform = platform
        self.metrics = metrics
        self._ca: bytes | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.run, name="trainguard-register", daemon=True)

    def start(self, ca_pem: bytes) -> None:
        self.update(ca_pem)
        self._thread.start()

    def update(self, ca_pem: bytes) -> None:
        """The CA file changed: apply again (from any thread)."""
        self._ca = ca_pem
        self._wake.set()

    def refresh(self) -> None:
        """The platform config changed (it shapes the matchConditions): apply again."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def objects(self, ca_pem: bytes) -> list[dict[str, Any]]:
        return webhookconfig.render(
            ca_bundle=ca_pem,
            service=self.service,
            namespace=self.namespace,
            url=self.url,
            platform=self.platform(),
        )

    def apply(self, ca_pem: bytes) -> None:
        """Server-side apply of both configurations: creates them, or patches the fields we own."""
        for obj in self.objects(ca_pem):
            patch = (
                self.admission.patch_validating_webhook_configuration
                if obj["kind"] == "ValidatingWebhookConfiguration"
                else self.admission.patch_mutating_webhook_configuration
            )
            patch(
                obj["metadata"]["name"],
                obj,  # sent as JSON, which is YAML: the apply body as is
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type="application/apply-patch+yaml",
            )

    def run(self) -> None:
        """Apply on every wake, retrying with backoff until it succeeds or the stop event is set."""
        backoff = self.backoff
        while True:
            self._wake.wait()
            if self._stop.is_set():
                return
            self._wake.clear()
            ca = self._ca
            if ca is None:
                continue
            try:
                self.apply(ca)
            except Exception as exc:
                self._observe(False)
                log.warning(f"{self.doing} failed; retrying", extra={"problem": str(exc) or repr(exc)})
                self._wake.set()  # try again after the backoff
                if self._stop.wait(backoff.next()):
                    return
                continue
            backoff.reset()
            self._observe(True)
            log.info(self.done, extra={"service": self.service})

    def _observe(self, ok: bool) -> None:
        if self.metrics is not None:
            self.metrics.observe_reload("registration", ok)

"""`serve(settings)`: the served webhook's whole life, in this process or in forked workers.

serve(settings)
  build(settings)      server.py: policies, config and TLS loaded; a broken set is fatal here
  workers == 1         WebhookServer.run_here() in this process
  workers  > 1         the socket bound here, then `workers` forked processes serve it
  or recycling         (workers.py); each has its own reloader, caches and deciding threads
"""

from __future__ import annotations

import dataclasses
import logging

from webhook.serve import logs, runtime_tuning, stopsignal, workers
from webhook.serve.server import build
from webhook.serve.settings import Settings

__all__ = ["serve"]

log = logging.getLogger("trainguard.server")


def serve(settings: Settings) -> int:
    """Run the webhook until SIGTERM/SIGINT and a graceful drain; 0 on a clean stop."""
    stopsignal.install()  # a stop while loading is answered once serving starts, not by dying
    runtime_tuning.bound_allocator()  # before the first large allocation; the workers inherit it
    logs.configure(settings.log_level)
    count = (
        workers.default_workers() if settings.workers is None else workers.usable_workers(settings.workers)
    )
    settings = dataclasses.replace(settings, workers=count)
    server = build(settings)
    # After everything is loaded, before the first request; before the fork, so that every worker
    # inherits it and the frozen objects stay shared pages.
    runtime_tuning.tune_for_latency()
    if stopsignal.pending():
        log.info("stopped before serving: asked to stop while starting")
        return 0
    if count > 1 or settings.recycle_after > 0:  # recycling needs a supervisor
        return workers.run(server, settings)
    return server.run_here()

"""What `trainguard serve` can set: one frozen Settings value that every server module reads.

Each server default is written here once, as a Settings field's default: `trainguard serve`'s
flags, the HTTP app's ServerState and the HTTP limits take theirs from `default(name)`.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from webhook import install_names
from webhook.engine import Adaptations, default_policies_dir
from webhook.errors import TrainguardError

__all__ = ["ServerError", "Settings", "default"]


class ServerError(TrainguardError):
    """The server cannot start: unusable TLS files, options that contradict each other."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything `trainguard serve` can set; `serve(settings)` is the whole server."""

    tls_cert: str
    tls_key: str
    client_ca: str | None = None  # mutual TLS: admissions need a client certificate signed by this CA
    host: str = "0.0.0.0"
    port: int = 8443
    # /metrics on a listener of its own (same host, same TLS), answered there only; None: on `port`.
    metrics_port: int | None = None
    policies: tuple[str, ...] = ()  # empty: the shipped policies
    exceptions: tuple[str, ...] = ()  # PolicyException files or directories
    config: str | None = None  # None: the embedded platform defaults
    cel: str | None = None  # CEL runtime; None picks cel-expr-python when installed
    kubeconfig: str | None = None
    in_cluster: bool = False
    ca_bundle: str | None = None
    self_register: bool = False
    inject_ca_bundle: bool = False  # write only the caBundle of the configurations the install made
    webhook_service: str = install_names.SERVICE
    webhook_namespace: str = install_names.NAMESPACE
    webhook_url: str | None = None
    reload_interval: float = 2.0
    shutdown_delay: float = 5.0
    graceful_timeout: float = 10.0  # how long in-flight requests may take once draining starts
    max_body_bytes: int = 3 * 1024 * 1024  # the API server's own request limit
    metrics_sample_every: int = 16
    log_level: str = "info"
    audit: bool = False  # keep policy reports of the cluster's workloads (leader-elected writer)
    report_format: str = "wgpolicy"  # wgpolicy | openreports | both
    # Isolation and limits (DESIGN §6): per worker process.
    workers: int | None = None  # worker processes; None: the CPU limit (workers.default_workers)
    max_in_flight: int = 8  # admissions read and decided at once; more wait in a short queue
    # Admissions waiting for a slot (holding their headers and at most 64 KiB of body each): a
    # burst is absorbed, a flood past this gets 429 at once.
    max_queued: int = 128
    queue_wait: float = 2.0  # seconds an admission may wait for a slot (within its budget) before a 429
    decision_threads: int = 4  # threads deciding off the event loop
    header_timeout: float = 10.0  # seconds from connect (or the first byte of a request) to its headers
    body_timeout: float = 10.0  # seconds to receive a whole body once its headers are in
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    max_connections: int = 1000  # open connections per worker; uvicorn answers 503 beyond
    request_budget: float = 4.0  # seconds per admission: below the webhook's timeoutSeconds (5)
    # Seconds an admission may run on the event loop before it moves to a deciding thread: the
    # longest a probe or another admission waits behind one decision. A training Pod's review takes
    # about 1 ms. 0: every admission on a deciding thread.
    inline_slice: float = 0.02
    # Admissions per worker before a fresh one replaces it (0: never). Under 300,000 mixed reviews
    # (one in a thousand of 2.8 MiB) a worker's memory rose for its first 50,000-90,000 admissions
    # before levelling off; replaced every 40,000 the tree stayed within 6 % of its figure after the
    # warm-up, with no failed request (tests/bench/bench_memory.py, tests/bench/RESULTS.md).
    recycle_after: int = 40_000
    # Bytes of objects (canonical JSON) whose adaptation a mutating call keeps for its validating
    # call (engine.Adaptations); 0: none kept.
    adaptation_bytes: int = Adaptations.DEFAULT_MAX_BYTES

    @property
    def policy_paths(self) -> list[str | Path]:
        return list(self.policies) or [default_policies_dir()]

    @property
    def cluster(self) -> bool:
        return self.kubeconfig is not None or self.in_cluster


_DEFAULTS = {f.name: f.default for f in fields(Settings) if f.default is not MISSING}


def default(name: str) -> Any:
    """The default of the Settings field `name` (KeyError for a field without one)."""
    return _DEFAULTS[name]

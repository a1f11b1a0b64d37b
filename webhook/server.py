"""The webhook server: uvicorn's Config + Server lifecycle, live reload, graceful shutdown.

    serve(settings)
      build(settings)      policies + config loaded (a broken set here is fatal: there is no last good one),
                           uvicorn.Config(...).load(), TLS 1.2 minimum set on uvicorn's SSLContext
      WebhookServer.serve  startup -> reload task (+ cluster caches, self-registration) -> main loop
                           -> SIGTERM: not ready at once, keep serving `shutdown_delay` s, then drain

Live reload polls content hashes (a ConfigMap update swaps a `..data` symlink; hashing the files
sees it). A changed policy set or config is loaded and compiled off the event loop and installed
by one assignment; a broken one is logged with its location, counted, and the last good engine
keeps deciding. Changed certificate files are checked as a pair on a scratch context, then loaded
into the serving context: new handshakes get the new certificate, open connections keep theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import logging
import os
import shutil
import signal
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE

from webhook import certs, logs, runtime_tuning
from webhook.app import DEFAULT_MAX_BODY_BYTES, ServerState, create_app
from webhook.config import PlatformConfig, load_config
from webhook.engine import (
    Engine,
    PolicyException,
    PolicySet,
    default_policies_dir,
    load_exceptions,
    load_policy_set,
    policy_files,
)
from webhook.errors import ConfigError, PolicyError, TrainguardError
from webhook.metrics import Metrics

__all__ = ["ServerError", "ServerState", "Settings", "WebhookServer", "build", "serve"]

log = logging.getLogger("trainguard.server")

Runtimes = Mapping[tuple[str | None, str], dict[str, Any]]

KEEP_ALIVE_SECONDS = 120


class ServerError(TrainguardError):
    """The server cannot start: unusable TLS files, options that contradict each other."""


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything `trainguard serve` can set; `serve(settings)` is the whole server."""

    tls_cert: str
    tls_key: str
    host: str = "0.0.0.0"
    port: int = 8443
    policies: tuple[str, ...] = ()  # empty: the shipped policies
    exceptions: tuple[str, ...] = ()  # PolicyException files or directories
    config: str | None = None  # None: the embedded platform defaults
    cel: str | None = None  # CEL runtime; None picks cel-expr-python when installed
    kubeconfig: str | None = None
    in_cluster: bool = False
    ca_bundle: str | None = None
    self_register: bool = False
    webhook_service: str = "trainguard"
    webhook_namespace: str = "trainguard-system"
    webhook_url: str | None = None
    reload_interval: float = 2.0
    shutdown_delay: float = 5.0
    graceful_timeout: float = 10.0  # how long in-flight requests may take once draining starts
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    metrics_sample_every: int = 16
    log_level: str = "info"
    audit: bool = False  # keep policy reports of the cluster's workloads (leader-elected writer)
    report_format: str = "wgpolicy"  # wgpolicy | openreports | both

    @property
    def policy_paths(self) -> list[str | Path]:
        return list(self.policies) or [default_policies_dir()]

    @property
    def cluster(self) -> bool:
        return self.kubeconfig is not None or self.in_cluster


# -- what the reloader watches --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Files:
    """One poll's view of the watched files: a fingerprint per source (and the TLS bytes read)."""

    policies: str
    config: str
    tls: str
    ca: str
    tls_pem: tuple[bytes, bytes] | None = None  # (cert, key) as hashed, so the load matches the hash
    ca_pem: bytes | None = None
    exceptions: str = "none"


def _digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def _read(path: str | Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _policies_fingerprint(paths: list[str | Path]) -> str:
    try:
        files = policy_files(paths)
        return _digest([p for f in files for p in (str(f).encode(), _read(f))])
    except (PolicyError, OSError) as exc:
        # Unchanged while the problem persists, so a missing directory is reported once.
        return f"unreadable: {exc}"


def _file_fingerprint(path: str | None) -> tuple[str, bytes | None]:
    if path is None:
        return "none", None
    try:
        data = _read(path)
    except OSError as exc:
        return f"unreadable: {exc.strerror}", None
    return _digest([data]), data


def _snapshot(settings: Settings) -> _Files:
    config_fp, _ = _file_fingerprint(settings.config)
    cert_fp, cert = _file_fingerprint(settings.tls_cert)
    key_fp, key = _file_fingerprint(settings.tls_key)
    ca_fp, ca = _file_fingerprint(settings.ca_bundle)
    return _Files(
        policies=_policies_fingerprint(settings.policy_paths),
        exceptions=_policies_fingerprint(list(settings.exceptions)) if settings.exceptions else "none",
        config=config_fp,
        tls=f"{cert_fp}/{key_fp}",
        ca=ca_fp,
        tls_pem=(cert, key) if cert is not None and key is not None else None,
        ca_pem=ca,
    )


# -- reload ---------------------------------------------------------------------------------------


@dataclass(eq=False)
class Reloader:
    """Keeps the installed Engine in step with the policy files, the config and the cluster caches."""

    settings: Settings
    state: ServerState
    tls: ssl.SSLContext | None = None
    on_ca_change: Callable[[bytes], None] | None = None
    on_config_change: Callable[[], None] | None = None  # the rendered webhook configurations depend on it
    policies: PolicySet | None = None
    config: PlatformConfig | None = None
    priority_classes: Mapping[str, int] = field(default_factory=dict)
    runtimes: Runtimes = field(default_factory=dict)
    file_exceptions: Sequence[PolicyException] = ()  # from --exceptions
    cluster_exceptions: Sequence[PolicyException] = ()  # PolicyException objects in the cluster
    evictions: Mapping[str, Any] = field(default_factory=dict)  # cluster.evictions (webhook.recovery)
    _seen: _Files | None = None
    _tls_failures: int = 0

    def load_initial(self) -> None:
        """Load config and policies, install the first Engine; PolicyError/ConfigError propagate."""
        self._seen = _snapshot(self.settings)
        self.config = load_config(self.settings.config)
        start = time.perf_counter()
        self.policies = load_policy_set(self.settings.policy_paths, self.settings.cel)
        self._installed_policies(time.perf_counter() - start)
        self.file_exceptions = load_exceptions(self.settings.exceptions)
        self._rebuild()
        if self._seen.tls_pem is not None:
            self._expiry_from(self._seen.tls_pem[0])

    async def run(self) -> None:
        """Poll every `reload_interval` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.settings.reload_interval)
            try:
                await self.poll()
            except Exception:  # the loop must survive anything one poll does
                log.exception("reload poll failed")

    async def poll(self) -> None:
        """Look at every watched file once and reload what changed."""
        now = await asyncio.to_thread(_snapshot, self.settings)
        seen = self._seen or now
        changed_policies = now.policies != seen.policies
        changed_config = now.config != seen.config
        if changed_policies or changed_config:
            await self._reload_engine(changed_policies, changed_config)
        if now.exceptions != seen.exceptions:
            await self._reload_exceptions()
        if now.tls != seen.tls and not await self._reload_tls(now):
            now = _replace_tls(now, seen)  # retry at the next poll (the pair may be half written)
        if now.ca != seen.ca and now.ca_pem is not None and self.on_ca_change is not None:
            self.on_ca_change(now.ca_pem)
        self._seen = now

    def set_cluster(
        self,
        priority_classes: Mapping[str, int],
        runtimes: Runtimes,
        exceptions: Sequence[PolicyException] = (),
    ) -> None:
        """New cluster cache contents (called on the loop's thread): rebuild, cheaply."""
        self.priority_classes = priority_classes
        self.runtimes = runtimes
        self.cluster_exceptions = exceptions
        self._rebuild()
        self.state.metrics.observe_reload("cluster", True)

    def set_evictions(self, evictions: Mapping[str, Any]) -> None:
        """New eviction records (called on the loop's thread): the resume gate reads them."""
        self.evictions = evictions
        self._rebuild()

    async def _reload_engine(self, policies: bool, config: bool) -> None:
        policies_before, config_before = self.policies, self.config
        if config:
            try:
                self.config = await asyncio.to_thread(load_config, self.settings.config)
            except ConfigError as exc:
                self._failed("config", exc)
            else:
                self.state.metrics.observe_reload("config", True)
                log.info("config reloaded", extra={"source": self.config.source})
                if self.on_config_change is not None:
                    self.on_config_change()
        if policies:
            start = time.perf_counter()
            try:
                new = await asyncio.to_thread(load_policy_set, self.settings.policy_paths, self.settings.cel)
            except PolicyError as exc:
                self._failed("policies", exc)
            else:
                self.state.metrics.observe_reload("policies", True)
                if self.policies is not None and new.digest == self.policies.digest:
                    log.info("policy files changed, policy set unchanged", extra={"digest": new.digest})
                else:
                    self.policies = new
                    self._installed_policies(time.perf_counter() - start)
        if self.policies is not policies_before or self.config is not config_before:
            self._rebuild()

    async def _reload_exceptions(self) -> None:
        try:
            exceptions = await asyncio.to_thread(load_exceptions, self.settings.exceptions)
        except PolicyError as exc:
            self._failed("exceptions", exc)  # the last good exceptions stay in force
            return
        self.file_exceptions = exceptions
        self.state.metrics.observe_reload("exceptions", True)
        log.info("exceptions reloaded", extra={"exceptions": [e.id for e in exceptions]})
        self._rebuild()

    def _rebuild(self) -> None:
        assert self.policies is not None and self.config is not None
        self.state.install(
            Engine(
                self.policies,
                self.config,
                priority_classes=self.priority_classes,
                runtimes=self.runtimes,
                exceptions=(*self.file_exceptions, *self.cluster_exceptions),
                cluster={"evictions": self.evictions},
            )
        )

    def _installed_policies(self, seconds: float) -> None:
        assert self.policies is not None
        self.state.metrics.observe_policy_set(self.policies.names(), seconds)
        log.info(
            "policy set loaded",
            extra={
                "digest": self.policies.digest,
                "policies": self.policies.names(),
                "load_ms": round(seconds * 1000, 1),
            },
        )

    def _failed(self, source: str, exc: Exception) -> None:
        self.state.metrics.observe_reload(source, False)
        log.error(
            f"{source} reload failed; the last good {source} keep deciding", extra={"problem": str(exc)}
        )

    async def _reload_tls(self, files: _Files) -> bool:
        """True when the new pair is serving, or when there is nothing to retry."""
        if self.tls is None:
            return True
        problem = "unreadable" if files.tls_pem is None else None
        scratch: Path | None = None
        if files.tls_pem is not None:
            try:
                scratch = await asyncio.to_thread(_checked_pair, *files.tls_pem)
            except (ssl.SSLError, OSError, ValueError) as exc:
                problem = str(exc) or type(exc).__name__
        if scratch is None:
            # A rotation writes two files: a pair that does not match may be half written. Count it
            # as a failure only when the same bad pair is still there at the next poll.
            self._tls_failures += 1
            if self._tls_failures < 2:
                return False
            self._tls_failures = 0
            self.state.metrics.observe_reload("certificate", False)
            log.error(
                "certificate reload failed; the current certificate keeps serving", extra={"problem": problem}
            )
            return True
        try:
            # On the loop's thread: no handshake can run while the context changes.
            self.tls.load_cert_chain(scratch / "tls.crt", scratch / "tls.key")
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        self._tls_failures = 0
        assert files.tls_pem is not None
        self._expiry_from(files.tls_pem[0])
        self.state.metrics.observe_reload("certificate", True)
        log.info(
            "serving certificate reloaded", extra={"not_after": str(certs.cert_expiry(files.tls_pem[0]))}
        )
        return True

    def _expiry_from(self, cert_pem: bytes) -> None:
        try:
            self.state.metrics.set_certificate_not_after(certs.cert_expiry(cert_pem).timestamp())
        except certs.CertificateError:
            self.state.metrics.set_certificate_not_after(None)


def _replace_tls(now: _Files, seen: _Files) -> _Files:
    return dataclasses.replace(now, tls=seen.tls, tls_pem=seen.tls_pem)


def _checked_pair(cert_pem: bytes, key_pem: bytes) -> Path:
    """A private directory holding the pair, after loading it into a scratch context.

    A failed load_cert_chain() can leave a context with a certificate and no matching key; the
    serving context is only touched once the pair is known to load.
    """
    scratch = Path(tempfile.mkdtemp(prefix="trainguard-tls-"))  # mode 0700
    try:
        (scratch / "tls.crt").write_bytes(cert_pem)
        fd = os.open(scratch / "tls.key", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key_pem)
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(scratch / "tls.crt", scratch / "tls.key")
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return scratch


# -- the server -----------------------------------------------------------------------------------


class WebhookServer(uvicorn.Server):
    """uvicorn's Server with a two-step stop and the reload task.

    SIGTERM (or `request_shutdown()`): /readyz fails at once, admissions are still answered (with
    `Connection: close`) for `shutdown_delay` seconds while endpoints and API servers catch up, then
    uvicorn stops accepting and drains in-flight requests. A second signal skips the wait.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        state: ServerState,
        reloader: Reloader,
        shutdown_delay: float,
        on_started: Callable[[asyncio.AbstractEventLoop], None] | None = None,
        on_stopping: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(config)
        self.state = state
        self.reloader = reloader
        self.shutdown_delay = shutdown_delay
        self._on_started = on_started
        self._on_stopping = on_stopping
        self._shutdown_requested = False
        self._drain_at: float | None = None
        self._reload_task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        return int(self.servers[0].sockets[0].getsockname()[1])

    def request_shutdown(self) -> None:
        """What SIGTERM does; safe from any thread and from a signal handler (sets flags only)."""
        if self._shutdown_requested or self.shutdown_delay <= 0:
            self.should_exit = True
        self._shutdown_requested = True

    def handle_exit(self, sig: int, frame: Any) -> None:
        if sig == signal.SIGINT and self.should_exit:
            self.force_exit = True
        self.request_shutdown()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # uvicorn re-raises a captured signal once it has stopped, which turns a clean drain into
        # "killed by SIGTERM" (exit 143). The drain is our answer to the signal: exit normally.
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        original = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._reload_task = asyncio.create_task(self.reloader.run(), name="trainguard-reload")
            if self._on_started is not None:
                self._on_started(asyncio.get_running_loop())

    async def on_tick(self, counter: int) -> bool:
        if self._shutdown_requested and self._drain_at is None:
            self.state.begin_shutdown()
            self._drain_at = time.monotonic() + self.shutdown_delay
            log.info("shutdown requested: not ready, still serving", extra={"delay_s": self.shutdown_delay})
        if self._drain_at is not None and not self.should_exit and time.monotonic() >= self._drain_at:
            self.should_exit = True
        return await super().on_tick(counter)

    async def shutdown(self, sockets: Any = None) -> None:
        self.state.begin_shutdown()
        log.info("draining in-flight requests", extra={"timeout_s": self.config.timeout_graceful_shutdown})
        if self._reload_task is not None:
            self._reload_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reload_task
        if self._on_stopping is not None:
            self._on_stopping()
        await super().shutdown(sockets=sockets)
        log.info("stopped")


def build(settings: Settings, *, state: ServerState | None = None) -> WebhookServer:
    """Everything but the event loop: loads policies (PolicyError/ConfigError), TLS (ServerError)."""
    _check(settings)
    state = state or ServerState(
        metrics=Metrics(sample_every=settings.metrics_sample_every), max_body_bytes=settings.max_body_bytes
    )
    reloader = Reloader(settings, state)
    # Credentials first: a bad kubeconfig should not wait for the policies to compile.
    cluster_hooks = _cluster_hooks(settings, reloader) if settings.cluster else None
    reloader.load_initial()
    config = uvicorn.Config(
        create_app(state),
        host=settings.host,
        port=settings.port,
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
        http="httptools",
        loop="uvloop",
        lifespan="on",
        timeout_graceful_shutdown=max(1, round(settings.graceful_timeout)),
        # Longer than the API server's idle-connection timeout (90 s): the client, not us, closes
        # an idle connection, so it never sends a request on one we are closing.
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        log_config=None,  # logs.configure() owns logging
        access_log=False,  # one JSON line per admission is ours (logs.py)
        proxy_headers=False,  # nothing sits between the API server and us
        server_header=False,
    )
    try:
        config.load()
    except (OSError, ssl.SSLError) as exc:
        raise ServerError(
            f"cannot use --tls-cert {settings.tls_cert} / --tls-key {settings.tls_key}: {exc}"
        ) from exc
    assert config.ssl is not None
    config.ssl.minimum_version = ssl.TLSVersion.TLSv1_2
    reloader.tls = config.ssl
    return WebhookServer(
        config,
        state=state,
        reloader=reloader,
        shutdown_delay=settings.shutdown_delay,
        on_started=cluster_hooks[0] if cluster_hooks else None,
        on_stopping=cluster_hooks[1] if cluster_hooks else None,
    )


def serve(settings: Settings) -> int:
    """Run the webhook until SIGTERM/SIGINT and a graceful drain; 0 on a clean stop."""
    logs.configure(settings.log_level)
    server = build(settings)
    runtime_tuning.tune_for_latency()  # after everything is loaded, before the first request
    try:
        server.run()
    except SystemExit as exc:  # uvicorn exits when it cannot listen (it has logged why)
        if exc.code == STARTUP_FAILURE:
            raise ServerError(
                f"cannot listen on {settings.host}:{settings.port} (see the log above)"
            ) from None
        raise
    return 0


def _check(settings: Settings) -> None:
    for option, path in (("--tls-cert", settings.tls_cert), ("--tls-key", settings.tls_key)):
        if not path or not Path(path).is_file():
            raise ServerError(f"{option} {path or '(missing)'}: no such file; the webhook serves TLS only")
    if settings.ca_bundle is not None and not Path(settings.ca_bundle).is_file():
        raise ServerError(f"--ca-bundle {settings.ca_bundle}: no such file")
    if settings.self_register and not settings.cluster:
        raise ServerError("--self-register needs cluster access (--kubeconfig or --in-cluster)")
    if settings.audit and not settings.cluster:
        raise ServerError("--audit needs cluster access (--kubeconfig or --in-cluster)")
    if settings.self_register and settings.ca_bundle is None:
        raise ServerError("--self-register needs --ca-bundle (the CA the API server must trust)")
    if settings.reload_interval <= 0:
        raise ServerError(f"--reload-interval must be positive, got {settings.reload_interval}")
    if settings.shutdown_delay < 0:
        raise ServerError(f"--shutdown-delay must not be negative, got {settings.shutdown_delay}")
    if settings.max_body_bytes < 1:
        raise ServerError(f"--max-body-bytes must be positive, got {settings.max_body_bytes}")


def _governs_recovery(config: PlatformConfig | None) -> bool:
    """The resume controller runs only where the config governs a tier (deploy/rbac-resume.yaml)."""
    return config is not None and any(config.recovery(t) for t in ("guaranteed", "preemptible"))


def _cluster_hooks(
    settings: Settings, reloader: Reloader
) -> tuple[Callable[[asyncio.AbstractEventLoop], None], Callable[[], None]]:
    """Start/stop callbacks for the cluster caches and self-registration (threads, not the loop)."""
    from webhook import cluster  # the kubernetes client is imported only with cluster access

    api = cluster.api_client(kubeconfig=settings.kubeconfig, in_cluster=settings.in_cluster)
    running: list[Any] = []

    def started(loop: asyncio.AbstractEventLoop) -> None:
        def changed(
            priority_classes: Mapping[str, int], runtimes: Runtimes, exceptions: Sequence[PolicyException]
        ) -> None:
            loop.call_soon_threadsafe(reloader.set_cluster, priority_classes, runtimes, exceptions)

        caches = cluster.ClusterCaches(api, on_change=changed)
        caches.start()
        running.append(caches)
        from webhook.recovery.controller import RecoveryService

        def evicted(records: Mapping[str, Any]) -> None:
            loop.call_soon_threadsafe(reloader.set_evictions, records)

        recovery = RecoveryService(
            api,
            config=lambda: reloader.config,
            lease_namespace=settings.webhook_namespace,
            on_evictions=evicted,
        )
        recovery.start()
        running.append(recovery)
        if settings.self_register:
            assert settings.ca_bundle is not None
            registrar = cluster.Registrar(
                api,
                service=settings.webhook_service,
                namespace=settings.webhook_namespace,
                url=settings.webhook_url,
                platform=lambda: reloader.config,
                metrics=reloader.state.metrics,
            )
            registrar.start(_read(settings.ca_bundle))
            reloader.on_ca_change = registrar.update
            reloader.on_config_change = registrar.refresh
            running.append(registrar)
        if settings.audit:
            from webhook.audit.cluster_serve import AuditService

            audit = AuditService(
                api,
                engine=lambda: reloader.state.engine,
                lease_namespace=settings.webhook_namespace,
                report_format=settings.report_format,
                metrics=reloader.state.metrics,
            )
            audit.start()
            running.append(audit)

    def stopping() -> None:
        for component in running:
            component.stop()

    return started, stopping

"""The webhook server: uvicorn's Config + Server, built once from Settings, with a two-step stop.

    build(settings)        policies + config loaded (a broken or empty set here is fatal: there
                           is no last good one), uvicorn.Config(...).load() with the limited
                           HTTP protocol (http_protocol.py), TLS hardened (tls.py)
      --metrics-port       /metrics on a second socket, bound in build() before any fork: every
                           worker accepts on it and answers with every worker's numbers
    WebhookServer.serve    startup -> reload task (+ cluster hooks) -> main loop
                           -> SIGTERM: not ready at once, keep serving `shutdown_delay` s, then drain

Whether it runs in this process or in forked workers is main.py's choice (workers.py forks).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import socket
import ssl
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import uvicorn
import uvloop
from uvicorn.config import STARTUP_FAILURE

from webhook import certs
from webhook.serve import client_auth, stopsignal, tls
from webhook.serve.app import ServerState, create_app, create_metrics_app
from webhook.serve.cluster_hooks import cluster_hooks
from webhook.serve.http_protocol import HttpLimits, limited_protocol
from webhook.serve.reload import Reloader
from webhook.serve.settings import ServerError, Settings
from webhook.serve.sockets import bind

__all__ = ["WebhookServer", "build"]

log = logging.getLogger("trainguard.server")

KEEP_ALIVE_SECONDS = 120
# Seconds a retiring worker keeps answering on its open connections (each answer asking the client
# to reconnect, to the worker that replaces it) before it closes the idle ones and drains.
RETIRE_GRACE_SECONDS = 2.0


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
        on_started: Callable[[asyncio.AbstractEventLoop, bool], None] | None = None,
        on_stopping: Callable[[], None] | None = None,
        metrics_listener: tuple[uvicorn.Config, socket.socket] | None = None,
    ) -> None:
        super().__init__(config)
        # --metrics-port: its app (only /metrics) and its socket, bound before any fork so that
        # every worker accepts on it; any worker's answer sums every worker's metric files.
        self.metrics_listener = metrics_listener
        self.state = state
        self.reloader = reloader
        self.shutdown_delay = shutdown_delay
        self._on_started = on_started
        self._on_stopping = on_stopping
        self._shutdown_requested = False
        self._drain_at: float | None = None
        self._reload_task: asyncio.Task[None] | None = None
        self.worker = 0  # which worker process this is (set after the fork)
        # Recycling (workers.py): after `recycle_after` admissions (0: never) the worker asks its
        # supervisor, through `tell`, for a replacement; told to retire once that one is ready, it
        # stops accepting, answers what comes on its open connections with `Connection: close`
        # for `retire_grace` seconds, then drains and exits, without ever turning not-ready.
        self.recycle_after = 0
        self.retire_grace = RETIRE_GRACE_SECONDS
        self.tell: Callable[[bytes], None] | None = None
        self._recycle_asked = False
        self._retire_requested = False
        self._retiring = False

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        return int(self.servers[0].sockets[0].getsockname()[1])

    @property
    def metrics_port(self) -> int | None:
        """The port /metrics is served on when it has a listener of its own (None otherwise)."""
        return None if self.metrics_listener is None else int(self.metrics_listener[1].getsockname()[1])

    def run_here(self) -> int:
        """Serve in this process until stopped: 0 on a clean stop, ServerError when it cannot listen."""
        try:
            self.run()
        except SystemExit as exc:  # uvicorn exits when it cannot listen (it has logged why)
            if exc.code == STARTUP_FAILURE:
                raise ServerError(
                    f"cannot listen on {self.config.host}:{self.config.port} (see the log above)"
                ) from None
            raise
        return 0

    def request_shutdown(self) -> None:
        """What SIGTERM does; safe from any thread and from a signal handler (sets flags only)."""
        if self._shutdown_requested or self.shutdown_delay <= 0:
            self.should_exit = True
        self._shutdown_requested = True

    def retire(self) -> None:
        """What the supervisor's retire signal does; safe from a signal handler (sets a flag only)."""
        self._retire_requested = True

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
        for sig in stopsignal.take():  # came while the server was being built or forked
            self.handle_exit(sig, None)
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and self.metrics_listener is not None:
            await self._serve_metrics(*self.metrics_listener)
        if self.started:
            self._reload_task = asyncio.create_task(self.reloader.run(), name="trainguard-reload")
            if self._on_started is not None:
                self._on_started(asyncio.get_running_loop(), self.worker == 0)  # one registers
            if self.tell is not None:
                self.tell(b"R")  # accepting: a worker this one replaces may retire now

    async def _serve_metrics(self, config: uvicorn.Config, sock: socket.socket) -> None:
        # uvicorn serves one app; the metrics listener is one more asyncio server in its list, with
        # connections in the same server state, so that uvicorn's drain, a retiring worker's close
        # and the connection limit treat it as they treat the admission port.
        loop = asyncio.get_running_loop()

        def protocol() -> asyncio.Protocol:
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=self.server_state, app_state=self.lifespan.state, _loop=loop
            )

        self.servers.append(
            await loop.create_server(protocol, sock=sock, ssl=config.ssl, backlog=config.backlog)
        )

    async def on_tick(self, counter: int) -> bool:
        if (
            self.tell is not None
            and self.recycle_after
            and not self._recycle_asked
            and self.state.admissions >= self.recycle_after
        ):
            self._recycle_asked = True
            log.info("asking for a replacement", extra={"admissions": self.state.admissions})
            self.tell(b"O")
        if self._retire_requested and not self._retiring and self._drain_at is None:
            self._retiring = True
            self.state.closing_connections = True
            for listener in self.servers:
                listener.close()  # the replacement accepts on the same socket from now on
            self._drain_at = time.monotonic() + self.retire_grace
            log.info(
                "retiring: not accepting, still serving open connections", extra={"s": self.retire_grace}
            )
        # A retiring worker asked to stop as well keeps to its own drain, which is already shorter.
        if self._shutdown_requested and self._drain_at is None:
            self.state.begin_shutdown()
            self._drain_at = time.monotonic() + self.shutdown_delay
            log.info("shutdown requested: not ready, still serving", extra={"delay_s": self.shutdown_delay})
        if self._drain_at is not None and not self.should_exit and time.monotonic() >= self._drain_at:
            self.should_exit = True
        return await super().on_tick(counter)

    async def shutdown(self, sockets: Any = None) -> None:
        if not self._retiring:  # a retiring worker's successor is serving: the pod stays ready
            self.state.begin_shutdown()
        log.info("draining in-flight requests", extra={"timeout_s": self.config.timeout_graceful_shutdown})
        if self._reload_task is not None:
            self._reload_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reload_task
        if self._on_stopping is not None:
            self._on_stopping()
        await super().shutdown(sockets=sockets)
        # A decision still running after the drain is nobody's answer any more; its thread is a
        # daemon, so it does not keep the process past the grace period.
        running = self.state.threads.running
        self.state.threads.shutdown()
        log.info("stopped", extra={"abandoned_decisions": running} if running else None)


class _HandshakeLimitedLoop(uvloop.Loop):
    """uvloop with a TLS handshake timeout: uvicorn passes none, and uvloop's default is 60 s, during
    which a client that connects and never says hello holds a connection before any HTTP limit applies."""

    handshake_timeout: float = 10.0

    async def create_server(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("ssl") is not None:
            kwargs.setdefault("ssl_handshake_timeout", self.handshake_timeout)
        return await super().create_server(*args, **kwargs)


def _new_loop(handshake_timeout: float) -> asyncio.AbstractEventLoop:
    loop = _HandshakeLimitedLoop()
    loop.handshake_timeout = handshake_timeout
    return loop


def build(settings: Settings, *, state: ServerState | None = None) -> WebhookServer:
    """Everything but the event loop: loads policies (PolicyError/ConfigError), TLS (ServerError)."""
    _check(settings)
    state = state or ServerState.from_settings(settings)
    reloader = Reloader(settings, state)
    # Credentials first: a bad kubeconfig should not wait for the policies to compile.
    hooks = cluster_hooks(settings, reloader) if settings.cluster else None
    reloader.load_initial()
    limits = HttpLimits.from_settings(settings)
    app = create_app(state, with_metrics=settings.metrics_port is None)
    protocol = limited_protocol(limits)
    if settings.client_ca is not None:
        app = client_auth.requiring_client_certificate(app)
        protocol = client_auth.peer_recording_protocol(protocol)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        ssl_certfile=settings.tls_cert,
        ssl_keyfile=settings.tls_key,
        http=protocol,
        # A loop factory where uvicorn takes a name ("uvloop"): the same loop, with a handshake limit.
        loop=functools.partial(_new_loop, settings.header_timeout),  # type: ignore[arg-type]
        lifespan="on",
        timeout_graceful_shutdown=max(1, round(settings.graceful_timeout)),
        # Longer than the API server's idle-connection timeout (90 s): the client, not us, closes
        # an idle connection, so it never sends a request on one we are closing.
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        # Open connections per worker (idle keep-alive ones included): uvicorn answers 503 past it.
        limit_concurrency=settings.max_connections,
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
    tls.harden(config.ssl)
    if settings.client_ca is not None:
        _trust_clients(config.ssl, settings.client_ca)
    reloader.tls = config.ssl
    metrics_listener = _metrics_listener(settings, state, config, limited_protocol(limits))
    return WebhookServer(
        config,
        state=state,
        reloader=reloader,
        shutdown_delay=settings.shutdown_delay,
        on_started=hooks[0] if hooks else None,
        on_stopping=hooks[1] if hooks else None,
        metrics_listener=metrics_listener,
    )


def _metrics_listener(
    settings: Settings, state: ServerState, admission: uvicorn.Config, protocol: type[asyncio.Protocol]
) -> tuple[uvicorn.Config, socket.socket] | None:
    if settings.metrics_port is None:
        return None
    config = uvicorn.Config(
        create_metrics_app(state),
        http=protocol,  # the same HTTP limits, without client_auth's: a scraper needs no certificate
        lifespan="off",
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        limit_concurrency=settings.max_connections,
        log_config=None,
        access_log=False,
        proxy_headers=False,
        server_header=False,
    )
    config.load()
    # TLS with the serving certificate, as on the admission port: Prometheus scrapes HTTPS targets
    # with `scheme: https` and a CA file, and metrics stay private on the wire. The same context
    # object, so a rotated certificate (reloaded into it) is served here too. With --client-ca it
    # asks for a client certificate only optionally (tls.trust_clients): a scraper needs none.
    config.ssl = admission.ssl
    try:
        sock = bind(settings.host, settings.metrics_port, config.backlog)
    except ServerError as exc:
        raise ServerError(f"--metrics-port {settings.metrics_port}: {exc}") from None
    return config, sock


def _trust_clients(ctx: ssl.SSLContext, path: str) -> None:
    try:
        pem = Path(path).read_bytes()
        certs.ca_bundle(pem)  # a CA certificate, not a leaf or a key
        tls.trust_clients(ctx, pem)
    except (OSError, ssl.SSLError, certs.CertificateError) as exc:
        raise ServerError(f"cannot use --client-ca {path}: {exc}") from exc


def _check(settings: Settings) -> None:
    for option, path in (("--tls-cert", settings.tls_cert), ("--tls-key", settings.tls_key)):
        if not path or not Path(path).is_file():
            raise ServerError(f"{option} {path or '(missing)'}: no such file; the webhook serves TLS only")
    if settings.client_ca is not None and not Path(settings.client_ca).is_file():
        raise ServerError(f"--client-ca {settings.client_ca}: no such file")
    if settings.ca_bundle is not None and not Path(settings.ca_bundle).is_file():
        raise ServerError(f"--ca-bundle {settings.ca_bundle}: no such file")
    if settings.self_register and not settings.cluster:
        raise ServerError("--self-register needs cluster access (--kubeconfig or --in-cluster)")
    if settings.audit and not settings.cluster:
        raise ServerError("--audit needs cluster access (--kubeconfig or --in-cluster)")
    if settings.self_register and settings.ca_bundle is None:
        raise ServerError("--self-register needs --ca-bundle (the CA the API server must trust)")
    if settings.inject_ca_bundle and (settings.ca_bundle is None or not settings.cluster):
        raise ServerError(
            "--inject-ca-bundle needs --ca-bundle and cluster access (--kubeconfig or --in-cluster)"
        )
    if settings.reload_interval <= 0:
        raise ServerError(f"--reload-interval must be positive, got {settings.reload_interval}")
    if settings.shutdown_delay < 0:
        raise ServerError(f"--shutdown-delay must not be negative, got {settings.shutdown_delay}")
    if not 0 <= settings.inline_slice < settings.request_budget:
        raise ServerError(
            f"--inline-slice must be at least 0 and below --request-budget "
            f"({settings.request_budget}), got {settings.inline_slice}"
        )
    if settings.metrics_port is not None and settings.metrics_port == settings.port != 0:
        raise ServerError(
            f"--metrics-port {settings.metrics_port} is the admission port: give /metrics a port of its own"
        )
    if settings.recycle_after < 0:
        raise ServerError(f"--recycle-after must not be negative, got {settings.recycle_after}")
    if settings.max_body_bytes < 1:
        raise ServerError(f"--max-body-bytes must be positive, got {settings.max_body_bytes}")
    for option, value in (
        ("--workers", 1 if settings.workers is None else settings.workers),
        ("--max-in-flight", settings.max_in_flight),
        ("--decision-threads", settings.decision_threads),
        ("--max-headers", settings.max_headers),
        ("--max-header-bytes", settings.max_header_bytes),
        ("--max-connections", settings.max_connections),
    ):
        if value < 1:
            raise ServerError(f"{option} must be at least 1, got {value}")
    for option, seconds in (
        ("--header-timeout", settings.header_timeout),
        ("--body-timeout", settings.body_timeout),
        ("--request-budget", settings.request_budget),
    ):
        if not seconds > 0:
            raise ServerError(f"{option} must be positive, got {seconds}")

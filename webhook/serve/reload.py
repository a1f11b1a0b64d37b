"""Live reload: policies, config, PolicyExceptions and the serving certificate, keeping the last good set.

Polling content hashes (a ConfigMap update swaps a `..data` symlink; hashing the files sees it).
A changed policy set or config is loaded and compiled off the event loop and installed by one
assignment; a broken one (including an empty policy set: never "allow everything") is logged
with its location, counted, and the last good engine keeps deciding, with /readyz unchanged.
Changed certificate files are checked as a pair on a scratch context, then loaded into the
serving context: new handshakes get the new certificate, open connections keep theirs.

Each worker process runs its own Reloader over the same files, so all of them converge.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import shutil
import ssl
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook import certs
from webhook.config import PlatformConfig, load_config
from webhook.engine import (
    ClusterFacts,
    PolicyException,
    PolicySet,
    build_engine,
    load_exceptions,
    load_policy_set,
    policy_files,
)
from webhook.errors import ConfigError, PolicyError
from webhook.serve import tls
from webhook.serve.app import ServerState
from webhook.serve.settings import Settings

__all__ = ["Reloader", "Runtimes", "read_file"]

log = logging.getLogger("trainguard.server")

Runtimes = Mapping[tuple[str | None, str], dict[str, Any]]


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
    client_ca: str = "none"
    client_ca_pem: bytes | None = None


def _digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


def read_file(path: str | Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _policies_fingerprint(paths: list[str | Path]) -> str:
    try:
        files = policy_files(paths)
        return _digest([p for f in files for p in (str(f).encode(), read_file(f))])
    except (PolicyError, OSError) as exc:
        # Unchanged while the problem persists, so a missing directory is reported once.
        return f"unreadable: {exc}"


def _file_fingerprint(path: str | None) -> tuple[str, bytes | None]:
    if path is None:
        return "none", None
    try:
        data = read_file(path)
    except OSError as exc:
        return f"unreadable: {exc.strerror}", None
    return _digest([data]), data


def _snapshot(settings: Settings) -> _Files:
    config_fp, _ = _file_fingerprint(settings.config)
    cert_fp, cert = _file_fingerprint(settings.tls_cert)
    key_fp, key = _file_fingerprint(settings.tls_key)
    ca_fp, ca = _file_fingerprint(settings.ca_bundle)
    client_ca_fp, client_ca = _file_fingerprint(settings.client_ca)
    return _Files(
        policies=_policies_fingerprint(settings.policy_paths),
        exceptions=_policies_fingerprint(list(settings.exceptions)) if settings.exceptions else "none",
        config=config_fp,
        tls=f"{cert_fp}/{key_fp}",
        ca=ca_fp,
        tls_pem=(cert, key) if cert is not None and key is not None else None,
        ca_pem=ca,
        client_ca=client_ca_fp,
        client_ca_pem=client_ca,
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
        if now.client_ca != seen.client_ca and now.client_ca_pem is not None:
            self._reload_client_ca(now.client_ca_pem)
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
        facts = ClusterFacts(
            priority_classes=self.priority_classes,
            runtimes=self.runtimes,
            exceptions=(*self.file_exceptions, *self.cluster_exceptions),
            evictions=self.evictions,
        )
        adaptations = self.state.adaptations  # shared by every engine: their keys hold the facts
        self.state.install(build_engine(self.policies, self.config, facts, adaptations=adaptations))

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
                scratch = await asyncio.to_thread(tls.checked_pair, *files.tls_pem)
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

    def _reload_client_ca(self, pem: bytes) -> None:
        """A rotated client CA: trusted for new handshakes at once (on the loop's thread)."""
        if self.tls is None:
            return
        try:
            certs.ca_bundle(pem)
            tls.trust_clients(self.tls, pem)
        except (ssl.SSLError, certs.CertificateError) as exc:
            self.state.metrics.observe_reload("client-ca", False)
            log.error(
                "client CA reload failed; the CAs loaded so far stay trusted", extra={"problem": str(exc)}
            )
            return
        self.state.metrics.observe_reload("client-ca", True)
        # The trust store only grows: a CA dropped from the file is still accepted until a restart.
        log.info("client CA reloaded; a CA removed from the file stays trusted until a restart")

    def _expiry_from(self, cert_pem: bytes) -> None:
        try:
            self.state.metrics.set_certificate_not_after(certs.cert_expiry(cert_pem).timestamp())
        except certs.CertificateError:
            self.state.metrics.set_certificate_not_after(None)


def _replace_tls(now: _Files, seen: _Files) -> _Files:
    return dataclasses.replace(now, tls=seen.tls, tls_pem=seen.tls_pem)

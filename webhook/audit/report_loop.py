"""The loop behind `serve --audit`: keep policy reports in step with the workloads and the policies.

    objects()   what the watches hold now (webhook.audit.cluster.WorkloadCaches)
    engine()    the Engine the webhook decides with now (a new one after any policy, config,
                exception or cluster-cache change)
    store       apply / delete / existing report objects (webhook.audit.cluster.ReportStore)

One background thread. A pass runs when a watch event wakes it, when the engine is a new one
(checked every `poll_seconds`), and `retry_seconds` after a failed write; at most one pass every
`min_interval` seconds:

  * a new engine -> every object is decided again (the full re-scan); otherwise only objects whose
    uid or resourceVersion changed; objects that disappeared drop out;
  * an object whose results did not change keeps its old audit (and timestamp), so nothing is
    written for it;
  * the reports of each namespace whose audits changed are rebuilt; a shard is applied only when
    its content differs from what this leader last wrote, and shards no longer needed are deleted;
  * writes are paced to `writes_per_second`; a failed write leaves the namespace dirty for the next
    pass.

Only the leader writes: `start_leading()` / `stop_leading()` are the elector's callbacks. A new
leader lists the reports trainguard wrote before (any replica's) so stale ones get deleted.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

import orjson

from webhook.audit.decide import Auditor, ObjectAudit
from webhook.audit.report_objects import APIS, DEFAULT_MAX_BYTES, Format, ReportApi, build_reports
from webhook.engine import Engine

log = logging.getLogger("trainguard.audit")

Key = tuple[str | None, str]  # (namespace, name) of a report


class Store(Protocol):
    def apply(self, api: ReportApi, report: dict[str, Any]) -> None: ...

    def delete(self, api: ReportApi, namespace: str | None, name: str) -> None: ...

    def existing(self, api: ReportApi) -> set[Key]: ...


class AuditMetrics(Protocol):
    def observe_audit_scan(self, seconds: float, objects: int, full: bool) -> None: ...

    def set_audit_results(self, counts: Mapping[tuple[str, str], int]) -> None: ...

    def observe_report_write(self, operation: str, ok: bool) -> None: ...


class Reporter:
    def __init__(
        self,
        *,
        objects: Callable[[], Iterable[Mapping[str, Any]]],
        engine: Callable[[], Engine | None],
        store: Store,
        formats: tuple[Format, ...] = ("wgpolicy",),
        metrics: AuditMetrics | None = None,
        ready: Callable[[], bool] = lambda: True,
        max_bytes: int = DEFAULT_MAX_BYTES,
        min_interval: float = 1.0,
        poll_seconds: float = 1.0,
        settle_seconds: float = 2.0,
        retry_seconds: float = 10.0,
        writes_per_second: float = 10.0,
    ) -> None:
        self.objects = objects
        self.engine = engine
        self.store = store
        self.formats = formats
        self.metrics = metrics
        self.ready = ready
        self.max_bytes = max_bytes
        self.min_interval = min_interval
        self.poll_seconds = poll_seconds  # how soon a new engine (policies, config, exceptions) is seen
        self.retry_seconds = retry_seconds
        self.settle_seconds = settle_seconds
        self.write_gap = 1.0 / writes_per_second if writes_per_second > 0 else 0.0
        self.leading = False
        self.passes = 0  # completed passes while leading (tests and the benchmark wait on it)
        self.complete = threading.Event()  # set after the first pass that wrote every report
        self._auditor: Auditor | None = None
        self._audits: dict[str, ObjectAudit] = {}  # uid -> audit
        self._versions: dict[str, str] = {}  # uid -> resourceVersion decided
        self._written: dict[tuple[Format, Key], bytes] = {}  # what this leader wrote: digest per report
        self._stale: set[tuple[Format, Key]] = set()  # reports found at takeover, not yet re-written
        self._takeover = False
        self._dirty_namespaces: set[str | None] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._last_write = 0.0
        self._thread = threading.Thread(target=self._run, name="trainguard-audit", daemon=True)

    # -- control (any thread) -------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def wake(self) -> None:
        """Something changed (a watch event, a new engine): run a pass soon."""
        self._wake.set()

    def start_leading(self) -> None:
        # The reset itself happens on the reporter's thread, at the start of its next pass.
        self._takeover = True
        self.leading = True
        log.info("audit: leading, writing policy reports")
        self._wake.set()

    def stop_leading(self) -> None:
        self.leading = False
        self.complete.clear()
        log.info("audit: no longer leading, not writing")

    # -- the loop -------------------------------------------------------------------------------

    def _run(self) -> None:
        last = -self.min_interval
        retry_at = 0.0
        failed = False
        seen_engine: Engine | None = None
        engine_since = 0.0
        while not self._stop.is_set():
            woke = self._wake.wait(self.poll_seconds)
            if self._stop.is_set():
                return
            if not self.leading or not self.ready():
                continue
            now = time.monotonic()
            engine = self.engine()
            if engine is not seen_engine:
                seen_engine, engine_since = engine, now
            # A new engine means a full re-scan; at start-up the cluster caches rebuild it several
            # times within a second or two, so wait until it has settled (any pass would use it).
            new_engine = engine is not None and (self._auditor is None or self._auditor.engine is not engine)
            unsettled = self.settle_seconds - (now - engine_since)
            if new_engine and unsettled > 0:
                if self._stop.wait(unsettled):
                    return
                continue
            retry = (failed or bool(self._dirty_namespaces)) and now >= retry_at
            if not (woke or new_engine or retry):
                continue
            # Let a burst of events (a kubectl apply of many objects) land before the pass.
            wait = self.min_interval - (now - last)
            if wait > 0 and self._stop.wait(wait):
                return
            self._wake.clear()
            last = time.monotonic()
            failed = False
            try:
                self.run_once()
            except Exception:  # the loop must survive anything one pass does
                log.exception("audit pass failed; retrying")
                failed = True
            if failed or self._dirty_namespaces:
                retry_at = time.monotonic() + self.retry_seconds

    def run_once(self) -> None:
        """One pass: decide what changed, write the reports that differ."""
        engine = self.engine()
        if engine is None:
            return
        if self._takeover:
            self._take_over()
        start = time.perf_counter()
        full = self._auditor is None or self._auditor.engine is not engine
        if full:
            self._auditor = Auditor(engine)
        auditor = self._auditor
        assert auditor is not None
        seen, decided = self._decide_changed(auditor, full)
        self._forget_gone(seen)
        if full:
            self._dirty_namespaces |= {a.ref.namespace for a in self._audits.values()}
            self._dirty_namespaces |= {key[0] for _fmt, key in self._stale}
        seconds = time.perf_counter() - start
        if self.metrics is not None:
            self.metrics.observe_audit_scan(seconds, decided, full)
            self.metrics.set_audit_results(self._counts())
        dirty = len(self._dirty_namespaces)
        self._write_dirty()
        log.log(
            logging.INFO if full else logging.DEBUG,
            "audit pass",
            extra={
                "full": full,
                "decided": decided,
                "workloads": len(self._audits),
                "decide_s": round(seconds, 2),
                "namespaces_written": dirty - len(self._dirty_namespaces),
                "write_s": round(time.perf_counter() - start - seconds, 2),
            },
        )
        self.passes += 1
        if not self._dirty_namespaces:
            self.complete.set()

    def _take_over(self) -> None:
        # What another leader (or this one, earlier) wrote is unknown: decide everything again,
        # and list the reports that exist so that those nothing backs any more get deleted.
        self._auditor = None
        self._written.clear()
        self._stale = {(fmt, key) for fmt in self.formats for key in self.store.existing(APIS[fmt])}
        self._takeover = False

    def _decide_changed(self, auditor: Auditor, full: bool) -> tuple[set[str], int]:
        """Decide every object (`full`) or those whose version moved; the uids seen and how many
        objects were decided."""
        seen: set[str] = set()
        decided = 0
        for obj in self.objects():
            meta = obj.get("metadata") or {}
            uid = str(meta.get("uid") or "")
            if not uid:
                continue
            seen.add(uid)
            version = str(meta.get("resourceVersion") or "")
            if not full and self._versions.get(uid) == version:
                continue
            decided += 1
            if decided % 32 == 0:
                # Hand the GIL over: admissions on the event loop must not queue behind a re-scan.
                time.sleep(0)
            audit = auditor.audit(obj)
            self._versions[uid] = version  # only once decided: a pass that fails here retries it
            self._record(uid, meta.get("namespace") or None, audit)
        return seen, decided

    def _record(self, uid: str, namespace: str | None, audit: ObjectAudit | None) -> None:
        """Keep an object's new audit; its namespace's reports are rewritten when it changed."""
        old = self._audits.get(uid)
        if audit is None:
            if old is not None:
                del self._audits[uid]
                self._dirty_namespaces.add(namespace)
            return
        if old is not None and old.rows == audit.rows and old.ref.namespace == audit.ref.namespace:
            # Same findings: keep the old audit (and its timestamp); only the version moved.
            self._audits[uid] = ObjectAudit(
                audit.ref, old.rows, old.role, old.klass, old.tier, decided_at=old.decided_at
            )
            return
        self._audits[uid] = audit
        self._dirty_namespaces.add(namespace)

    def _forget_gone(self, seen: set[str]) -> None:
        for uid in set(self._versions) - seen:
            del self._versions[uid]
            gone = self._audits.pop(uid, None)
            if gone is not None:
                self._dirty_namespaces.add(gone.ref.namespace)

    def _counts(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        for audit in self._audits.values():
            for row in audit.rows:
                if row.category != "validation":
                    continue
                key = (row.policy, row.result)
                counts[key] = counts.get(key, 0) + 1
        return counts

    def _write_dirty(self) -> None:
        by_namespace: dict[str | None, list[ObjectAudit]] = {ns: [] for ns in self._dirty_namespaces}
        for audit in self._audits.values():
            if audit.ref.namespace in by_namespace:
                by_namespace[audit.ref.namespace].append(audit)
        for namespace in sorted(by_namespace, key=lambda ns: ns or ""):
            if self._stop.is_set() or not self.leading:
                return
            if self._write_namespace(namespace, by_namespace[namespace]):
                self._dirty_namespaces.discard(namespace)

    def _write_namespace(self, namespace: str | None, audits: list[ObjectAudit]) -> bool:
        """Apply this namespace's reports and delete its stale shards; False when a write failed."""
        ok = True
        for fmt in self.formats:
            api = APIS[fmt]
            wanted: set[Key] = set()
            for report in build_reports(namespace, audits, fmt=fmt, max_bytes=self.max_bytes):
                key: Key = (namespace, report["metadata"]["name"])
                wanted.add(key)
                body = orjson.dumps(report, option=orjson.OPT_SORT_KEYS)
                self._stale.discard((fmt, key))
                if self._written.get((fmt, key)) == body:
                    continue
                if self._write("apply", functools.partial(self.store.apply, api, report)):
                    self._written[(fmt, key)] = body
                else:
                    ok = False
            previous = {k for f, k in self._written if f == fmt and k[0] == namespace}
            stale = {k for f, k in self._stale if f == fmt and k[0] == namespace}
            for key in sorted((previous | stale) - wanted, key=lambda k: k[1]):
                if self._write("delete", functools.partial(self.store.delete, api, key[0], key[1])):
                    self._written.pop((fmt, key), None)
                    self._stale.discard((fmt, key))
                else:
                    ok = False
        return ok

    def _write(self, operation: str, call: Callable[[], None]) -> bool:
        gap = self.write_gap - (time.monotonic() - self._last_write)
        if gap > 0:
            self._stop.wait(gap)
        self._last_write = time.monotonic()
        try:
            call()
        except Exception as exc:
            log.warning(
                "audit: report %s failed; retrying at the next pass", operation, extra={"problem": repr(exc)}
            )
            if self.metrics is not None:
                self.metrics.observe_report_write(operation, False)
            return False
        if self.metrics is not None:
            self.metrics.observe_report_write(operation, True)
        return True

"""Prometheus metrics of one webhook server, in a registry the server owns (never the global one).

The request path touches only pre-resolved label children (a dict lookup and an add), and times
each policy on 1 in `sample_every` requests, so that measuring the webhook does not slow it down.

With several worker processes (`serve --workers`), a scrape reaches one of them, which must answer
for all: prometheus_client's multiprocess mode (values in files under $PROMETHEUS_MULTIPROC_DIR,
set by `serve` before this module is imported) sums counters and histograms over the workers and
keeps one series per live worker for the gauges that are a worker's state. The gauges computed at
scrape time (admissions in flight, certificate expiry) are the answering worker's own.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from webhook import kinds

__all__ = ["CONTENT_TYPE", "Metrics"]

# Label values come from requests; bound them so that a client cannot grow the series count.
_KNOWN_KINDS = frozenset(info.kind for info in kinds.KINDS)
_OPERATIONS = frozenset(("CREATE", "UPDATE", "DELETE", "CONNECT"))

# An admission takes well under a millisecond; the API server gives up after its timeout (≤ 30 s).
_REQUEST_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)
_AUDIT_BUCKETS = (0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_POLICY_BUCKETS = (0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.01, 0.1)
# A resumed workload waits seconds (a compressed test) to hours (a production cooldown and its bound).
_GATED_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0)
# Event reasons of the resume controller's releases (webhook.recovery.plan.Release), and the tiers.
_RESUME_REASONS = ("ResumeReleased", "ResumeBoundReached", "ResumeUngoverned", "ResumeRest")
_TIERS = ("guaranteed", "preemptible")


class Metrics:
    """Every metric the server exports; one instance per ServerState."""

    def __init__(self, *, sample_every: int = 16, registry: CollectorRegistry | None = None) -> None:
        if sample_every < 1:
            raise ValueError(f"sample_every must be at least 1, got {sample_every}")
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.multiprocess_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
        # Gauges computed at scrape time cannot live in the shared files: a registry of their own.
        self._local = CollectorRegistry(auto_describe=True) if self.multiprocess_dir else self.registry
        self.sample_every = sample_every
        # One countdown per endpoint: with one for both, the pairs of calls the API server makes
        # (/mutate, then /validate) would put every sample on the same endpoint when N is even.
        self._sample_countdown: dict[str, int] = {}
        r = self.registry
        self.requests = Counter(
            "trainguard_admission_requests",
            "Admission requests answered with an AdmissionReview, by decision "
            "(allowed, denied, skipped: nothing to decide, error: the engine failed and the request "
            "was answered with a denial (validate) or an allow without patch (mutate); timeout: not "
            "decided within the request budget, answered the same way).",
            ["endpoint", "operation", "kind", "decision"],
            registry=r,
        )
        self.rejected = Counter(
            "trainguard_admission_rejected_requests",
            "Calls answered with an HTTP error instead of an AdmissionReview, by reason.",
            ["endpoint", "reason"],
            registry=r,
        )
        self.latency = Histogram(
            "trainguard_admission_duration_seconds",
            "Time from the first byte of the body read to the response, per endpoint.",
            ["endpoint"],
            buckets=_REQUEST_BUCKETS,
            registry=r,
        )
        self.policy_latency = Histogram(
            "trainguard_policy_evaluation_seconds",
            "Evaluation time of each policy, sampled on 1 in N admissions (see sample_every).",
            ["policy"],
            buckets=_POLICY_BUCKETS,
            registry=r,
        )
        self.placements = Counter(
            "trainguard_admission_placements",
            "Where admissions were decided: inline (on the event loop, the usual case), deferred "
            "(begun inline, then decided afresh on a deciding thread because they needed longer than "
            "a slice), thread (bodies too large to begin inline).",
            ["placement"],
            registry=r,
        )
        self._placement_children = {p: self.placements.labels(p) for p in ("inline", "deferred", "thread")}
        self.adaptations = Counter(
            "trainguard_adaptations_reused",
            "Validating calls by whether they reused the adaptation their mutating call left for the "
            "same object (hit) or adapted it again (miss): misses mean the object changed between the "
            "calls (another mutating webhook, or a call that reached another worker or replica).",
            ["result"],
            registry=r,
        )
        self._adaptation_children = {hit: self.adaptations.labels("hit" if hit else "miss") for hit in (1, 0)}
        self.decided_ahead = Counter(
            "trainguard_validations_decided_ahead",
            "Validating calls of workloads by whether they were answered with the decision made ahead "
            "while the API server applied their mutating call's patch (used) or decided when they came "
            "(not-used: no mutating call before, an object changed between the calls, a policy that "
            "reads what the API server sets between them, a reload, or no time to decide ahead).",
            ["result"],
            registry=r,
        )
        self._ahead_children = {
            used: self.decided_ahead.labels("used" if used else "not-used") for used in (1, 0)
        }
        self.engine_errors = Counter(
            "trainguard_engine_errors",
            "Unexpected exceptions inside the engine (policy evaluation errors are not counted here: "
            "failurePolicy decides those).",
            ["endpoint"],
            registry=r,
        )
        self.policy_errors = Counter(
            "trainguard_policy_errors",
            "Policy evaluations that ended in an error (a CEL run-time error such as a division by "
            "zero or a missing field, or the request's time budget used up before the policy ran); "
            "the policy's failurePolicy decided those requests.",
            ["policy"],
            registry=r,
        )
        self.in_flight = Gauge(
            "trainguard_admissions_in_flight",
            "Admissions being read or decided now (by the worker that answers the scrape).",
            registry=self._local,
        )
        self.queued = Gauge(
            "trainguard_admissions_waiting",
            "Admissions waiting for a free slot now (by the worker that answers the scrape).",
            registry=self._local,
        )
        self.reloads = Counter(
            "trainguard_reloads",
            "Reloads by source (policies, config, exceptions, certificate: the watched files; cluster: "
            "a cache change rebuilt the engine; registration: the webhook configurations were applied) and "
            "result (success, failure).",
            ["source", "result"],
            registry=r,
        )
        self.policy_set_policies = Gauge(
            "trainguard_policy_set_policies",
            "Policies in the policy set that decides now.",
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.policy_set_loaded = Gauge(
            "trainguard_policy_set_loaded_timestamp_seconds",
            "When the active policy set was loaded (Unix time).",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.policy_set_load_duration = Gauge(
            "trainguard_policy_set_load_duration_seconds",
            "How long loading and compiling the active policy set took.",
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        # With several workers: 1 only while every live worker is ready.
        self.ready = Gauge(
            "trainguard_ready", "1 while /readyz answers 200.", registry=r, multiprocess_mode="livemin"
        )
        self._not_after: float | None = None
        self.certificate_expiry = Gauge(
            "trainguard_certificate_expiry_seconds",
            "Seconds until the serving certificate's notAfter (negative once expired).",
            registry=self._local,
        )
        self.certificate_expiry.set_function(self._seconds_to_expiry)
        # Cluster audit (`serve --audit`): filled only on the replica that writes the reports.
        self.audit_results = Gauge(
            "trainguard_audit_results",
            "Results in the policy reports, by policy and result (pass, fail, warn, error, skip).",
            ["policy", "result"],
            registry=r,
        )
        self.audit_scan_duration = Histogram(
            "trainguard_audit_scan_duration_seconds",
            "Time one audit pass spent deciding objects, by kind of pass (full: every object after a "
            "policy, config or exception change; incremental: objects changed since the last pass).",
            ["pass"],
            buckets=_AUDIT_BUCKETS,
            registry=r,
        )
        self.audit_objects = Counter(
            "trainguard_audit_objects_scanned",
            "Objects decided by the audit (each decision once).",
            registry=r,
        )
        self.report_writes = Counter(
            "trainguard_audit_report_writes",
            "Policy report writes, by operation (apply, delete) and result (success, failure).",
            ["operation", "result"],
            registry=r,
        )
        # The resume controller (webhook.recovery.controller): filled only on the replica holding
        # its Lease; a replica that steps down sets its gauge back to 0, so "livemax" (and max over
        # pods) is the leader's view.
        self.resume_gated = Gauge(
            "trainguard_resume_gated_workloads",
            "Workloads whose pods wait behind the resume gate now, by tier (other: a tier the "
            "platform config does not know).",
            ["tier"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.resume_releases = Counter(
            "trainguard_resume_releases",
            "Workloads whose resume gates were lifted, by reason (ResumeReleased: cooldown over and "
            "the queue had room; ResumeBoundReached: gated for maxGated, released whatever the queue "
            "said; ResumeUngoverned: its tier is no longer governed; ResumeRest: pods created after "
            "the rest of the workload was released).",
            ["reason"],
            registry=r,
        )
        self.resume_unsettled = Counter(
            "trainguard_resume_bound_after_release",
            "Released workloads still not settled (some pod not Running and Ready for the settle "
            "time) maxGated after their release: their queue stopped waiting for them.",
            registry=r,
        )
        self.resume_gated_seconds = Histogram(
            "trainguard_resume_gated_seconds",
            "How long a workload waited behind the resume gate, from its first gated pod's creation "
            "to the release, by reason of the release.",
            ["reason"],
            buckets=_GATED_BUCKETS,
            registry=r,
        )
        self.engine_fallbacks = Counter(
            "trainguard_engine_fallbacks",
            "Policies the engine evaluated expression by expression instead of in its phase's one "
            "program, by phase (mutating, validating) and reason (refused when the policy set was "
            "loaded: runtime-cannot-join, variable-name-not-an-identifier, does-not-compile-joined; "
            "on the request: evaluation-failed, unexpected-value); one per policy and decision "
            "(admissions, and with --audit the audit's), kept across policy reloads. The decision "
            "is the same, only slower: a steady rate asks for a look.",
            ["phase", "reason"],
            registry=r,
        )
        for reason in _RESUME_REASONS:  # every series from the start, so a rate is 0 rather than absent
            self.resume_releases.labels(reason)
        for tier in (*_TIERS, "other"):
            self.resume_gated.labels(tier)
        self._audit_result_keys: set[tuple[str, str]] = set()
        self._request_children: dict[tuple[str, str, str, str], Counter] = {}
        self._latency_children: dict[str, Histogram] = {}
        self._rejected_children: dict[tuple[str, str], Counter] = {}
        self._policy_children: dict[str, Histogram] = {}
        self._policy_error_children: dict[str, Counter] = {}

    # -- request path ---------------------------------------------------------------------------

    def observe_request(
        self, endpoint: str, operation: str, kind: str, decision: str, seconds: float
    ) -> None:
        key = (endpoint, operation, kind, decision)
        counter = self._request_children.get(key)
        if counter is None:  # unknown operations and kinds share "other"
            op = operation if operation in _OPERATIONS else "other"
            labels = (endpoint, op, kind if kind in _KNOWN_KINDS else "other", decision)
            counter = _child(self._request_children, key, self.requests, *labels)
        counter.inc()
        self._latency(endpoint).observe(seconds)

    def observe_rejected(self, endpoint: str, reason: str, seconds: float) -> None:
        # A flood of calls answered 429 must stay cheap: the child is looked up once per pair.
        _child(self._rejected_children, (endpoint, reason), self.rejected, endpoint, reason).inc()
        self._latency(endpoint).observe(seconds)

    def observe_placement(self, placement: str) -> None:
        self._placement_children[placement].inc()

    def observe_adaptation(self, hit: bool) -> None:
        self._adaptation_children[hit].inc()

    def observe_decided_ahead(self, used: bool) -> None:
        self._ahead_children[used].inc()

    def observe_engine_error(self, endpoint: str) -> None:
        self.engine_errors.labels(endpoint).inc()

    def observe_policy_error(self, policy: str) -> None:
        _child(self._policy_error_children, policy, self.policy_errors, policy).inc()

    def set_in_flight(self, busy: Callable[[], float], waiting: Callable[[], float]) -> None:
        self.in_flight.set_function(busy)
        self.queued.set_function(waiting)

    def sample(self, endpoint: str) -> bool:
        """True once every `sample_every` calls to `endpoint`: time this request's policies."""
        left = self._sample_countdown.get(endpoint, self.sample_every) - 1
        if left:
            self._sample_countdown[endpoint] = left
            return False
        self._sample_countdown[endpoint] = self.sample_every
        return True

    def observe_policies(self, timings: Mapping[str, float]) -> None:
        for policy, seconds in timings.items():
            _child(self._policy_children, policy, self.policy_latency, policy).observe(seconds)

    # -- lifecycle ------------------------------------------------------------------------------

    def observe_reload(self, source: str, ok: bool) -> None:
        self.reloads.labels(source, "success" if ok else "failure").inc()

    def observe_policy_set(self, policies: Collection[str], load_seconds: float) -> None:
        self.policy_set_load_duration.set(load_seconds)
        self.policy_set_loaded.set(time.time())
        # A policy that left the set would otherwise keep its series forever.
        for gone in set(self._policy_children) - set(policies):
            del self._policy_children[gone]
            self.policy_latency.remove(gone)

    # -- cluster audit --------------------------------------------------------------------------

    def observe_audit_scan(self, seconds: float, objects: int, full: bool) -> None:
        self.audit_scan_duration.labels("full" if full else "incremental").observe(seconds)
        self.audit_objects.inc(objects)

    def set_audit_results(self, counts: Mapping[tuple[str, str], int]) -> None:
        """The current result counts; series of (policy, result) pairs that went away are removed."""
        for key in self._audit_result_keys - set(counts):
            self.audit_results.remove(*key)
        for (policy, result), n in counts.items():
            self.audit_results.labels(policy, result).set(n)
        self._audit_result_keys = set(counts)

    def observe_report_write(self, operation: str, ok: bool) -> None:
        self.report_writes.labels(operation, "success" if ok else "failure").inc()

    # -- resume controller ----------------------------------------------------------------------

    def observe_resume_release(self, reason: str, gated_seconds: float) -> None:
        reason = reason if reason in _RESUME_REASONS else "other"
        self.resume_releases.labels(reason).inc()
        self.resume_gated_seconds.labels(reason).observe(max(gated_seconds, 0.0))

    def observe_resume_unsettled(self, workloads: int) -> None:
        self.resume_unsettled.inc(workloads)

    def set_resume_gated(self, counts: Mapping[str, int]) -> None:
        """Gated workloads per tier now; tiers not in `counts` are 0 (a replica standing by: all)."""
        for tier in _TIERS:
            self.resume_gated.labels(tier).set(counts.get(tier, 0))
        self.resume_gated.labels("other").set(sum(n for t, n in counts.items() if t not in _TIERS))

    # -- engine ---------------------------------------------------------------------------------

    def observe_fallback(self, phase: str, reason: str) -> None:
        """One policy the engine evaluated by the generic path (the engine's Fallbacks observer).
        With several workers each writes its own metric file as it counts, so a scrape answered by
        any of them sums them all, a retired worker's included."""
        self.engine_fallbacks.labels(phase, reason).inc()

    def set_certificate_not_after(self, timestamp: float | None) -> None:
        self._not_after = timestamp

    def render(self) -> bytes:
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        every_worker = CollectorRegistry()
        MultiProcessCollector(every_worker, path=self.multiprocess_dir)  # type: ignore[no-untyped-call]
        return generate_latest(every_worker) + generate_latest(self._local)

    # -- helpers --------------------------------------------------------------------------------

    def _latency(self, endpoint: str) -> Histogram:
        return _child(self._latency_children, endpoint, self.latency, endpoint)

    def _seconds_to_expiry(self) -> float:
        return float("nan") if self._not_after is None else self._not_after - time.time()


_M = TypeVar("_M", Counter, Histogram)

# Label sets whose child metric is remembered per metric: past it a child is looked up afresh
# (label values that come from requests are folded into "other", so this is never reached in
# practice; the bound keeps a bug from growing the cache without end).
_CACHED_CHILDREN = 4096


def _child(cache: dict[Any, _M], key: Any, metric: _M, *labels: str) -> _M:
    """`metric.labels(*labels)`, remembered in `cache` under `key`: prometheus_client's own lookup
    takes a lock and builds a tuple on every call, a cost on every admission."""
    child = cache.get(key)
    if child is None:
        child = metric.labels(*labels)
        if len(cache) < _CACHED_CHILDREN:
            cache[key] = child
    return child

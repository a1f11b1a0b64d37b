"""`trainguard serve`: the admission webhook, a thin shell over `webhook.server.serve(Settings(...))`."""

from __future__ import annotations

import argparse
import os
import shutil

from webhook import stopsignal
from webhook.cli._file_engine import add_policy_args
from webhook.logs import LEVELS
from webhook.settings import DEFAULT_ADAPTATION_BYTES, DEFAULT_INLINE_SLICE

# Admissions per worker before it is replaced. Under 300,000 mixed reviews (one in a thousand of
# 2.8 MiB) a worker's memory rose for its first 50,000-90,000 admissions before levelling off;
# replaced every 40,000 the tree stayed within 6 % of its figure after the warm-up, with no failed
# request (tests/bench/bench_memory.py, tests/bench/RESULTS.md).
DEFAULT_RECYCLE_AFTER = 40_000


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run the admission webhook (HTTPS: /validate, /mutate, /healthz, /readyz, /metrics)",
        description=(
            "Serve the validating and mutating admission webhook over TLS. Policy files, the config "
            "and the certificate files are watched and reloaded without a restart; a broken policy "
            "set is reported and the last good one keeps deciding. On SIGTERM the server turns "
            "not-ready, keeps answering for --shutdown-delay seconds, then drains. Exit 2 when it "
            "cannot start (no TLS files, a broken policy set or config)."
        ),
    )
    tls = p.add_argument_group("TLS (required: the webhook serves HTTPS only)")
    tls.add_argument("--tls-cert", metavar="FILE", help="serving certificate (PEM), e.g. certs/tls.crt")
    tls.add_argument("--tls-key", metavar="FILE", help="its private key (PEM), e.g. certs/tls.key")
    tls.add_argument(
        "--client-ca",
        metavar="FILE",
        help="mutual TLS: /validate and /mutate answer 401 unless the client presents a certificate "
        "signed by this CA (PEM; reloaded on change); probes and /metrics need none",
    )
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default: 0.0.0.0)")
    p.add_argument("--port", type=_port, default=8443, help="port to listen on (default: 8443)")
    p.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve /metrics on this port only (HTTPS, the same certificate), so that a NetworkPolicy "
        "can let scrapers reach /metrics and not /validate or /mutate (default: /metrics on --port)",
    )
    add_policy_args(p)
    p.add_argument(
        "--exceptions",
        action="append",
        metavar="PATH",
        help="PolicyException files or directories, reloaded on change (repeatable); with cluster "
        "access, PolicyException objects are watched too",
    )
    cluster = p.add_argument_group("cluster (optional: caches of PriorityClasses and TrainingRuntimes)")
    access = cluster.add_mutually_exclusive_group()
    access.add_argument("--kubeconfig", metavar="FILE", help="cluster credentials from a kubeconfig")
    access.add_argument(
        "--in-cluster",
        "--cluster",
        dest="in_cluster",
        action="store_true",
        help="cluster credentials from the pod's service account",
    )
    cluster.add_argument(
        "--ca-bundle", metavar="FILE", help="CA certificate the API server verifies us with (ca.crt)"
    )
    cluster.add_argument(
        "--self-register",
        action="store_true",
        help="create or update the webhook configurations with --ca-bundle at start and when it changes",
    )
    cluster.add_argument(
        "--inject-ca-bundle",
        action="store_true",
        help="write --ca-bundle into the caBundle of the existing webhook configurations named "
        "trainguard, at start and when it changes; creates nothing (--self-register does more)",
    )
    cluster.add_argument("--webhook-service", default="trainguard", metavar="NAME", help="our Service's name")
    cluster.add_argument(
        "--webhook-namespace",
        default=os.environ.get("POD_NAMESPACE") or "trainguard-system",
        metavar="NS",
        help="our Service's namespace (default: $POD_NAMESPACE, else trainguard-system)",
    )
    cluster.add_argument(
        "--webhook-url",
        metavar="URL",
        help="register this URL instead of the Service (webhook outside the cluster)",
    )
    cluster.add_argument(
        "--audit",
        action="store_true",
        help="keep policy reports of the workloads in the cluster (one replica writes, elected "
        "through the Lease trainguard-audit in --webhook-namespace)",
    )
    cluster.add_argument(
        "--report-format",
        choices=("wgpolicy", "openreports", "both"),
        default="wgpolicy",
        help="with --audit: wgpolicyk8s.io/v1alpha2 PolicyReports (default), openreports.io/v1alpha1 "
        "Reports, or both",
    )
    p.add_argument(
        "--reload-interval",
        type=_positive_float,
        default=2.0,
        metavar="S",
        help="seconds between checks of the policy, config and certificate files (default: 2)",
    )
    p.add_argument(
        "--shutdown-delay",
        type=_non_negative_float,
        default=5.0,
        metavar="S",
        help="seconds to keep serving after SIGTERM, not ready, before draining (default: 5)",
    )
    p.add_argument(
        "--graceful-timeout",
        type=_positive_float,
        default=10.0,
        metavar="S",
        help="seconds in-flight requests get to finish once draining starts (default: 10)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=_positive_int,
        default=None,
        metavar="N",
        help="largest AdmissionReview accepted, in bytes (default: 3145728, 3 MiB)",
    )
    limits = p.add_argument_group("isolation and limits (per worker process)")
    limits.add_argument(
        "--workers",
        type=_positive_int,
        default=None,
        metavar="N",
        help="worker processes sharing the port (default, and at most: the CPU limit, from cgroup "
        "cpu.max or the CPUs this process may use; more is capped with a warning)",
    )
    limits.add_argument(
        "--recycle-after",
        type=_non_negative_int,
        default=DEFAULT_RECYCLE_AFTER,
        metavar="N",
        help="replace a worker with a fresh process after N admissions, which bounds what the "
        "allocator's fragmentation can add: the replacement starts accepting first, the old one "
        "then answers its open connections asking clients to reconnect, and drains; no request "
        f"fails and the pod stays ready (default: {DEFAULT_RECYCLE_AFTER}; 0: never)",
    )
    limits.add_argument(
        "--max-in-flight",
        type=_positive_int,
        default=8,
        metavar="N",
        help="admissions read and decided at once per worker; up to 16x more wait up to 2 s, the rest "
        "get 429 with Retry-After (default: 8)",
    )
    limits.add_argument(
        "--request-budget",
        type=_positive_float,
        default=4.0,
        metavar="S",
        help="seconds an admission may take; set it below the webhook timeoutSeconds (default: 4, "
        "80%% of 5). Policies not evaluated in time get their failurePolicy outcome",
    )
    limits.add_argument(
        "--inline-slice",
        type=_non_negative_float,
        default=DEFAULT_INLINE_SLICE,
        metavar="S",
        help="seconds an admission may run on the event loop before it moves to a deciding thread: "
        "the longest a probe waits behind a decision; 0 decides every admission on a thread "
        f"(default: {DEFAULT_INLINE_SLICE})",
    )
    limits.add_argument(
        "--adaptation-bytes",
        type=_non_negative_int,
        default=DEFAULT_ADAPTATION_BYTES,
        metavar="N",
        help="bytes of objects (their JSON) whose adaptation a mutating call keeps for the validating "
        "call on the same object, least recently used dropped first; 0 keeps none "
        f"(default: {DEFAULT_ADAPTATION_BYTES})",
    )
    limits.add_argument(
        "--header-timeout",
        type=_positive_float,
        default=10.0,
        metavar="S",
        help="seconds a connection has to send a request's headers, else 408 and close (default: 10)",
    )
    limits.add_argument(
        "--body-timeout",
        type=_positive_float,
        default=10.0,
        metavar="S",
        help="seconds a request has to send its body after its headers, else 408 and close (default: 10)",
    )
    p.add_argument("--log-level", choices=LEVELS, default="info", help="default: info")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    stopsignal.install()  # from here on a SIGTERM stops the server cleanly, whenever it comes

    # Imported here: `trainguard check --help` should not pay for uvicorn and the server.
    from webhook.workers import default_workers, shared_metrics_dir

    workers = args.workers or default_workers()
    # Before webhook.server imports prometheus_client: with several workers, /metrics sums them all
    # (serve() caps --workers at the usable CPUs, and says so).
    supervised = min(workers, default_workers()) > 1 or args.recycle_after > 0
    metrics_dir = shared_metrics_dir() if supervised else None

    from webhook.server import ServerError, Settings, serve

    missing = [
        flag for flag, value in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)) if not value
    ]
    if missing:
        raise ServerError(
            f"{' and '.join(missing)} required: the webhook serves TLS only "
            "(create a pair with `trainguard certs --out certs/`)"
        )
    limits = {} if args.max_body_bytes is None else {"max_body_bytes": args.max_body_bytes}
    settings = Settings(
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        client_ca=args.client_ca,
        host=args.host,
        port=args.port,
        metrics_port=args.metrics_port,
        policies=tuple(args.policies or ()),
        exceptions=tuple(args.exceptions or ()),
        config=args.config,
        cel=None if args.cel in (None, "auto") else args.cel,
        kubeconfig=args.kubeconfig,
        in_cluster=args.in_cluster,
        ca_bundle=args.ca_bundle,
        self_register=args.self_register,
        inject_ca_bundle=args.inject_ca_bundle,
        webhook_service=args.webhook_service,
        webhook_namespace=args.webhook_namespace,
        webhook_url=args.webhook_url,
        reload_interval=args.reload_interval,
        shutdown_delay=args.shutdown_delay,
        graceful_timeout=args.graceful_timeout,
        log_level=args.log_level,
        workers=workers,
        max_in_flight=args.max_in_flight,
        max_queued=16 * args.max_in_flight,
        request_budget=args.request_budget,
        inline_slice=args.inline_slice,
        adaptation_bytes=args.adaptation_bytes,
        recycle_after=args.recycle_after,
        header_timeout=args.header_timeout,
        body_timeout=args.body_timeout,
        audit=args.audit,
        report_format=args.report_format,
        **limits,
    )
    try:
        return serve(settings)
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)


def _number(text: str, kind: type[int] | type[float]) -> int | float:
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def _positive_int(text: str) -> int:
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(_number(text, int))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _port(text: str) -> int:
    value = int(_number(text, int))
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number (0-65535), got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(_number(text, float))
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(_number(text, float))
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text}")
    return value

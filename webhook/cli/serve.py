"""`trainguard serve`: the admission webhook, a thin shell over `webhook.serve.main.serve(Settings(...))`.

Each flag is named for its Settings field (`--max-in-flight`: `max_in_flight`) and takes that
field's default: a server default is written once, in webhook/serve/settings.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
from typing import Any

from webhook.cli._file_engine import add_policy_args
from webhook.serve import stopsignal
from webhook.serve.logs import LEVELS
from webhook.serve.settings import ServerError, Settings, default

# Admissions that may wait for a slot, per slot: a burst is absorbed, a flood gets 429 at once.
_QUEUED_PER_SLOT = default("max_queued") // default("max_in_flight")


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
    _tls_args(p)
    _listen_args(p)
    _policy_args(p)
    _cluster_args(p)
    _serving_args(p)
    _limit_args(p)
    _setting(p, "--log-level", "what is logged", choices=LEVELS)
    p.set_defaults(run=run)


def _tls_args(p: argparse.ArgumentParser) -> None:
    tls = p.add_argument_group("TLS (required: the webhook serves HTTPS only)")
    tls.add_argument("--tls-cert", metavar="FILE", help="serving certificate (PEM), e.g. certs/tls.crt")
    tls.add_argument("--tls-key", metavar="FILE", help="its private key (PEM), e.g. certs/tls.key")
    tls.add_argument(
        "--client-ca",
        metavar="FILE",
        help="mutual TLS: /validate and /mutate answer 401 unless the client presents a certificate "
        "signed by this CA (PEM; reloaded on change); probes and /metrics need none",
    )


def _listen_args(p: argparse.ArgumentParser) -> None:
    _setting(p, "--host", "address to listen on")
    _setting(p, "--port", "port to listen on", type=_port)
    p.add_argument(
        "--metrics-port",
        type=_port,
        metavar="PORT",
        help="serve /metrics on this port only (HTTPS, the same certificate), so that a NetworkPolicy "
        "can let scrapers reach /metrics and not /validate or /mutate (default: /metrics on --port)",
    )


def _policy_args(p: argparse.ArgumentParser) -> None:
    add_policy_args(p)
    p.add_argument(
        "--exceptions",
        action="append",
        metavar="PATH",
        help="PolicyException files or directories, reloaded on change (repeatable); with cluster "
        "access, PolicyException objects are watched too",
    )


def _cluster_args(p: argparse.ArgumentParser) -> None:
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
    _setting(cluster, "--webhook-service", "our Service's name", metavar="NAME")
    cluster.add_argument(
        "--webhook-namespace",
        default=os.environ.get("POD_NAMESPACE") or default("webhook_namespace"),
        metavar="NS",
        help="our Service's namespace (default: %(default)s; in a pod, $POD_NAMESPACE)",
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
    _setting(
        cluster,
        "--report-format",
        "with --audit: wgpolicyk8s.io/v1alpha2 PolicyReports (wgpolicy), openreports.io/v1alpha1 "
        "Reports, or both",
        choices=("wgpolicy", "openreports", "both"),
    )


def _serving_args(p: argparse.ArgumentParser) -> None:
    """Reloads, the stop, and the largest body."""
    seconds = {"type": _positive_float, "metavar": "S"}
    _setting(
        p,
        "--reload-interval",
        "seconds between checks of the policy, config and certificate files",
        **seconds,
    )
    _setting(
        p,
        "--shutdown-delay",
        "seconds to keep serving after SIGTERM, not ready, before draining",
        type=_non_negative_float,
        metavar="S",
    )
    _setting(
        p, "--graceful-timeout", "seconds in-flight requests get to finish once draining starts", **seconds
    )
    _setting(
        p,
        "--max-body-bytes",
        "largest AdmissionReview accepted, in bytes; the default is the API server's own limit",
        type=_positive_int,
        metavar="N",
    )


def _limit_args(p: argparse.ArgumentParser) -> None:
    seconds = {"type": _positive_float, "metavar": "S"}
    limits = p.add_argument_group("isolation and limits (per worker process)")
    limits.add_argument(
        "--workers",
        type=_positive_int,
        default=default("workers"),
        metavar="N",
        help="worker processes sharing the port (default, and at most: the CPU limit, from cgroup "
        "cpu.max or the CPUs this process may use; more is capped with a warning)",
    )
    _setting(
        limits,
        "--recycle-after",
        "replace a worker with a fresh process after N admissions, which bounds what the "
        "allocator's fragmentation can add: the replacement starts accepting first, the old one "
        "then answers its open connections asking clients to reconnect, and drains; no request "
        "fails and the pod stays ready; 0: never",
        type=_non_negative_int,
        metavar="N",
    )
    _setting(
        limits,
        "--max-in-flight",
        f"admissions read and decided at once per worker; up to {_QUEUED_PER_SLOT}x more wait up to "
        f"{default('queue_wait'):g} s, the rest get 429 with Retry-After",
        type=_positive_int,
        metavar="N",
    )
    _setting(
        limits,
        "--request-budget",
        "seconds an admission may take, below the webhook timeoutSeconds (5; the default is 80%% of "
        "it); policies not evaluated in time get their failurePolicy outcome",
        **seconds,
    )
    _setting(
        limits,
        "--inline-slice",
        "seconds an admission may run on the event loop before it moves to a deciding thread: the "
        "longest a probe waits behind a decision; 0 decides every admission on a thread",
        type=_non_negative_float,
        metavar="S",
    )
    _setting(
        limits,
        "--adaptation-bytes",
        "bytes of objects (their JSON) whose adaptation a mutating call keeps for the validating call "
        "on the same object, least recently used dropped first; 0 keeps none",
        type=_non_negative_int,
        metavar="N",
    )
    _setting(
        limits,
        "--header-timeout",
        "seconds a connection has to send a request's headers, else 408 and close",
        **seconds,
    )
    _setting(
        limits,
        "--body-timeout",
        "seconds a request has to send its body after its headers, else 408 and close",
        **seconds,
    )


def _setting(group: argparse._ActionsContainer, flag: str, text: str, **options: Any) -> None:
    """A flag for the Settings field of its name, with that field's default, shown in --help."""
    field = flag.removeprefix("--").replace("-", "_")
    group.add_argument(flag, default=default(field), help=f"{text} (default: %(default)s)", **options)


def run(args: argparse.Namespace) -> int:
    stopsignal.install()  # from here on a SIGTERM stops the server cleanly, whenever it comes

    # Imported here: `trainguard check --help` should not pay for uvicorn and the server.
    from webhook.serve.workers import default_workers, shared_metrics_dir

    # Before webhook.serve.main imports prometheus_client: with several workers, /metrics sums them all
    # (serve() caps --workers at the usable CPUs, and says so).
    supervised = min(args.workers or default_workers(), default_workers()) > 1 or args.recycle_after > 0
    metrics_dir = shared_metrics_dir() if supervised else None

    from webhook.serve.main import serve

    try:
        return serve(settings_from(args))
    finally:
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
            os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)


def settings_from(args: argparse.Namespace) -> Settings:
    """The Settings the flags ask for: each flag's value in the field of its name."""
    missing = [
        flag for flag, value in (("--tls-cert", args.tls_cert), ("--tls-key", args.tls_key)) if not value
    ]
    if missing:
        raise ServerError(
            f"{' and '.join(missing)} required: the webhook serves TLS only "
            "(create a pair with `trainguard certs --out certs/`)"
        )
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(Settings) if hasattr(args, f.name)}
    return Settings(
        **{
            **given,
            # Options shared with check and audit, whose "none given" differs from the field's.
            "policies": tuple(args.policies or ()),
            "exceptions": tuple(args.exceptions or ()),
            "cel": None if args.cel in (None, "auto") else args.cel,
            "max_queued": _QUEUED_PER_SLOT * args.max_in_flight,
        }
    )


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

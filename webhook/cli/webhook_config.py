"""`trainguard webhook-config`: print the Validating- and MutatingWebhookConfiguration for the webhook.

A thin shell over `webhook.webhookconfig.render()`, the function the server uses to register
itself, so that the printed objects are the ones the server would create.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from webhook import certs, install_names, webhookconfig
from webhook.certs import CA_CERT
from webhook.config import load_config
from webhook.webhookconfig import WebhookConfigError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "webhook-config",
        help="render the webhook configurations (YAML stream or JSON List)",
        description=(
            "Render trainguard's ValidatingWebhookConfiguration and MutatingWebhookConfiguration. "
            "Without --ca-bundle or --certs the caBundle is left out: the server fills it in when "
            "it registers itself."
        ),
    )
    _ca_args(parser)
    _target_args(parser)
    _configuration_args(parser)
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    parser.set_defaults(run=run)


def _ca_args(parser: argparse.ArgumentParser) -> None:
    """Where the caBundle comes from (none: the server fills it in)."""
    ca = parser.add_mutually_exclusive_group()
    ca.add_argument("--ca-bundle", metavar="FILE", type=Path, help="PEM file of the CA that signed the cert")
    ca.add_argument(
        "--certs", metavar="DIR", type=Path, help=f"directory written by `trainguard certs` ({CA_CERT})"
    )


def _target_args(parser: argparse.ArgumentParser) -> None:
    """Where the API server sends admissions: a Service, or a URL."""
    parser.add_argument(
        "--service", metavar="NAME", help=f"webhook Service name (default: {install_names.SERVICE})"
    )
    parser.add_argument(
        "--namespace",
        default=install_names.NAMESPACE,
        metavar="NS",
        help="trainguard's namespace: the Service's, excluded from admission (default: %(default)s)",
    )
    parser.add_argument(
        "--port", type=int, metavar="PORT", help=f"Service port (default: {install_names.SERVICE_PORT})"
    )
    parser.add_argument(
        "--url",
        metavar="URL",
        help="https://HOST:PORT of a webhook outside the cluster, instead of a Service",
    )


def _configuration_args(parser: argparse.ArgumentParser) -> None:
    """The configurations' names, failure policies, timeout and what they never send."""
    parser.add_argument(
        "--name",
        default=install_names.CONFIGURATIONS,
        help="name of both configurations (default: %(default)s)",
    )
    parser.add_argument(
        "--service-account",
        default=install_names.SERVICE_ACCOUNT,
        metavar="NAME",
        help="trainguard's service account, whose requests are skipped (default: %(default)s)",
    )
    parser.add_argument("--validating-failure-policy", choices=("Fail", "Ignore"), default="Fail")
    parser.add_argument("--mutating-failure-policy", choices=("Fail", "Ignore"), default="Ignore")
    parser.add_argument(
        "--timeout", type=int, default=5, metavar="SECONDS", help="1..30 (default: %(default)s)"
    )
    parser.add_argument(
        "--exclude-namespace",
        action="append",
        default=[],
        metavar="NS",
        help="namespace never sent to the webhook (repeatable); kube-system and --namespace always are",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="PlatformConfig whose excludedNamespaces, pool keys, tier classes and queues shape the "
        "matchConditions (default: the embedded defaults, as the server without --config)",
    )
    parser.add_argument(
        "--no-skip-plain-cpu",
        dest="skip_plain_cpu",
        action="store_false",
        help="send plain CPU Pods, Deployments and StatefulSets to the webhook too",
    )


def run(args: argparse.Namespace) -> int:
    if args.url is not None and (args.service is not None or args.port is not None):
        raise WebhookConfigError("--url replaces --service and --port: give one or the other")
    objects = webhookconfig.render(
        ca_bundle=_read_ca(args),
        service=args.service or install_names.SERVICE,
        namespace=args.namespace,
        port=args.port if args.port is not None else install_names.SERVICE_PORT,
        url=args.url,
        name=args.name,
        service_account=args.service_account,
        validating_failure_policy=args.validating_failure_policy,
        mutating_failure_policy=args.mutating_failure_policy,
        timeout_seconds=args.timeout,
        excluded_namespaces=args.exclude_namespace,
        platform=load_config(args.config),
        skip_plain_cpu=args.skip_plain_cpu,
    )
    sys.stdout.write(webhookconfig.dump(objects, args.output))
    return 0


def _read_ca(args: argparse.Namespace) -> bytes | None:
    path: Path | None = args.certs / CA_CERT if args.certs is not None else args.ca_bundle
    if path is None:
        return None
    try:
        pem = path.read_bytes()
    except OSError as exc:
        raise WebhookConfigError(f"{path}: cannot read the CA bundle: {exc.strerror}") from exc
    try:
        certs.ca_bundle(pem)  # checked here so that the message names the file
    except certs.CertificateError as exc:
        raise WebhookConfigError(f"{path}: {exc}") from exc
    return pem

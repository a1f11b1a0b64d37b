"""`trainguard certs`: write a CA and a serving certificate for the webhook Service into a directory.

A thin shell over `webhook.certs.write_bundle()`; an existing CA in the directory is reused, so
running it again rotates the serving certificate without invalidating the registered caBundle.
"""

from __future__ import annotations

import argparse

from webhook import certs, install_names


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "certs",
        help="generate a CA and the webhook's serving certificate",
        description=(
            "Write ca.crt, ca.key, tls.crt and tls.key into DIR. The serving certificate names the "
            "Service (NAME, NAME.NS, NAME.NS.svc, NAME.NS.svc.cluster.local) plus every --host. "
            "A CA already in DIR is reused, so re-running rotates only the serving certificate. "
            "DIR is created 0700 and keys are written 0600 whatever the umask; a DIR other users "
            "may write to is refused."
        ),
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory (e.g. certs/)")
    parser.add_argument(
        "--service", default=install_names.SERVICE, metavar="NAME", help="Service name (default: %(default)s)"
    )
    parser.add_argument(
        "--namespace",
        default=install_names.NAMESPACE,
        metavar="NS",
        help="Service namespace (default: %(default)s)",
    )
    parser.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="H",
        help="extra DNS name or IP address for the certificate (repeatable), e.g. 127.0.0.1",
    )
    parser.add_argument(
        "--client-cert",
        metavar="NAME",
        help="also write NAME.crt and NAME.key: a client certificate (CN NAME) signed by the CA, for "
        "the API server to present to a webhook served with --client-ca DIR/ca.crt",
    )
    parser.add_argument(
        "--days", type=_positive_int, default=365, metavar="N", help="serving certificate validity"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.client_cert is not None:
        certs.check_client_name(args.client_cert)  # before anything is written
    paths = certs.write_bundle(args.out, args.service, args.namespace, args.host, args.days)
    expiry = certs.cert_expiry(paths.tls_cert.read_bytes())
    dns, ips = certs.split_hosts([*certs.service_dns_names(args.service, args.namespace), *args.host])
    if paths.ca_created:
        print(f"wrote {paths.ca_cert} and {paths.ca_key} (new CA)")
    else:
        print(f"reused the CA in {paths.ca_cert} (the registered caBundle stays valid)")
    print(f"wrote {paths.tls_cert} and {paths.tls_key}, valid until {expiry:%Y-%m-%d %H:%M} UTC")
    print(f"  names: {', '.join([*dict.fromkeys(dns), *map(str, dict.fromkeys(ips))])}")
    if args.client_cert is not None:
        cert, key = certs.write_client_cert(args.out, args.client_cert, days=args.days)
        print(f"wrote {cert} and {key}: client certificate CN={args.client_cert}")
    return 0


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value

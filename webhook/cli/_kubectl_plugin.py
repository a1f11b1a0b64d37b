"""`kubectl trainguard`: the trainguard CLI as a kubectl plugin (the `kubectl-trainguard` executable).

    kubectl trainguard check FILE... [-n NS] [--context CTX] [--kubeconfig FILE] [check options]
    kubectl trainguard review FILE... [the same]
    kubectl trainguard audit [-n NS | -A] [--context CTX] [--kubeconfig FILE] [audit options]

kubectl hands a plugin its arguments untouched (its own flags must follow the plugin's name), so
this entry point takes kubectl's `--context`, `--kubeconfig` and `--namespace`/`-n` anywhere on the
line and resolves them the way kubectl does, by asking kubectl itself:

* the namespace is `-n` when given, else the current context's namespace, else `default`; for
  `check` and `review` it is the namespace of documents that name none, as `kubectl apply -f`;
* `audit` gets a kubeconfig of exactly the chosen context (`kubectl config view --minify
  --flatten`), so that it reads the cluster `kubectl get` would.

The leading underscore keeps `trainguard`'s subcommand discovery away: this is a separate
entry point, not a subcommand.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence

from webhook import __version__
from webhook.cli import EXIT_ERROR
from webhook.cli import main as trainguard_main

COMMANDS = ("check", "review", "audit")
KUBECTL_TIMEOUT = 30.0


class KubectlError(Exception):
    """kubectl is missing or could not resolve the context."""


def _kubectl_flags() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--context")
    parser.add_argument("--kubeconfig")
    parser.add_argument("--namespace", "-n")
    parser.add_argument("--all-namespaces", "-A", action="store_true")
    return parser


def _usage() -> str:
    return (
        "usage: kubectl trainguard {check,review} FILE... [-n NS] [--context CTX] [--kubeconfig FILE]\n"
        "       kubectl trainguard audit [-n NS | -A] [--context CTX] [--kubeconfig FILE]\n"
        "\n"
        "The trainguard CLI as a kubectl plugin. check and review decide manifest files offline, with\n"
        "documents that name no namespace placed in -n or the current context's namespace; audit\n"
        "decides the workloads running in the current (or --context) cluster. Every other option is\n"
        "the trainguard subcommand's own: `kubectl trainguard check --help`.\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(_usage())
        return 0 if args else EXIT_ERROR
    if args[0] == "--version":
        print(f"kubectl-trainguard {__version__}")
        return 0
    if any(a in ("-h", "--help") for a in args[1:]) and args[0] in COMMANDS:
        return trainguard_main([args[0], "--help"])
    # kubectl's flags may come before or after the subcommand, as with kubectl's own commands.
    flags, rest = _kubectl_flags().parse_known_args(args)
    command, remaining = (rest[0], rest[1:]) if rest else ("", [])
    if command not in COMMANDS:
        print(f"kubectl trainguard: error: unknown command {command!r}\n", file=sys.stderr)
        sys.stderr.write(_usage())
        return EXIT_ERROR
    try:
        if command == "audit":
            return _audit(flags, remaining)
        if flags.all_namespaces:
            print(f"kubectl trainguard: error: {command} decides files: -A has no meaning", file=sys.stderr)
            return EXIT_ERROR
        namespace = flags.namespace or _context_namespace(flags)
        return trainguard_main([command, "--namespace", namespace, *remaining])
    except KubectlError as exc:
        print(f"kubectl trainguard: error: {exc}", file=sys.stderr)
        return EXIT_ERROR


def _audit(flags: argparse.Namespace, remaining: list[str]) -> int:
    scope = (
        ["--all-namespaces"]
        if flags.all_namespaces
        else ["--namespace", flags.namespace or _context_namespace(flags)]
    )
    kubeconfig = _kubectl(flags, "config", "view", "--minify", "--flatten")
    # The file holds credentials: private to this user, removed whatever the audit does.
    with tempfile.TemporaryDirectory(prefix="kubectl-trainguard-") as directory:
        path = os.path.join(directory, "kubeconfig")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as f:
            f.write(kubeconfig)
        return trainguard_main(["audit", "--kubeconfig", path, *scope, *remaining])


def _context_namespace(flags: argparse.Namespace) -> str:
    """The namespace of the chosen context, as kubectl resolves it; `default` when it names none.

    Deciding files needs no cluster: with no kubeconfig at all (and no --context or --kubeconfig
    asked for), documents go to `default`, as they would on a fresh context.
    """
    try:
        namespace = _kubectl(flags, "config", "view", "--minify", "--output", "jsonpath={..namespace}")
    except KubectlError:
        if flags.context or flags.kubeconfig:
            raise
        return "default"
    return namespace.strip() or "default"


def _kubectl(flags: argparse.Namespace, *args: str) -> str:
    kubectl = os.environ.get("KUBECTL") or shutil.which("kubectl")
    if kubectl is None:
        raise KubectlError("kubectl is not on PATH (the plugin reads the context through it)")
    command = [kubectl, *args]
    if flags.context:
        command += ["--context", flags.context]
    if flags.kubeconfig:
        command += ["--kubeconfig", flags.kubeconfig]
    try:
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=KUBECTL_TIMEOUT,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise KubectlError(f"`{' '.join(command)}` did not answer in {KUBECTL_TIMEOUT:.0f} s") from None
    if result.returncode != 0:
        raise KubectlError(f"`{' '.join(command)}` failed: {result.stderr.strip()}")
    return result.stdout


if __name__ == "__main__":
    sys.exit(main())

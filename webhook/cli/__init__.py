"""`trainguard` command line: one module per subcommand, each a thin shell over the library.

Exit codes, the same for every subcommand:
    0  every document admitted / every test passed
    1  something was denied / a test failed
    2  usage, input, policy or config error (the message names file, document and field)
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Sequence

from webhook import __version__
from webhook.errors import TrainguardError

EXIT_ALLOWED = 0
EXIT_DENIED = 1
EXIT_ERROR = 2


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or only `command`'s subcommand when it names one.

    A subcommand's module imports what it runs on (the HTTP server, the cluster client, X.509),
    which costs more than a short `check` itself: a command line that names its subcommand
    builds only that one. `--help`, `--version` and an unknown name get every subcommand.
    """
    parser = argparse.ArgumentParser(
        prog="trainguard",
        description="Policy-as-code admission for GPU training workloads on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"trainguard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Each module in this package that defines register(sub) is a subcommand, named after the
    # module with `-` for `_`.
    modules = {
        m.name.replace("_", "-"): m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")
    }
    for name in [command] if command in modules else sorted(modules):
        importlib.import_module(f"{__name__}.{modules[name]}").register(sub)
    return parser


def _command(argv: Sequence[str]) -> str | None:
    """The subcommand a command line names: its first word, when that is not an option."""
    return argv[0] if argv and not argv[0].startswith("-") else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command(argv))
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except TrainguardError as exc:
        print(f"trainguard: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_ERROR

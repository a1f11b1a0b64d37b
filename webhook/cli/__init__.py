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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainguard",
        description="Policy-as-code admission for GPU training workloads on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"trainguard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # Each module in this package that defines register(sub) is a subcommand.
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not info.name.startswith("_"):
            module = importlib.import_module(f"{__name__}.{info.name}")
            module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
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

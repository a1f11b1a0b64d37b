"""The request path of one admission call: the files of `webhook/` it enters, in order.

    python tests/bench/trace_path.py [TREE] [--mutate]

Runs the app in process (starlette's test client, the shipped policies, the 11.6 KB training Pod
as an AdmissionReview), answers two calls to get first-use work out of the way, then traces a
third with sys.setprofile on every thread (the app may decide on a thread of its own). It prints
each file in the order it is first entered, how often the path moves into it from another file,
and the totals: files entered and file-to-file transitions. TREE (default: this checkout) is put
first on sys.path, so that two trees' paths can be compared; nothing is timed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any


def _app(tree: Path) -> Any:
    """The ASGI app over the shipped policies, from whichever module the tree keeps it in."""
    from webhook.config import load_config
    from webhook.engine import build_engine, load_policy_set

    # The server is a package (webhook.serve) from this tree on; older trees kept it at the top.
    try:
        app = importlib.import_module("webhook.serve.app")
    except ImportError:
        app = importlib.import_module("webhook.app")
    state = app.ServerState()
    state.install(build_engine(load_policy_set(), load_config()))
    return app.create_app(state)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("tree", nargs="?", default=str(Path(__file__).resolve().parents[2]))
    parser.add_argument("--mutate", action="store_true", help="trace POST /mutate instead of /validate")
    args = parser.parse_args()
    tree = Path(args.tree).resolve()
    sys.path.insert(0, str(tree))
    sys.path.insert(1, str(Path(__file__).resolve().parent))
    import inputs
    import orjson
    from starlette.testclient import TestClient

    import webhook

    package = Path(webhook.__file__).resolve().parent
    if not package.is_relative_to(tree):
        raise SystemExit(f"webhook imported from {package}, not from {tree}")
    path = "/mutate" if args.mutate else "/validate"
    body = orjson.dumps(inputs.admission_review(inputs.big_training_pod(), "ml-research"))
    files: list[str] = []
    entered: Counter[str] = Counter()
    last: dict[int, str] = {}
    tracing = threading.Event()
    prefix = str(package) + os.sep

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not tracing.is_set():
            return
        filename = frame.f_code.co_filename
        if not filename.startswith(prefix):
            return
        name = "webhook/" + filename[len(prefix) :]
        thread = threading.get_ident()
        if last.get(thread) != name:
            last[thread] = name
            entered[name] += 1
            if name not in files:
                files.append(name)

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        with TestClient(_app(tree)) as client:
            headers = {"content-type": "application/json"}
            for _ in range(2):
                client.post(path, content=body, headers=headers)
            tracing.set()
            answer = client.post(path, content=body, headers=headers)
            tracing.clear()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    if answer.status_code != 200:
        raise SystemExit(f"POST {path}: HTTP {answer.status_code}")
    print(f"POST {path} in {tree} (11.6 KB training Pod), files of webhook/ in the order entered:")
    for name in files:
        print(f"  {entered[name]:4d}  {name}")
    transitions = sum(entered.values()) - 1
    print(f"{len(files)} files entered, {transitions} file-to-file transitions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""CLI: manifests per second of `trainguard check` on the corpus repeated to a few thousand documents.

The real CLI runs as a subprocess (`python -m webhook check DIR -o json`, YAML parsing included).
Its fixed cost (interpreter start-up, imports, loading and compiling the policies) is measured
separately, on a directory holding one small manifest, and subtracted; both figures are reported,
with the bare interpreter start-up for reference. Peak memory is the child's ru_maxrss (wait4).

    python tests/bench/bench_cli.py [--quick]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common
import servers
from common import log, median, table


def _run(argv: list[str], timeout: float = 600) -> tuple[float, int, int]:
    """(wall seconds, exit code, peak RSS kB) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=servers.python_env())
    deadline = start + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() > deadline:
            proc.kill()
            raise TimeoutError(" ".join(argv))
        time.sleep(0.005)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {stderr[-2000:]}")
    return wall, proc.returncode, usage.ru_maxrss


def build_tree(root: Path, target_docs: int) -> int:
    """Copies of the corpus files under `root` until it holds at least `target_docs` documents."""
    files = common.corpus_files()
    from webhook.documents import read_manifests

    per_copy = len(read_manifests([str(f) for f in files]))
    copies = max(1, -(-target_docs // per_copy))
    for c in range(copies):
        for f in files:
            dest = root / f"copy-{c:03d}" / f.parent.name / f.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
    return copies * per_copy


def run(quick: bool = False) -> dict[str, Any]:
    target = 500 if quick else 4000
    rounds = 2 if quick else 5
    check = [sys.executable, "-m", "webhook", "check", "-o", "json"]
    with tempfile.TemporaryDirectory(prefix="trainguard-bench-cli-") as tmp:
        big = Path(tmp) / "many"
        docs = build_tree(big, target)
        one = Path(tmp) / "one"
        one.mkdir()
        (one / "pod.yaml").write_text((common.shared_dir() / "corpus/kueue/kueue-pod.yaml").read_text())
        log(f"cli: {docs} documents, {rounds} rounds …")
        bare, fixed, full = [], [], []
        rss_full = []
        for _ in range(rounds):  # interleaved, so that the machine's mood hits all three alike
            bare.append(_run([sys.executable, "-c", "pass"])[0])
            fixed.append(_run([*check, str(one)])[0])
            wall, _, rss = _run([*check, str(big)])
            full.append(wall)
            rss_full.append(rss)
    t_bare, t_fixed, t_full = median(bare), median(fixed), median(full)
    raw = docs / t_full
    net = docs / (t_full - t_fixed)
    print(
        table(
            f"CLI: trainguard check -o json over {docs} documents "
            f"(the corpus x {docs // 85 or 1}; medians of {rounds})",
            ["what", "seconds", "manifests/s"],
            [
                ["python -c pass (interpreter start-up)", t_bare, float("nan")],
                ["check, one small manifest (start-up + imports + policy compile)", t_fixed, float("nan")],
                [f"check, {docs} documents", t_full, raw],
                ["  minus the fixed cost", t_full - t_fixed, net],
            ],
        )
    )
    print(f"peak RSS of the CLI over {docs} documents: {median(rss_full) / 1024:.1f} MB (ru_maxrss)\n")
    return {
        "cli_manifests_per_s": round(net, 1),
        "cli_manifests_per_s_raw": round(raw, 1),
        "cli_documents": docs,
        "cli_fixed_s": round(t_fixed, 3),
        "cli_python_startup_s": round(t_bare, 3),
        "cli_peak_rss_mb": round(median(rss_full) / 1024, 1),
    }


def main() -> int:
    return common.run_part(run, __doc__)


if __name__ == "__main__":
    raise SystemExit(main())

"""CLI: manifests per second of `trainguard check` on the corpus repeated (×20 by default, the bar).

The real CLI runs as a subprocess (`python -m webhook check DIR -o json`, YAML parsing included).
Its fixed cost (interpreter start-up, imports, loading and compiling the policies) is measured
separately, on a directory holding one small manifest, and subtracted; both figures are reported,
with the bare interpreter start-up for reference. Arms, run in turn in every round so that the
machine's load falls on all alike:

  - `default`: what a user gets (worker processes on inputs this large, one per CPU);
  - `-j 1`: the same code deciding in one process;
  - `before`: another tree's CLI with its defaults (`--before TREE`, e.g. an export of main).

The corpus copies are byte-identical documents and nothing in the CLI decides a document once for
its copies (each is read and decided afresh), so the figure holds for distinct documents too.
Wall seconds are medians over rounds; CPU seconds are the child's user + system time, its worker
processes included; peak RSS is the child's ru_maxrss (wait4: the largest of the process and the
workers it waited for).

    python tests/bench/bench_cli.py [--quick] [--copies N] [--rounds N] [--before TREE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import inputs
import measure
import servers
from measure import log, median, table

COPIES = 20  # DESIGN §5: the CLI ≥ 5,000 manifests/s on the corpus ×20


def _run(argv: list[str], env: dict[str, str], cwd: str, timeout: float = 600) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, peak RSS kB) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
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
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss


def build_tree(root: Path, copies: int) -> int:
    """`copies` copies of the corpus files under `root`; the number of documents they hold."""
    files = inputs.corpus_files()
    from webhook.documents import read_manifests

    per_copy = len(read_manifests([str(f) for f in files]))
    for c in range(copies):
        for f in files:
            dest = root / f"copy-{c:03d}" / f.parent.name / f.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
    return copies * per_copy


def _env(tree: Path | None) -> dict[str, str]:
    env = servers.python_env()
    if tree is not None:
        env["PYTHONPATH"] = str(tree.resolve())
    return env


def run(
    quick: bool = False, copies: int | None = None, rounds: int | None = None, before: Path | None = None
) -> dict[str, Any]:
    copies = copies or (5 if quick else COPIES)
    rounds = rounds or (2 if quick else 5)
    check = [sys.executable, "-m", "webhook", "check", "-o", "json"]
    arms: list[tuple[str, list[str], dict[str, str]]] = [
        ("default", check, _env(None)),
        ("-j 1", [*check, "-j", "1"], _env(None)),
    ]
    if before is not None:
        arms.append((f"before ({before})", check, _env(before)))
    with tempfile.TemporaryDirectory(prefix="trainguard-bench-cli-") as tmp:
        big = Path(tmp) / "many"
        docs = build_tree(big, copies)
        one = Path(tmp) / "one"
        one.mkdir()
        (one / "pod.yaml").write_text((inputs.shared_dir() / "corpus/kueue/kueue-pod.yaml").read_text())
        # The children run from an empty directory: `python -m` puts the working directory first on
        # sys.path, which would hide the tree PYTHONPATH names.
        cwd = Path(tmp) / "cwd"
        cwd.mkdir()
        log(f"cli: {docs} documents (the corpus x {copies}), {len(arms)} arms, {rounds} rounds; {_load()}")
        bare: list[float] = []
        fixed: dict[str, list[float]] = {name: [] for name, _, _ in arms}
        full: dict[str, list[float]] = {name: [] for name, _, _ in arms}
        cpu: dict[str, list[float]] = {name: [] for name, _, _ in arms}
        rss: dict[str, list[int]] = {name: [] for name, _, _ in arms}
        for _ in range(rounds):
            bare.append(_run([sys.executable, "-c", "pass"], _env(None), str(cwd))[0])
            for name, argv, env in arms:
                fixed[name].append(_run([*argv, str(one)], env, str(cwd))[0])
                wall, seconds, peak = _run([*argv, str(big)], env, str(cwd))
                full[name].append(wall)
                cpu[name].append(seconds)
                rss[name].append(peak)
        log(f"cli: done; {_load()}")
    rows = [["python -c pass (interpreter start-up)", median(bare), float("nan"), float("nan"), float("nan")]]
    figures: dict[str, tuple[float, float, float]] = {}
    for name, _, _ in arms:
        t_fixed, t_full = median(fixed[name]), median(full[name])
        raw, net = docs / t_full, docs / (t_full - t_fixed)
        figures[name] = (t_fixed, raw, net)
        rows += [
            [
                f"{name}: one small manifest (start-up + imports + policy compile)",
                t_fixed,
                float("nan"),
                float("nan"),
                float("nan"),
            ],
            [f"{name}: {docs} documents", t_full, median(cpu[name]), median(rss[name]) / 1024, raw],
            [f"{name}:   minus the fixed cost", t_full - t_fixed, float("nan"), float("nan"), net],
        ]
    print(
        table(
            f"CLI: trainguard check -o json over {docs} documents (the corpus x {copies}; medians of {rounds})",
            ["what", "wall s", "CPU s", "peak RSS MB", "manifests/s"],
            rows,
        )
    )
    split = manifest_split(3 if quick else 9)
    print(_split_table(split))
    t_fixed, raw, net = figures["default"]
    out: dict[str, Any] = {
        "cli_manifests_per_s": round(net, 1),
        "cli_manifests_per_s_raw": round(raw, 1),
        "cli_manifests_per_s_one_process": round(figures["-j 1"][2], 1),
        "cli_documents": docs,
        "cli_fixed_s": round(t_fixed, 3),
        "cli_python_startup_s": round(median(bare), 3),
        "cli_peak_rss_mb": round(median(rss["default"]) / 1024, 1),
        "cli_split_us_per_manifest": {k: round(v, 1) for k, v in split.items() if k != "manifests"},
    }
    if before is not None:
        name = f"before ({before})"
        out["cli_manifests_per_s_before"] = round(figures[name][2], 1)
        out["cli_fixed_s_before"] = round(figures[name][0], 3)
        print(
            f"net manifests/s, default / before: {net / figures[name][2]:.2f}x; "
            f"-j 1 / before: {figures['-j 1'][2] / figures[name][2]:.2f}x\n"
        )
    return out


def manifest_split(rounds: int = 9) -> dict[str, float]:
    """In process, where one manifest's CPU goes in `trainguard check` (one process): reading the
    files and YAML, the engine's review (mutate, then validate the mutated object), the CEL
    runtime's share of it (evaluation and the conversion of what it reads), the records and the
    JSON out. CPU µs per manifest over one copy of the corpus, the least of `rounds` passes; each
    pass decides objects decoded afresh, as each copy in the CLI is (the engine remembers some
    things by object identity, which a loop over the same objects would hit)."""
    import dataclasses

    import orjson

    from webhook.cli._file_engine import Context, decide_document, engine_for
    from webhook.cli.check import result_record, summary
    from webhook.config import load_config
    from webhook.documents import collect_inputs, manifest_inputs
    from webhook.engine import default_policies_dir, load_policy_set

    manifests = manifest_inputs([str(f) for f in inputs.corpus_files()])
    found = collect_inputs(manifests)
    policies = load_policy_set([default_policies_dir()], "cel-expr-python")
    engine = engine_for(policies, load_config(), Context.of(found.documents), ())
    docs = found.documents
    n = len(docs)

    def afresh() -> list[Any]:
        return [dataclasses.replace(d, data=orjson.loads(orjson.dumps(d.data))) for d in docs]

    def decide(batch: list[Any]) -> list[Any]:
        return [decide_document(engine, d, "default") for d in batch]

    decisions = decide(afresh())
    records = [result_record(d, x) for d, x in zip(docs, decisions, strict=True)]

    def least(run: Any, fresh: bool = False) -> float:
        best = float("inf")
        for _ in range(rounds):
            batch = afresh() if fresh else docs
            start = time.thread_time()
            run(batch)
            best = min(best, time.thread_time() - start)
        return best * 1e6 / n

    out = {
        "read_yaml": least(lambda _: collect_inputs(manifests)),
        "review": least(decide, fresh=True),
        "records_out": least(
            lambda batch: orjson.dumps(
                {"results": [result_record(d, x) for d, x in zip(batch, decisions, strict=True)]}
                | {"summary": summary(records, [])},
                option=orjson.OPT_INDENT_2,
            )
        ),
    }
    cel = float("inf")
    for _ in range(rounds):
        batch = afresh()
        with measure.cel_runtime_seconds() as in_cel:
            decide(batch)
        cel = min(cel, in_cel[0])
    out["cel"] = cel * 1e6 / n
    out["manifests"] = n
    return out


def _split_table(split: dict[str, float]) -> str:
    cpus = os.cpu_count() or 1
    total = split["read_yaml"] + split["review"] + split["records_out"]
    return table(
        f"Where one manifest's CPU goes (in process, one copy of the corpus: {split['manifests']:.0f} "
        "manifests; µs per manifest, the least of the passes)",
        ["part", "µs"],
        [
            ["reading the files and YAML", split["read_yaml"]],
            ["the engine's review (mutate, then validate)", split["review"]],
            ["  of which the CEL runtime (evaluation and conversion)", split["cel"]],
            [
                "  of which the Python around it (adapters, views, patches, bookkeeping)",
                split["review"] - split["cel"],
            ],
            ["the records and the JSON out", split["records_out"]],
            ["all of it", total],
            [
                f"what 5,000 manifests/s allows per manifest on {cpus} CPUs, perfectly shared",
                cpus / 5000 * 1e6,
            ],
        ],
    )


def _load() -> str:
    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--copies", type=int, help=f"copies of the corpus (default {COPIES}; --quick 5)")
    parser.add_argument("--rounds", type=int, help="rounds of every arm (default 5; --quick 2)")
    parser.add_argument(
        "--before", type=Path, metavar="TREE", help="also run another tree's CLI, e.g. main's"
    )
    args = parser.parse_args()
    print(json.dumps(run(args.quick, args.copies, args.rounds, args.before)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

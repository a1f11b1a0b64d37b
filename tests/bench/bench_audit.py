"""Cluster audit at scale: N workloads in a real etcd, `trainguard audit` and `serve --audit`.

    python tests/bench/bench_audit.py --workloads 10000 --namespaces 20

Starts its own control plane (tests/e2e: kube-apiserver + etcd, the training CRDs and the report
CRDs), creates the workloads through the API (a mix of kinds, round-robin over the namespaces, no
webhook registered), then measures:

* `trainguard audit -A -o json`: wall time and peak RSS of the process (os.wait4), median of
  `--runs`;
* `trainguard serve --audit`: seconds from the process start until the PolicyReports of every
  benchmark namespace hold every result the CLI found (polled once a second), and its peak RSS;
* report bytes per namespace (the stored objects, managedFields included) and shards per namespace.

Not a test: nothing here asserts a bar. Prints a Markdown table and, with --json-out, the figures.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.e2e.controlplane import HOST, clean_environment, free_port, start_with_crds  # noqa: E402

TEMPLATES = [
    REPO / "deploy" / "examples" / "finetune-single-node-a.yaml",  # batch Job
    REPO / "deploy" / "examples" / "volcano-gang-b.yaml",  # Volcano Job
    REPO / "deploy" / "examples" / "lws-inference.yaml",  # LeaderWorkerSet
    REPO / "deploy" / "examples" / "pytorchjob-elastic-c.yaml",  # PyTorchJob (compliant)
    REPO / "deploy" / "counterexamples" / "pytorchjob-no-gang.yaml",  # PyTorchJob (fails)
    REPO / "deploy" / "counterexamples" / "bare-torchrun-pod.yaml",  # bare Pod (fails)
    REPO / "deploy" / "counterexamples" / "training-on-inference-pool.yaml",  # JobSet (fails)
]


def templates() -> list[dict[str, Any]]:
    return [_quantities_as_strings(yaml.safe_load(p.read_text(encoding="utf-8"))) for p in TEMPLATES]


def _quantities_as_strings(node: Any) -> Any:
    """`nvidia.com/gpu: 8` as "8": the client validates a Pod body against its model (quantities are
    strings there), which the API server itself would accept either way."""
    if isinstance(node, dict):
        return {
            k: {q: str(v) for q, v in val.items()}
            if k in ("limits", "requests") and isinstance(val, dict)
            else _quantities_as_strings(val)
            for k, val in node.items()
        }
    if isinstance(node, list):
        return [_quantities_as_strings(v) for v in node]
    return node


def create_all(api: Any, n: int, namespaces: list[str], concurrency: int) -> float:
    from kubernetes import client

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    base = templates()

    def create(i: int) -> None:
        obj = copy.deepcopy(base[i % len(base)])
        ns = namespaces[i % len(namespaces)]
        obj["metadata"]["name"] = f"{obj['metadata']['name']}-{i:05d}"
        obj["metadata"]["namespace"] = ns
        group, _, version = obj["apiVersion"].rpartition("/")
        if obj["kind"] == "Pod":
            core.create_namespaced_pod(ns, obj)
            return
        plural = {
            "Job": "jobs",
            "LeaderWorkerSet": "leaderworkersets",
            "PyTorchJob": "pytorchjobs",
            "JobSet": "jobsets",
        }[obj["kind"]]
        custom.create_namespaced_custom_object(group, version, ns, plural, obj)

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(concurrency) as pool:
        for future in concurrent.futures.as_completed([pool.submit(create, i) for i in range(n)]):
            future.result()
    return time.monotonic() - start


def env() -> dict[str, str]:
    e = clean_environment()
    e["PYTHONPATH"] = str(REPO)
    e.pop("KUBECONFIG", None)
    return e


def run_measured(argv: list[str], stdout: Any) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit code) of one child process."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=stdout, stderr=subprocess.PIPE, env=env(), cwd=REPO)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def report_state(plane: Any, namespaces: set[str]) -> tuple[int, dict[str, tuple[int, int]]]:
    """(results in the benchmark namespaces' reports, namespace -> (bytes, shards))."""
    listing = plane.get_json("/apis/wgpolicyk8s.io/v1alpha2/policyreports") or {"items": []}
    results, per_ns = 0, {}
    for report in listing["items"]:
        ns = report["metadata"]["namespace"]
        if ns not in namespaces:
            continue
        results += len(report.get("results") or [])
        size, shards = per_ns.get(ns, (0, 0))
        per_ns[ns] = (size + len(json.dumps(report, separators=(",", ":"))), shards + 1)
    return results, per_ns


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, default=10_000)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=8, help="parallel creates (default 8)")
    parser.add_argument("--runs", type=int, default=3, help="CLI runs, median reported (default 3)")
    parser.add_argument("--serve-timeout", type=float, default=1800.0)
    parser.add_argument("--json-out", type=Path)
    args = parser.parse_args()

    from webhook.audit.cluster import api_client

    figures: dict[str, Any] = {"workloads": args.workloads, "namespaces": args.namespaces}
    figures["load_before"] = os.getloadavg()
    plane = start_with_crds()
    work = Path(tempfile.mkdtemp(prefix="trainguard-bench-audit-"))
    server: subprocess.Popen[bytes] | None = None
    try:
        api = api_client(kubeconfig=str(plane.kubeconfig))
        namespaces = [f"bench-{i:02d}" for i in range(args.namespaces)]
        for ns in [*namespaces, "bench-system"]:
            plane.kubectl("create", "namespace", ns)
        figures["create_seconds"] = round(create_all(api, args.workloads, namespaces, args.concurrency), 1)
        print(f"created {args.workloads} workloads in {figures['create_seconds']} s", file=sys.stderr)

        cli = [
            sys.executable,
            "-m",
            "webhook",
            "audit",
            "--kubeconfig",
            str(plane.kubeconfig),
            "-A",
            "-o",
            "json",
        ]
        walls, rss = [], []
        out = work / "audit.json"
        for _ in range(args.runs):
            with out.open("wb") as fh:
                wall, peak, code = run_measured(cli, fh)
            if code not in (0, 1):
                raise SystemExit(f"trainguard audit exited {code}")
            walls.append(wall)
            rss.append(peak)
        audit = json.loads(out.read_text())
        ours = [r for r in audit["results"] if r["namespace"] in namespaces]
        expected = sum(1 for r in ours for x in r["results"] if x["category"] == "validation")
        figures["cli"] = {
            "wall_seconds_median": round(statistics.median(walls), 2),
            "wall_seconds": [round(w, 2) for w in walls],
            "peak_rss_mib_median": round(statistics.median(rss), 1),
            "workloads_audited": len(ours),
            "failing": sum(1 for r in ours if r["verdict"] == "fail"),
            "results": expected,
        }
        print(f"cli: {figures['cli']}", file=sys.stderr)

        certs = work / "certs"
        subprocess.run(
            [sys.executable, "-m", "webhook", "certs", "--out", str(certs), "--host", HOST],
            check=True,
            env=env(),
            capture_output=True,
        )
        log = (work / "serve.log").open("wb")
        start = time.monotonic()
        server = subprocess.Popen(
            [
                sys.executable, "-m", "webhook", "serve", "--audit",
                "--tls-cert", str(certs / "tls.crt"), "--tls-key", str(certs / "tls.key"),
                "--host", HOST, "--port", str(free_port()),
                "--kubeconfig", str(plane.kubeconfig), "--webhook-namespace", "bench-system",
            ],
            stdout=log, stderr=subprocess.STDOUT, env=env(), cwd=REPO,
        )  # fmt: skip
        wanted = set(namespaces)
        while True:
            results, per_ns = report_state(plane, wanted)
            if results == expected and set(per_ns) == wanted:
                break
            if server.poll() is not None or time.monotonic() - start > args.serve_timeout:
                raise SystemExit(
                    f"serve --audit did not complete the reports ({results}/{expected}); see {log.name}"
                )
            time.sleep(1.0)
        sizes = sorted(size for size, _ in per_ns.values())
        figures["serve"] = {
            "start_to_reports_complete_seconds": round(time.monotonic() - start, 1),
            "peak_rss_mib": round(peak_rss_mib(server.pid), 1),
            "report_bytes_per_namespace": {
                "min": sizes[0],
                "median": int(statistics.median(sizes)),
                "max": sizes[-1],
            },
            "shards_per_namespace_max": max(shards for _, shards in per_ns.values()),
        }
        print(f"serve: {figures['serve']}", file=sys.stderr)
    finally:
        if server is not None:
            server.kill()
            server.wait()
        plane.stop()
    figures["load_after"] = os.getloadavg()
    print(
        "\n| workloads | namespaces | CLI wall (median) | CLI peak RSS | serve --audit start → reports complete "
        "| serve peak RSS | report bytes / namespace (min / median / max) |\n|---|---|---|---|---|---|---|\n"
        f"| {args.workloads:,} | {args.namespaces} | {figures['cli']['wall_seconds_median']} s "
        f"| {figures['cli']['peak_rss_mib_median']} MiB | {figures['serve']['start_to_reports_complete_seconds']} s "
        f"| {figures['serve']['peak_rss_mib']} MiB | {sizes[0]:,} / {int(statistics.median(sizes)):,} / {sizes[-1]:,} |"
    )
    print(f"load average before {figures['load_before']}, after {figures['load_after']}")
    if args.json_out:
        args.json_out.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

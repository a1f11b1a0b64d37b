"""Through a real API server: the latency trainguard's webhooks add to creating Pods and Jobs.

One control plane (etcd + kube-apiserver from tests/e2e/controlplane.py), one `trainguard serve`
and one no-op webhook (noop_app.py, the HTTP floor) on 127.0.0.1. Two pairs of webhook
configurations, rendered by `trainguard webhook-config --url` and applied as a cluster admin
would, split the namespaces with `--exclude-namespace`: "on" is sent to trainguard, "noop" to the
no-op webhook, "off" to neither. The same API server, client and objects are measured in the
three, batch by batch, alternating. The client is the `kubernetes` Python client, one ApiClient
shared by a thread pool per concurrency level; its own cost is in every arm alike. trainguard's
request counter confirms that "on" reached it and the others did not; the API server's own
histogram of webhook call durations says what each call cost as it saw it.

A second client measures what a user's `kubectl apply` feels, without the Python client's own
cost and jitter: the "raw" arm keeps one persistent HTTP/1.1 connection per client thread to the
API server, authenticated with the kubeconfig's client certificate, and POSTs the training Pod
with `dryRun=All` (every webhook is called, nothing is written to etcd), at concurrency 1 and 8,
the three namespaces alternating batch by batch. Its table gives, per concurrency, p50 and p99 of
each arm and what trainguard adds over the no-op webhooks (the same two calls, deciding nothing)
and over no webhook at all. A fourth arm, "patch", has a second no-op server whose mutating call
answers with the very patch trainguard answers for this Pod: what the API server itself spends
applying a patch (decode, apply, re-decode, default the object) shows as patch minus noop, and
what trainguard's deciding costs as on minus patch. A fifth arm, "noop1", sends the namespace to
the no-op's validating webhook alone: DESIGN §5's bar is what trainguard's two calls add over ONE
no-op webhook call (on minus noop1), and patch minus noop1 is the least any webhook can add there
that answers both calls and patches this Pod, however little it spends deciding. The load average
is printed before and after, and each webhook call as the API server timed it, beside
trainguard's own handler time.

    python tests/bench/bench_apiserver.py [--quick] [--raw-only]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import http.client
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import inputs
import servers
import yaml
from inputs import REPO
from measure import log, median, percentile, table

RAW_CONCURRENCIES = (1, 8)

sys.path.append(str(REPO))  # tests.e2e (after any PYTHONPATH, which may name other code)


def _objects() -> dict[str, dict[str, Any]]:
    pod = inputs.big_training_pod()
    meta = pod["metadata"]
    for key in ("name", "namespace", "uid", "creationTimestamp", "managedFields"):
        meta.pop(key, None)
    meta["generateName"] = "llama-70b-pretrain-worker-"
    pod["spec"].pop("hostname", None)
    job: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        # A name, not generateName: the topology mutation derives a label value from the name, and
        # from a generateName ("finetune-") that value is not a valid label (the API server refuses).
        "metadata": {
            "name": "finetune",
            "labels": {"trainguard.dev/tier": "guaranteed", "kueue.x-k8s.io/queue-name": "research"},
        },
        "spec": {
            "parallelism": 4,
            "completions": 4,
            "completionMode": "Indexed",
            "backoffLimit": 3,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [copy.deepcopy(pod["spec"]["containers"][0])],
                    "volumes": copy.deepcopy(pod["spec"]["volumes"]),
                }
            },
        },
    }
    job["spec"]["template"]["spec"]["containers"][0]["args"][0] = "--nnodes=4"
    return {"Pod": pod, "Job": job}


def _metric(url: str, ca: Path, name: str) -> float:
    context = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(f"{url}/metrics", context=context, timeout=5) as resp:
        text = resp.read().decode()
    prefix = name if "{" in name else name + "{"  # a name, or a name and the start of its labels
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


class RawClient:
    """One persistent HTTP/1.1 connection to the API server, with the kubeconfig's client certificate.

    http.client rather than the kubernetes client: nothing but a request and its response per
    create, so the figures are the API server's and the webhooks', not a client library's.
    """

    def __init__(self, plane: Any) -> None:
        pki = Path(plane.ca_file).parent
        context = ssl.create_default_context(cafile=str(plane.ca_file))
        context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self._connect = lambda: http.client.HTTPSConnection(
            "127.0.0.1", plane.port, context=context, timeout=60
        )
        self.connection = self._connect()

    def create(self, namespace: str, body: bytes) -> float:
        """Milliseconds for one dry-run create; RuntimeError unless the API server says 201."""
        t0 = time.perf_counter()
        self.connection.request(
            "POST",
            f"/api/v1/namespaces/{namespace}/pods?dryRun=All",
            body=body,
            headers={"Content-Type": "application/json", "Accept": "application/json"},
        )
        response = self.connection.getresponse()
        answer = response.read()
        elapsed = (time.perf_counter() - t0) * 1000
        if response.status != 201:
            raise RuntimeError(f"create in {namespace}: HTTP {response.status}: {answer[:300]!r}")
        return elapsed

    def close(self) -> None:
        self.connection.close()


def _raw_batch(
    pool: concurrent.futures.ThreadPoolExecutor, clients: list[RawClient], ns: str, body: bytes, n: int
) -> list[float]:
    """Each client, on its own thread, creates `n` times in a row; every latency, in ms."""

    def one_client(client: RawClient) -> list[float]:
        return [client.create(ns, body) for _ in range(n)]

    return [ms for part in pool.map(one_client, clients, timeout=600) for ms in part]


def run_raw(
    plane: Any,
    pod: dict[str, Any],
    arms: tuple[tuple[str, str], ...],
    quick: bool,
    webhooks: dict[str, servers.Server],
) -> dict[str, Any]:
    """The raw arm: persistent connections, dry-run Pod creates, concurrency 1 and 8, arms alternating.

    Beside the latencies, each webhook server's CPU time per call over its own batches: on a shared
    machine, wall time is stretched by whoever else wants the CPUs, CPU time much less.
    """
    rounds = 2 if quick else 5
    # Creates per client thread per batch: 500 samples per arm at concurrency 1, 1,000 at 8.
    per_thread = {1: 40, 8: 10} if quick else {1: 100, 8: 25}
    body = json.dumps(pod).encode()
    latencies: dict[tuple[str, int], list[float]] = {}
    cpu: dict[str, float] = dict.fromkeys(webhooks, 0.0)
    load_before = os.getloadavg()
    seen: dict[int, dict[str, tuple[int, float]]] = {}
    tg = webhooks["on"]
    for conc in RAW_CONCURRENCIES:
        seen_before = _apiserver_webhook_seconds(plane)
        own_before = _histogram(tg.url, tg.ca, "trainguard_admission_duration_seconds")
        clients = [RawClient(plane) for _ in range(conc)]
        try:
            with concurrent.futures.ThreadPoolExecutor(conc) as pool:
                for _, ns in arms:  # warm-up: connections, caches, the webhooks' first requests
                    _raw_batch(pool, clients, ns, body, per_thread[conc])
                for _ in range(rounds):
                    for arm, ns in arms:
                        before = webhooks[arm].cpu_seconds() if arm in webhooks else 0.0
                        latencies.setdefault((arm, conc), []).extend(
                            _raw_batch(pool, clients, ns, body, per_thread[conc])
                        )
                        if arm in webhooks:
                            cpu[arm] += webhooks[arm].cpu_seconds() - before
        finally:
            for client in clients:
                client.close()
        seen[conc] = _calls_seen(seen_before, _apiserver_webhook_seconds(plane))
        own = _histogram(tg.url, tg.ca, "trainguard_admission_duration_seconds")
        calls = int(own[1] - own_before[1])
        seen[conc]["trainguard's own handler time (both endpoints)"] = (
            calls,
            (own[0] - own_before[0]) / calls * 1000,
        )
        log(f"apiserver: raw client, concurrency {conc} done")
    load_after = os.getloadavg()
    rows = []
    summary: dict[str, Any] = {}
    names = [arm for arm, _ in arms]
    for conc in RAW_CONCURRENCIES:
        p = {arm: _p50_p99(latencies[(arm, conc)]) for arm in names}
        added = {base: (p["on"][0] - p[base][0], p["on"][1] - p[base][1]) for base in names if base != "on"}
        rows.append(
            [conc, len(latencies[("on", conc)]), *(x for arm in names for x in p[arm])]
            + [x for base in added for x in added[base]]
        )
        summary[f"raw_c{conc}"] = {
            "n_per_arm": len(latencies[("on", conc)]),
            "p50_ms": {k: round(v[0], 2) for k, v in p.items()},
            "p99_ms": {k: round(v[1], 2) for k, v in p.items()},
            **{
                f"added_over_{base}_ms": {"p50": round(v[0], 2), "p99": round(v[1], 2)}
                for base, v in added.items()
            },
        }
    print(
        table(
            "API server, raw keep-alive client: dry-run Pod create latency, ms; no webhook (off), one no-op "
            "webhook call (noop1), two no-op webhook calls (noop), two no-op calls whose mutating one answers "
            f"with trainguard's patch for this Pod (patch), trainguard's two calls (on); {rounds} alternating "
            "rounds; load average "
            f"{' '.join(f'{x:.2f}' for x in load_before)} before, {' '.join(f'{x:.2f}' for x in load_after)} after",
            ["conc", "n/arm"]
            + [f"{q} {arm}" for arm in names for q in ("p50", "p99")]
            + [f"{q} on-{base}" for base in added for q in ("p50", "p99")],
            rows,
        )
    )
    if "noop1" in names and "patch" in names:
        # The bar's floor: a webhook pair that decides nothing but answers the same patch.
        floor = {
            conc: (
                percentile(sorted(latencies[("patch", conc)]), 50)
                - percentile(sorted(latencies[("noop1", conc)]), 50),
                percentile(sorted(latencies[("patch", conc)]), 99)
                - percentile(sorted(latencies[("noop1", conc)]), 99),
            )
            for conc in RAW_CONCURRENCIES
        }
        print(
            "the bar's floor, what two no-op calls answering trainguard's patch add over one no-op call "
            "(patch - noop1), p50 / p99 ms: "
            + ", ".join(f"c{conc} {v[0]:+.2f} / {v[1]:+.2f}" for conc, v in floor.items())
        )
        for conc, v in floor.items():
            summary[f"raw_c{conc}"]["floor_patch_over_noop1_ms"] = {
                "p50": round(v[0], 2),
                "p99": round(v[1], 2),
            }
    # Two calls per create (mutating, then validating) in every webhook arm but noop1's one.
    calls = {
        arm: (1 if arm == "noop1" else 2) * sum(len(latencies[(arm, c)]) for c in RAW_CONCURRENCIES)
        for arm in webhooks
    }
    per_call = {arm: cpu[arm] / calls[arm] * 1000 for arm in webhooks}
    print(
        "webhook server CPU per call (raw arm, all concurrencies): "
        + ", ".join(f"{arm} {ms:.3f} ms over {calls[arm]} calls" for arm, ms in per_call.items())
    )
    summary["raw_server_cpu_ms_per_call"] = {arm: round(ms, 3) for arm, ms in per_call.items()}
    # What each call cost as the API server timed it (from sending the review to reading the
    # answer, warm-up included): set beside the create latencies, it splits what trainguard adds
    # into its calls and what the API server does with their answers.
    print(
        table(
            "Webhook calls as the API server timed them in the raw arm (warm-up included), mean ms per call",
            ["conc", "webhook", "calls", "mean ms"],
            [[conc, name, n, ms] for conc, calls in seen.items() for name, (n, ms) in calls.items()],
        )
    )
    summary["raw_apiserver_webhook_call_ms"] = {
        f"c{conc}": {name: round(ms, 3) for name, (_, ms) in calls.items()} for conc, calls in seen.items()
    }
    summary["raw_loadavg"] = {
        "before": [round(x, 2) for x in load_before],
        "after": [round(x, 2) for x in load_after],
    }
    return summary


def run(quick: bool = False, raw_only: bool = False) -> dict[str, Any]:
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config

    from tests.e2e.binaries import BuildError, ensure_binaries
    from tests.e2e.controlplane import ControlPlane

    try:
        binaries = ensure_binaries()
    except BuildError as exc:
        print(f"API server benchmark skipped: the kube-apiserver/etcd binaries cannot be built: {exc}\n")
        return {"apiserver_skipped": str(exc)[:200]}
    concurrencies = [1, 8] if quick else [1, 8, 32]
    per_batch = {1: 12, 8: 32} if quick else {1: 40, 8: 120, 32: 192}
    rounds = 1 if quick else 3
    objects = _objects()
    latencies: dict[tuple[str, str, int], list[float]] = {}
    arms = (("off", "bench-off"), ("noop", "bench-noop"), ("on", "bench-on"))
    with tempfile.TemporaryDirectory(prefix="trainguard-bench-apiserver-") as tmp:
        work = Path(tmp)
        certs = servers.make_certs(work / "certs")
        tg = servers.trainguard_server(servers.free_port(), certs, work / "trainguard.log")
        noop = servers.noop_server(servers.free_port(), certs, work / "noop.log")
        patch_file = work / "patch.json"
        patch_file.write_bytes(json.dumps(_trainguard_patch(objects["Pod"], "bench-patch")).encode())
        patching = servers.noop_server(servers.free_port(), certs, work / "patch.log", patch_file)
        namespaces = ("bench-off", "bench-noop", "bench-on", "bench-patch", "bench-noop1")
        log("apiserver: starting etcd + kube-apiserver …")
        with ControlPlane(binaries) as plane, tg, noop, patching:
            # The "patch" webhooks serve only the raw arm: their patch is the Pod's, not the Job's;
            # "noop1" too (the no-op's validating webhook alone: the bar's one no-op call).
            for name, url, own in (
                ("trainguard", tg.url, "bench-on"),
                ("noop", noop.url, "bench-noop"),
                ("patch", patching.url, "bench-patch"),
                ("noop1", noop.url, "bench-noop1"),
            ):
                others = [ns for ns in namespaces if ns != own]
                excluded = [arg for ns in others for arg in ("--exclude-namespace", ns)]
                rendered = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "webhook",
                        "webhook-config",
                        "--certs",
                        str(certs),
                        "--url",
                        url,
                        "--name",
                        name,
                        *excluded,
                        "-o",
                        "yaml",
                    ],
                    check=True,
                    capture_output=True,
                    text=True,
                    env=servers.python_env(),
                    cwd=servers.NEUTRAL_DIR,
                    timeout=60,
                ).stdout
                if (
                    name != "trainguard"
                ):  # own webhook names, so that the API server's metrics tell them apart
                    docs = [
                        doc
                        for doc in yaml.safe_load_all(rendered)
                        if name != "noop1" or doc["kind"] == "ValidatingWebhookConfiguration"
                    ]
                    for doc in docs:
                        for hook in doc.get("webhooks", []):
                            hook["name"] = hook["name"].replace(".trainguard.dev", f".{name}.trainguard.dev")
                    rendered = yaml.safe_dump_all(docs)
                plane.kubectl("apply", "-f", "-", input=rendered)
            for ns in namespaces:
                plane.kubectl("create", "namespace", ns)
            k8s_config.load_kube_config(config_file=str(plane.kubeconfig))
            configuration = k8s.Configuration.get_default_copy()
            configuration.connection_pool_maxsize = max(concurrencies) + 4
            api_client = k8s.ApiClient(configuration)
            core, batch = k8s.CoreV1Api(api_client), k8s.BatchV1Api(api_client)
            serial = iter(range(10**9))

            def create(kind: str, ns: str) -> float:
                body = objects[kind]
                if kind == "Job":
                    body = {**body, "metadata": {**body["metadata"], "name": f"finetune-{next(serial)}"}}
                t0 = time.perf_counter()
                if kind == "Pod":
                    core.create_namespaced_pod(ns, body)
                else:
                    batch.create_namespaced_job(ns, body)
                return (time.perf_counter() - t0) * 1000

            def batch_run(kind: str, ns: str, conc: int, n: int) -> list[float]:
                with concurrent.futures.ThreadPoolExecutor(conc) as pool:
                    return list(pool.map(lambda _: create(kind, ns), range(n), timeout=300))

            # Warm-up: connections, the API server's caches, the webhooks' first requests; and
            # wait until the API server's webhook informer has the configurations.
            deadline = time.monotonic() + 60
            before = _metric(tg.url, tg.ca, "trainguard_admission_requests_total")
            while time.monotonic() < deadline:
                create("Pod", "bench-on")
                if _metric(tg.url, tg.ca, "trainguard_admission_requests_total") > before:
                    break
                time.sleep(0.5)
            else:
                raise RuntimeError("the API server never called the webhook")
            c0 = _metric(tg.url, tg.ca, "trainguard_admission_requests_total")
            raw = run_raw(
                plane,
                objects["Pod"],
                (arms[0], ("noop1", "bench-noop1"), *arms[1:], ("patch", "bench-patch")),
                quick,
                {"on": tg, "noop": noop, "patch": patching, "noop1": noop},
            )
            raw["raw_trainguard_calls"] = _metric(tg.url, tg.ca, "trainguard_admission_requests_total") - c0
            # Whether the validating calls found the mutating calls' adaptations (trees that keep
            # them), and were answered with the decision made ahead for them (trees that make one)
            for key, what, counter, results in (
                ("raw_adaptations_reused", "adaptation reused", "adaptations_reused", ("hit", "miss")),
                ("raw_decided_ahead", "decided ahead", "validations_decided_ahead", ("used", "not-used")),
            ):
                counts = {
                    r: _metric(tg.url, tg.ca, f'trainguard_{counter}_total{{result="{r}"') for r in results
                }
                print(
                    f"trainguard's validating calls, {what}: {counts[results[0]]:.0f}, not: {counts[results[1]]:.0f}"
                )
                raw[key] = counts
            if raw_only:
                api_client.close()
                return raw
            for kind in objects:
                for _, ns in arms:
                    batch_run(kind, ns, 4, 20)
            webhook_before = _apiserver_webhook_seconds(plane)
            calls: dict[str, float] = {}
            for r in range(rounds):
                for conc in concurrencies:
                    for kind in objects:
                        for arm, ns in arms:
                            c0 = _metric(tg.url, tg.ca, "trainguard_admission_requests_total")
                            latencies.setdefault((kind, arm, conc), []).extend(
                                batch_run(kind, ns, conc, per_batch[conc])
                            )
                            calls[arm] = (
                                calls.get(arm, 0)
                                + _metric(tg.url, tg.ca, "trainguard_admission_requests_total")
                                - c0
                            )
                log(f"apiserver: round {r + 1}/{rounds} done")
            webhook_after = _apiserver_webhook_seconds(plane)
            own = _histogram(tg.url, tg.ca, "trainguard_admission_duration_seconds")
            api_client.close()
    rows = []
    overhead: dict[str, list[float]] = {"p50": [], "p99": [], "p50_noop": [], "p99_noop": []}
    for conc in concurrencies:
        for kind in objects:
            off, nop, on = (sorted(latencies[(kind, arm, conc)]) for arm in ("off", "noop", "on"))
            p50, p99 = percentile(on, 50) - percentile(off, 50), percentile(on, 99) - percentile(off, 99)
            overhead["p50"].append(p50)
            overhead["p99"].append(p99)
            overhead["p50_noop"].append(percentile(on, 50) - percentile(nop, 50))
            overhead["p99_noop"].append(percentile(on, 99) - percentile(nop, 99))
            rows.append(
                [
                    kind,
                    conc,
                    len(on),
                    percentile(off, 50),
                    percentile(nop, 50),
                    percentile(on, 50),
                    p50,
                    percentile(off, 99),
                    percentile(nop, 99),
                    percentile(on, 99),
                    p99,
                ]
            )
    print(
        table(
            "API server: create latency, ms; webhooks not called (off), no-op webhooks (noop), "
            f"trainguard (on); "
            f"{rounds} alternating rounds",
            [
                "kind",
                "conc",
                "n/arm",
                "p50 off",
                "p50 noop",
                "p50 on",
                "p50 added",
                "p99 off",
                "p99 noop",
                "p99 on",
                "p99 added",
            ],
            rows,
        )
    )
    on_creates = sum(len(v) for (k, a, c), v in latencies.items() if a == "on")
    per_request = calls.get("on", 0) / max(1, on_creates)
    print(
        f"trainguard calls per create: on {per_request:.2f} (mutate + validate), others "
        f"{calls.get('off', 0) + calls.get('noop', 0):.0f} in total"
    )
    call_rows = []
    for key in sorted(webhook_after):
        s_after, n_after = webhook_after[key]
        s_before, n_before = webhook_before.get(key, (0.0, 0.0))
        n = n_after - n_before
        if n > 0:
            call_rows.append([key, int(n), (s_after - s_before) / n * 1000])
    if own[1]:
        call_rows.append(
            ["trainguard's own handler time (its histogram, all calls)", int(own[1]), own[0] / own[1] * 1000]
        )
    print(
        table(
            "Webhook calls as the API server timed them (mean ms per call)",
            ["webhook", "calls", "mean ms"],
            call_rows,
        )
    )
    return {
        "apiserver_p50_overhead_ms": round(median(overhead["p50"]), 3),
        "apiserver_p99_overhead_ms": round(median(overhead["p99"]), 3),
        "apiserver_p99_overhead_worst_ms": round(max(overhead["p99"]), 3),
        "apiserver_p50_overhead_vs_noop_ms": round(median(overhead["p50_noop"]), 3),
        "apiserver_p99_overhead_vs_noop_ms": round(median(overhead["p99_noop"]), 3),
        "apiserver_rows": [
            {
                "kind": r[0],
                "concurrency": r[1],
                "p50_off": round(r[3], 2),
                "p50_noop": round(r[4], 2),
                "p50_on": round(r[5], 2),
                "p99_off": round(r[7], 2),
                "p99_noop": round(r[8], 2),
                "p99_on": round(r[9], 2),
            }
            for r in rows
        ],
        "apiserver_webhook_call_ms": {r[0]: round(r[2], 3) for r in call_rows},
        "apiserver_webhook_calls_per_create": round(per_request, 2),
        **raw,
    }


def _apiserver_webhook_seconds(plane: Any) -> dict[str, tuple[float, float]]:
    """webhook name -> (sum seconds, count) of apiserver_admission_webhook_admission_duration_seconds."""
    status, raw = plane._get("/metrics")
    out: dict[str, list[float]] = {}
    for line in raw.decode().splitlines():
        for suffix, index in (("_sum{", 0), ("_count{", 1)):
            prefix = "apiserver_admission_webhook_admission_duration_seconds" + suffix
            if line.startswith(prefix):
                name = line.split('name="', 1)[1].split('"', 1)[0]
                out.setdefault(name, [0.0, 0.0])[index] += float(line.rsplit(" ", 1)[1])
    return {k: (v[0], v[1]) for k, v in out.items()}


def _trainguard_patch(pod: dict[str, Any], namespace: str) -> list[Any]:
    """The JSON patch trainguard's /mutate answers for `pod`, decided in this process."""
    from webhook.engine import AdmissionInput

    decision = inputs.engine_for().decide(AdmissionInput(pod, namespace=namespace), validate=False)
    if not decision.patch:
        raise RuntimeError("trainguard does not patch the benchmark Pod: the patch arm would measure nothing")
    return list(decision.patch)


def _p50_p99(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return percentile(ordered, 50), percentile(ordered, 99)


def _calls_seen(
    before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]
) -> dict[str, tuple[int, float]]:
    """webhook name -> (calls, mean ms) between two readings of _apiserver_webhook_seconds()."""
    out = {}
    for name in sorted(after):
        seconds = after[name][0] - before.get(name, (0.0, 0.0))[0]
        calls = int(after[name][1] - before.get(name, (0.0, 0.0))[1])
        if calls > 0:
            out[name] = (calls, seconds / calls * 1000)
    return out


def _histogram(url: str, ca: Path, name: str) -> tuple[float, float]:
    return _metric(url, ca, name + "_sum"), _metric(url, ca, name + "_count")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--raw-only", action="store_true", help="only the raw keep-alive client arm")
    args = parser.parse_args()
    print(json.dumps(run(args.quick, args.raw_only)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

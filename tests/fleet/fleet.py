"""The fleet: a working control plane of simulated GPU nodes, with trainguard switched on or off.

kube-apiserver + etcd (tests/e2e/controlplane.py), kube-scheduler, kube-controller-manager, KWOK
managing N nodes with ``nvidia.com/gpu: 8``, Kueue's manager (out of cluster, its webhooks
registered by URL with a CA the fleet makes), the training operator, and ``trainguard serve``
(tests/e2e/webhook_server.py). Everything listens on 127.0.0.1 and is stopped by `stop()`.

Layout: racks of four nodes; one rack in five (at least one) is the inference pool, the rest the
training pool; racks alternate between two zones. Each node is labelled with its zone, rack and pool
and tainted ``trainguard.dev/pool=<pool>:NoSchedule``. Kueue has one ResourceFlavor, a ClusterQueue
whose GPU quota is the training pool's GPUs, and a LocalQueue in every fleet namespace; trainguard's
PlatformConfig maps those namespaces to it, names the rack key, the tiers and the pools
(``pools.assignTraining``).

`trainguard(on=...)` registers or removes trainguard's webhook configurations and waits until the
API server calls them, or no longer does: the same scenario runs with trainguard on and off.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.e2e.binaries import ensure_binaries
from tests.e2e.controlplane import (
    HOST,
    CertificateAuthority,
    ControlPlane,
    ControlPlaneError,
    write_cert,
    write_key,
)
from tests.e2e.webhook_server import (
    WebhookServer,
    priority_class_manifests,
    trainguard,
    webhook_configurations,
)

from . import processes
from .binaries import (
    KUBE_CONTROLLER_MANAGER,
    KUBE_SCHEDULER,
    KUEUE,
    KWOK,
    TRAINING_OPERATOR,
    crd_dir,
    ensure,
    module_source,
)

T = TypeVar("T")
REPO_ROOT = Path(__file__).resolve().parents[2]
POOL_KEY = "trainguard.dev/pool"
RACK_KEY = "cloud.provider.com/topology-rack"
ZONE_KEY = "topology.kubernetes.io/zone"
NODES_PER_RACK = 4
GPUS_PER_NODE = 8
QUEUE = "team-queue"
FLAVOR = "gpu"
CLUSTER_QUEUE = "fleet"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CONFIGURATION_NAME = "trainguard"
# Every namespace a scenario may use: each has a LocalQueue and is mapped to it in the config.
NAMESPACES = tuple(f"fleet-{n}" for n in ("gang", "topology", "pools", "members", "burst", "agents", "extra"))
# Kueue's webhooks for the integrations the fleet enables and for Kueue's own objects; the others
# (JobSet, Ray, ...) have no handler in this manager and would fail every request of their kind.
KUEUE_WEBHOOK_PATHS = ("kueue-x-k8s-io", "-batch-v1-job", "--v1-pod", "-kubeflow-org-v1-pytorchjob")
KUEUE_SYSTEM = "kueue-system"
TRAINING_OPERATOR_CRD = "kubeflow.org_pytorchjobs.yaml"
START_TIMEOUT = 180.0
STOP_TIMEOUT = 15.0
PROPAGATION_TIMEOUT = 60.0
# The webhook's share of the fleet's two cores, shared with the API server, etcd, the scheduler,
# the controllers, KWOK and Kueue: a deployment would give it a CPU limit of one core, and
# `--workers` follows the limit. The default (the CPUs this process may use) would start two
# workers, each with its own cluster caches, competing with the control plane for the same cores.
TRAINGUARD_WORKERS = 1


def platform_config(recovery: dict[str, Any] | None = None) -> dict[str, Any]:
    config = {
        "apiVersion": "trainguard.dev/v1alpha1",
        "kind": "PlatformConfig",
        "queues": {"namespaces": dict.fromkeys(NAMESPACES, QUEUE)},
        "tiers": {"assign": {"guaranteed": "training-high", "preemptible": "training-spot"}},
        "pools": {"assignTraining": True},
        "topology": {"rackKey": RACK_KEY},
    }
    if recovery is not None:  # the resume controller starts only where serve starts with one
        config["recovery"] = recovery
    return config


@dataclass(frozen=True)
class Node:
    name: str
    rack: str
    zone: str
    pool: str  # "training" | "inference"

    def manifest(self) -> dict[str, Any]:
        resources = {
            "cpu": "96",
            "memory": "1Ti",
            "pods": "110",
            "nvidia.com/gpu": str(GPUS_PER_NODE),
        }
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "type": "kwok",
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    ZONE_KEY: self.zone,
                    RACK_KEY: self.rack,
                    POOL_KEY: self.pool,
                },
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "spec": {"taints": [{"key": POOL_KEY, "value": self.pool, "effect": "NoSchedule"}]},
            # A Node may be created with its status: KWOK's node-initialize stage keeps these.
            "status": {"capacity": resources, "allocatable": resources},
        }


def layout(count: int) -> list[Node]:
    """`count` nodes in racks of four; every fifth rack (and at least one) is the inference pool."""
    if count < 3 * NODES_PER_RACK:
        # The gang scenario needs two 4-node jobs to fit side by side in the training pool.
        raise ValueError(
            f"a fleet needs at least {3 * NODES_PER_RACK} nodes (two training racks and an inference rack)"
        )
    racks = -(-count // NODES_PER_RACK)
    inference = {r for r in range(racks) if r % 5 == 4} or {racks - 1}
    nodes = []
    for index in range(count):
        rack = index // NODES_PER_RACK
        nodes.append(
            Node(
                name=f"gpu-{index:04d}",
                rack=f"rack-{rack:03d}",
                zone=f"zone-{'ab'[rack % 2]}",
                pool="inference" if rack in inference else "training",
            )
        )
    return nodes


class FleetWebhookServer(WebhookServer):
    """``trainguard serve`` as a deployment runs it: `log_level` (info: admissions with findings
    only) and `TRAINGUARD_WORKERS`; `debug_log()` on the fleet raises the level where a scenario
    reads every admission's record."""

    def __init__(self, *, certs: Path, config: Path, kubeconfig: Path, log: Path) -> None:
        super().__init__(certs=certs, config=config, kubeconfig=kubeconfig, log=log)
        self.log_level = "info"

    def argv(self) -> list[str]:
        argv = super().argv()
        argv[argv.index("--log-level") + 1] = self.log_level
        return [*argv, "--workers", str(TRAINGUARD_WORKERS)]

    def cpu_seconds(self) -> float:
        """User + system CPU seconds of the server and every worker it started (from /proc)."""
        process = self.process
        if process is None or process.poll() is not None:
            return 0.0
        return sum(_cpu_seconds(pid) for pid in _process_tree(process.pid))


def _process_tree(pid: int) -> list[int]:
    pids, pending = [], [pid]
    while pending:
        current = pending.pop()
        pids.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                pending += [int(child) for child in task.read_text().split()]
    return pids


def _cpu_seconds(pid: int) -> float:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # exited between the listing and the read
        return 0.0
    # The command name (field 2) may hold spaces: fields are counted after its closing parenthesis.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Fleet:
    """A started fleet; use `start_fleet()`."""

    plane: ControlPlane
    nodes: list[Node]
    workdir: Path
    server: FleetWebhookServer
    webhook_certs: Path
    config: Path
    components: dict[str, processes.Component] = field(default_factory=dict)
    trainguard_on: bool = False

    # --- kubectl ---

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120.0
    ) -> str:
        return self.plane.kubectl(*args, input=input, check=check, timeout=timeout).stdout

    def apply(self, manifests: Iterable[dict[str, Any]], *flags: str) -> str:
        return self.kubectl("apply", *flags, "-f", "-", input=yaml.safe_dump_all(list(manifests)))

    def create(self, manifests: Iterable[dict[str, Any]]) -> str:
        return self.kubectl("create", "-f", "-", input=yaml.safe_dump_all(list(manifests)))

    def items(self, resource: str, namespace: str | None = None, selector: str = "") -> list[dict[str, Any]]:
        args = ["get", resource, "-o", "json"]
        args += ["-n", namespace] if namespace else ["--all-namespaces"]
        if selector:
            args += ["-l", selector]
        data: dict[str, Any] = json.loads(self.kubectl(*args))
        items: list[dict[str, Any]] = data.get("items", [])
        return items

    def pods(self, namespace: str | None = None, selector: str = "") -> list[dict[str, Any]]:
        return self.items("pods", namespace, selector)

    @property
    def training_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.pool == "training"]

    @property
    def inference_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.pool == "inference"]

    @property
    def training_gpus(self) -> int:
        return GPUS_PER_NODE * len(self.training_nodes)

    # --- the switch ---

    def trainguard(self, *, on: bool) -> None:
        """Register trainguard's webhooks (validating Fail, mutating Ignore) or remove them, and wait
        until the API server acts accordingly."""
        if on:
            self.kubectl("apply", "-f", str(self.workdir / "trainguard-webhooks.yaml"))
        else:
            for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
                self.kubectl("delete", kind, CONFIGURATION_NAME, "--ignore-not-found")
        self.trainguard_on = on
        wait_until(lambda: self._mutated() == on, PROPAGATION_TIMEOUT, f"trainguard {'on' if on else 'off'}")

    def _mutated(self) -> bool:
        """Does a dry-run create of a multi-node job come back with trainguard's class label?"""
        probe = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "trainguard-probe", "namespace": NAMESPACES[0]},
            "spec": {
                "completions": 2,
                "parallelism": 2,
                "completionMode": "Indexed",
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "main",
                                "image": "busybox",
                                "command": ["torchrun", "--nnodes=2", "--nproc-per-node=8", "train.py"],
                                "resources": {"limits": {"nvidia.com/gpu": 8}},
                            }
                        ],
                    }
                },
            },
        }
        out = self.plane.kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(probe), check=False
        )
        if out.returncode != 0:
            return False
        labels = json.loads(out.stdout)["metadata"].get("labels") or {}
        return "trainguard.dev/class" in labels

    @contextlib.contextmanager
    def debug_log(self) -> Iterator[None]:
        """trainguard restarted at debug level (a record per admission) for the block, then at info
        again: the scenario that reads decisions pays for the records, the others run as deployed."""
        self._restart("debug")
        try:
            yield
        finally:
            self._restart("info")

    def _restart(self, level: str) -> None:
        self.server.stop()
        self.server.log_level = level
        self.server.start()
        self.server.wait_for_cluster_caches()
        if self.trainguard_on:
            wait_until(self._mutated, PROPAGATION_TIMEOUT, "trainguard answers again")

    # --- cleaning between arms ---

    def clear(self, namespace: str, timeout: float = START_TIMEOUT) -> None:
        """Delete every workload and pod of `namespace` and wait until no pod of it is left."""
        for resource in ("pytorchjobs.kubeflow.org", "jobs.batch", "deployments.apps", "daemonsets.apps"):
            self.kubectl("delete", resource, "--all", "-n", namespace, "--wait=false", "--ignore-not-found")
        self.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false", "--ignore-not-found")
        wait_until(lambda: not self.pods(namespace), timeout, f"the pods of {namespace} are gone")
        wait_until(
            lambda: not self.items("workloads.kueue.x-k8s.io", namespace),
            timeout,
            f"the Kueue workloads of {namespace} are gone",
        )

    # --- the API server's own admission metrics ---

    def apiserver_metrics(self) -> str:
        text = self.plane.get_text("/metrics")
        if text is None:
            raise ControlPlaneError("the API server did not answer /metrics")
        return text

    # --- teardown ---

    def stop(self) -> None:
        try:
            self.server.stop()
        except Exception:  # teardown goes on whatever the server did
            self.server.kill()
        for name in ("kueue", "training-operator", "kwok", "kube-controller-manager", "kube-scheduler"):
            component = self.components.pop(name, None)
            if component is not None:
                component.stop(STOP_TIMEOUT)
        self.plane.stop()


def wait_until(check: Any, timeout: float, what: str, interval: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"not within {timeout:.0f} s: {what}")
        time.sleep(interval)


def _kueue_webhooks(url: str, ca_bundle: bytes) -> list[dict[str, Any]]:
    """Kueue's webhook configurations from its module source, pointed at `url` by URL."""
    source = module_source(KUEUE) / "config" / "components" / "webhook" / "manifests.yaml"
    configurations = []
    for document in yaml.safe_load_all(source.read_text(encoding="utf-8")):
        if not document:
            continue
        configuration = copy.deepcopy(document)
        configuration["metadata"]["name"] = "kueue-" + configuration["metadata"]["name"]
        kept = []
        for webhook in configuration["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            if not any(part in path for part in KUEUE_WEBHOOK_PATHS):
                continue
            webhook["clientConfig"] = {"url": url + path, "caBundle": base64.b64encode(ca_bundle).decode()}
            if "-v1-pod" in path:
                # As Kueue's own kustomization does: never its own namespace, nor kube-system.
                webhook["namespaceSelector"] = {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "NotIn",
                            "values": ["kube-system", KUEUE_SYSTEM],
                        }
                    ]
                }
            kept.append(webhook)
        configuration["webhooks"] = kept
        configurations.append(configuration)
    return configurations


def _kueue_objects(training_gpus: int) -> list[dict[str, Any]]:
    api = "kueue.x-k8s.io/v1beta2"
    objects: list[dict[str, Any]] = [
        {"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}},
        {
            "apiVersion": api,
            "kind": "ClusterQueue",
            "metadata": {"name": CLUSTER_QUEUE},
            "spec": {
                "namespaceSelector": {},
                "queueingStrategy": "BestEffortFIFO",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": FLAVOR,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "100000"},
                                    {"name": "memory", "nominalQuota": "100Ti"},
                                    {"name": "nvidia.com/gpu", "nominalQuota": training_gpus},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    ]
    for namespace in NAMESPACES:
        objects.append(
            {
                "apiVersion": api,
                "kind": "LocalQueue",
                "metadata": {"name": QUEUE, "namespace": namespace},
                "spec": {"clusterQueue": CLUSTER_QUEUE},
            }
        )
    return objects


def _serving_certs(directory: Path, common_name: str) -> bytes:
    """A CA and a serving certificate for 127.0.0.1 in `directory` (tls.crt, tls.key); the CA's PEM."""
    ca = CertificateAuthority(f"{common_name}-ca")
    cert, key = ca.issue(common_name, dns_names=["localhost"], ip_addresses=[HOST], server=True)
    directory.mkdir(parents=True, exist_ok=True)
    write_cert(directory / "tls.crt", cert)
    write_key(directory / "tls.key", key)
    write_cert(directory / "ca.crt", ca.cert)
    return (directory / "ca.crt").read_bytes()


def start_fleet(
    node_count: int,
    *,
    workdir: Path | None = None,
    timeout: float = START_TIMEOUT,
    recovery: dict[str, Any] | None = None,
) -> Fleet:
    """Build what is missing, start everything, and return the fleet with trainguard on
    (`recovery`: the PlatformConfig's recovery block, tests/fleet/recovery.py)."""
    binaries = ensure_binaries()
    built = {
        c.name: ensure(c) for c in (KUBE_SCHEDULER, KUBE_CONTROLLER_MANAGER, KWOK, KUEUE, TRAINING_OPERATOR)
    }
    workdir = workdir or Path(tempfile.mkdtemp(prefix="trainguard-fleet-"))
    plane = ControlPlane(binaries, start_timeout=timeout)
    plane.start()
    fleet: Fleet | None = None
    try:
        crds = sorted(crd_dir(KUEUE).glob("*.yaml")) + [crd_dir(TRAINING_OPERATOR) / TRAINING_OPERATOR_CRD]
        crds.append(REPO_ROOT / "deploy" / "crds" / "trainguard.dev_policyexceptions.yaml")
        plane.apply_crds(crds, timeout=timeout)
        for namespace in (*NAMESPACES, KUEUE_SYSTEM, "kubeflow", "trainguard-system"):
            plane.kubectl("create", "namespace", namespace)
        plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(priority_class_manifests()))

        nodes = layout(node_count)
        certs = workdir / "trainguard-certs"
        result = trainguard("certs", "--out", str(certs), "--host", HOST)
        if result.returncode != 0:
            raise ControlPlaneError(f"trainguard certs failed:\n{result.stderr}")
        config = workdir / "platform.yaml"
        config.write_text(yaml.safe_dump(platform_config(recovery), sort_keys=False), encoding="utf-8")
        server = FleetWebhookServer(
            certs=certs, config=config, kubeconfig=plane.kubeconfig, log=workdir / "serve.log"
        )
        fleet = Fleet(plane, nodes, workdir, server, certs, config)
        # Nodes in batches: one kubectl call per 200 keeps a 1,000-node fleet's start short.
        for start in range(0, len(nodes), 200):
            fleet.create(node.manifest() for node in nodes[start : start + 200])

        logs = plane.dir
        assert logs is not None
        fleet.components["kube-scheduler"] = processes.start_scheduler(
            plane, built["kube-scheduler"], logs, timeout
        )
        fleet.components["kube-controller-manager"] = processes.start_controller_manager(
            plane, built["kube-controller-manager"], logs, timeout
        )
        fleet.components["kwok"] = processes.start_kwok(plane, built["kwok"], logs)
        wait_until(lambda: _ready_nodes(fleet) == len(nodes), timeout, f"{len(nodes)} KWOK nodes Ready")
        operator_certs = workdir / "training-operator-certs"
        _serving_certs(operator_certs, "training-operator-webhook")
        fleet.components["training-operator"] = processes.start_training_operator(
            plane, built["training-operator"], logs, operator_certs, timeout
        )

        kueue_certs = workdir / "kueue-certs"
        kueue_ca = _serving_certs(kueue_certs, "kueue-webhook")
        kueue = processes.start_kueue(plane, built["kueue"], logs, kueue_certs, timeout)
        fleet.components["kueue"] = kueue
        fleet.apply(_kueue_webhooks(f"https://{HOST}:{kueue.webhook_port}", kueue_ca))
        # Kueue's webhooks validate its objects: retried until the API server reaches them.
        objects = _kueue_objects(fleet.training_gpus)
        wait_until(lambda: _applied(fleet, objects), timeout, "Kueue's queues created through its webhooks")
        wait_until(lambda: _cluster_queue_active(fleet), timeout, "the ClusterQueue is Active")

        server.start()
        server.wait_for_cluster_caches()
        rendered = webhook_configurations(certs, server.url, config)
        if rendered.returncode != 0:
            raise ControlPlaneError(f"trainguard webhook-config failed:\n{rendered.stderr}")
        (workdir / "trainguard-webhooks.yaml").write_text(rendered.stdout, encoding="utf-8")
        fleet.trainguard(on=True)
        return fleet
    except BaseException:
        if fleet is not None:
            fleet.stop()
        else:
            plane.stop()
        raise


def _applied(fleet: Fleet, objects: list[dict[str, Any]]) -> bool:
    result = fleet.plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects), check=False)
    return result.returncode == 0


def _ready_nodes(fleet: Fleet) -> int:
    """Nodes Ready and rid of the not-ready taint (node lifecycle lifts it): schedulable."""
    ready = 0
    for node in fleet.items("nodes"):
        conditions = node.get("status", {}).get("conditions") or []
        taints = {t.get("key") for t in node.get("spec", {}).get("taints") or []}
        if (
            any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
            and "node.kubernetes.io/not-ready" not in taints
        ):
            ready += 1
    return ready


def _cluster_queue_active(fleet: Fleet) -> bool:
    for queue in fleet.items("clusterqueues.kueue.x-k8s.io"):
        conditions = queue.get("status", {}).get("conditions") or []
        if any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions):
            return True
    return False


@dataclass(frozen=True)
class Arm:
    """One side of a side-by-side run: the namespace and whether trainguard is on."""

    on: bool
    namespace: str


def side_by_side(fleet: Fleet, namespace: str, scenario: Callable[[Arm], T]) -> tuple[T, T]:
    """`scenario` with trainguard on, then off, the namespace cleaned after each; trainguard is
    on again afterwards."""
    results = []
    try:
        for on in (True, False):
            fleet.trainguard(on=on)
            try:
                results.append(scenario(Arm(on, namespace)))
            finally:
                fleet.clear(namespace)
    finally:
        fleet.trainguard(on=True)
    return results[0], results[1]


def remove_workdir(workdir: Path) -> None:
    """Remove a fleet's work directory, unless $TRAINGUARD_E2E_KEEP keeps it (as the control
    plane's own directory is kept) for its logs."""
    if not os.environ.get("TRAINGUARD_E2E_KEEP"):
        shutil.rmtree(workdir, ignore_errors=True)

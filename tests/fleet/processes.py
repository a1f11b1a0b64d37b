"""The fleet's controllers as child processes on 127.0.0.1, each with a readiness check.

kube-scheduler and kube-controller-manager serve their /healthz over TLS with a self-signed
certificate; KWOK serves nothing (it only watches); the training operator and Kueue are
controller-runtime managers whose health probes answer plain HTTP. Every process gets the admin
kubeconfig of the control plane (``system:masters``): RBAC for each component is not what the
fleet tests. Each one writes its log beside the control plane's, and the test process's death
takes them along (tests/e2e/controlplane.py, ``_Process``).
"""

from __future__ import annotations

import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.e2e.controlplane import (
    HOST,
    ControlPlane,
    ControlPlaneError,
    _Process,
    clean_environment,
    free_port,
)

from .binaries import KWOK, TRAINING_OPERATOR_CERT_DIR, module_source

# What the Job, DaemonSet and garbage-collection scenarios need, the namespace and service-account
# controllers a cluster takes for granted, and node lifecycle, which lifts the not-ready taint the
# API server puts on every new Node once KWOK reports it Ready. Taint eviction is left out: a
# loaded machine must not make the control plane evict pods from a node whose lease came late.
CONTROLLERS = tuple(
    f"{name}-controller"
    for name in (
        "job",
        "daemonset",
        "replicaset",
        "deployment",
        "garbage-collector",
        "namespace",
        "node-lifecycle",
        "serviceaccount",
        "serviceaccount-token",
        "root-ca-certificate-publisher",
        "pod-garbage-collector",
        "ttl-after-finished",
    )
)
# Stages from KWOK's own kustomize/stage tree: nodes become Ready, pods Running and Ready and are
# deleted when asked. pod-complete is left out: a training pod runs until its job is deleted.
KWOK_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)
KWOK_NODE_SELECTOR = "type=kwok"
# A pod labelled so ends, as its workload would when its work is done: pod-complete's transition,
# chosen by the test instead of by owner kind (which would end every Job pod at once).
FINISH_LABEL = "fleet.trainguard.dev/finish"


def _get_status(url: str) -> int:
    """Status of a GET, 0 if none; an https URL's server is not verified (the components' health
    endpoints serve self-signed certificates)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
    )
    try:
        with opener.open(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


def wait_for(process: _Process, check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if not process.running():
            raise ControlPlaneError(
                f"{process.name} exited with {process.popen.returncode} before {what}:\n{process.tail()}"
            )
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"{process.name}: {what} not within {timeout:.0f} s:\n{process.tail()}")
        time.sleep(0.2)


class Component:
    """One started process and the port of its health endpoint."""

    def __init__(self, process: _Process, health_url: str) -> None:
        self.process = process
        self.health_url = health_url

    def healthy(self) -> bool:
        return _get_status(self.health_url) == 200

    def stop(self, timeout: float) -> None:
        self.process.stop(timeout)


def _kubeconfig_flags(plane: ControlPlane) -> list[str]:
    return [
        f"--kubeconfig={plane.kubeconfig}",
        f"--authentication-kubeconfig={plane.kubeconfig}",
        f"--authorization-kubeconfig={plane.kubeconfig}",
    ]


def _start_component(
    name: str, plane: ControlPlane, binary: Path, workdir: Path, timeout: float, flags: list[str]
) -> Component:
    """kube-scheduler or kube-controller-manager: serving /healthz on 127.0.0.1, no leader election."""
    port = free_port()
    certs = workdir / f"{name}-certs"
    certs.mkdir(exist_ok=True)
    argv = [
        str(binary),
        *_kubeconfig_flags(plane),
        f"--bind-address={HOST}",
        f"--secure-port={port}",
        f"--cert-dir={certs}",
        "--leader-elect=false",
        # A burst of hundreds of pods: the default 50 QPS would make binding and syncing, not
        # admission, the bottleneck the burst measures.
        "--kube-api-qps=500",
        "--kube-api-burst=1000",
        *flags,
    ]
    process = _Process(name, argv, workdir / f"{name}.log", clean_environment())
    component = Component(process, f"https://{HOST}:{port}/healthz")
    wait_for(process, component.healthy, timeout, "/healthz answered 200")
    return component


def start_scheduler(plane: ControlPlane, binary: Path, workdir: Path, timeout: float) -> Component:
    return _start_component("kube-scheduler", plane, binary, workdir, timeout, [])


def start_controller_manager(plane: ControlPlane, binary: Path, workdir: Path, timeout: float) -> Component:
    flags = [
        f"--controllers={','.join(CONTROLLERS)}",
        # The token controller signs with the key the API server verifies (--service-account-key-file).
        f"--service-account-private-key-file={plane.pki_dir / 'sa.key'}",
        f"--root-ca-file={plane.ca_file}",
        "--use-service-account-credentials=false",
        "--concurrent-job-syncs=10",
        # KWOK renews leases every 40 s / 4; a busy machine gets minutes, not seconds, of slack.
        "--node-monitor-grace-period=180s",
    ]
    return _start_component("kube-controller-manager", plane, binary, workdir, timeout, flags)


def kwok_stages(directory: Path) -> Path:
    """KWOK's stage documents, read from its module source, in one config file."""
    source = module_source(KWOK)
    documents = []
    for relative in KWOK_STAGES:
        documents += [d for d in yaml.safe_load_all((source / relative).read_text(encoding="utf-8")) if d]
    (finish,) = yaml.safe_load_all(
        (source / "kustomize/stage/pod/fast/pod-complete.yaml").read_text(encoding="utf-8")
    )
    finish["metadata"]["name"] = "pod-finish"
    selector = finish["spec"]["selector"]
    selector["matchExpressions"] = [
        e for e in selector["matchExpressions"] if e["key"] != ".metadata.ownerReferences.[].kind"
    ]
    selector["matchLabels"] = {FINISH_LABEL: "true"}
    documents.append(finish)
    path = directory / "kwok-stages.yaml"
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False), encoding="utf-8")
    return path


def start_kwok(plane: ControlPlane, binary: Path, workdir: Path) -> Component:
    home = workdir / "kwok-home"
    home.mkdir(exist_ok=True)
    env = clean_environment()
    env["HOME"] = str(home)  # KWOK also loads ~/.kwok/kwok.yaml when it exists: not this one's
    argv = [
        str(binary),
        f"--kubeconfig={plane.kubeconfig}",
        f"--config={kwok_stages(workdir)}",
        f"--manage-nodes-with-label-selector={KWOK_NODE_SELECTOR}",
        "--node-lease-duration-seconds=40",
        "--cidr=10.244.0.0/16",
        "--node-ip=10.0.0.2",
    ]
    process = _Process("kwok", argv, workdir / "kwok.log", env)
    # KWOK serves no endpoint: it is ready when the nodes it manages turn Ready (the fleet waits).
    return Component(process, "")


def start_training_operator(
    plane: ControlPlane, binary: Path, workdir: Path, certs: Path, timeout: float
) -> Component:
    """`certs` holds tls.crt and tls.key for 127.0.0.1 (its webhook, which the fleet does not register)."""
    probe = free_port()
    env = clean_environment()
    env["KUBECONFIG"] = str(plane.kubeconfig)
    env["MY_POD_NAMESPACE"] = "kubeflow"
    env[TRAINING_OPERATOR_CERT_DIR] = str(certs)
    argv = [
        str(binary),
        "--enable-scheme=pytorchjob",
        "--metrics-bind-address=0",
        f"--health-probe-bind-address={HOST}:{probe}",
        f"--webhook-server-port={free_port()}",
        "--leader-elect=false",
        "--controller-threads=4",
    ]
    process = _Process("training-operator", argv, workdir / "training-operator.log", env)
    component = Component(process, f"http://{HOST}:{probe}/readyz")
    wait_for(process, lambda: _get_status(component.health_url) == 200, timeout, "/readyz answered 200")
    return component


class Kueue(Component):
    """Kueue's manager out of cluster; its webhook server listens on `webhook_port`."""

    def __init__(self, process: _Process, health_url: str, webhook_port: int) -> None:
        super().__init__(process, health_url)
        self.webhook_port = webhook_port


def start_kueue(plane: ControlPlane, binary: Path, workdir: Path, certs: Path, timeout: float) -> Kueue:
    """`certs` holds tls.crt and tls.key for 127.0.0.1 (webhook and metrics)."""
    probe, metrics, webhook = free_port(), free_port(), free_port()
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"{HOST}:{probe}"},
        "metrics": {"bindAddress": f"{HOST}:{metrics}"},
        "webhook": {"port": webhook, "host": HOST, "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "manageJobsWithoutQueueName": False,
        "clientConnection": {"qps": 500, "burst": 1000},
        "integrations": {"frameworks": ["batch/job", "kubeflow.org/pytorchjob", "pod"]},
    }
    path = workdir / "kueue-config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    env = clean_environment()
    env["KUBECONFIG"] = str(plane.kubeconfig)
    env["KUEUE_METRICS_CERT_DIR"] = str(certs)
    argv = [
        str(binary),
        f"--config={path}",
        # The on-demand visibility API server would listen on every interface; the fleet reads
        # queues from the Workload objects instead.
        "--feature-gates=VisibilityOnDemand=false",
    ]
    process = _Process("kueue", argv, workdir / "kueue.log", env)
    component = Kueue(process, f"http://{HOST}:{probe}/readyz", webhook)
    wait_for(process, lambda: _get_status(component.health_url) == 200, timeout, "/readyz answered 200")
    return component

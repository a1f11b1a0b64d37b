"""trainguard itself, wired into the e2e control plane: certificates, server, webhook configurations.

Everything goes through trainguard's own command line, as an operator would run it:

* ``trainguard certs --out DIR --host 127.0.0.1``        the CA and the serving certificate;
* ``trainguard serve ... --kubeconfig KUBECONFIG``        a real subprocess on 127.0.0.1, with the
                                                          cluster caches (PriorityClasses, runtimes);
* ``trainguard webhook-config --certs DIR --url URL``     piped into ``kubectl apply -f -``.

The platform config of the suite turns every default mutation on: a queue for ``e2e-team`` and
``e2e-corpus``, a priority class per tier, pinning to the training pool, and a rack topology key.
``e2e-other`` has no queue. The PriorityClasses the config names are created in the cluster before
the server starts, so its cache knows their values from its first list; the config gives no
``tiers.values``, so a bare Pod's priority comes from that cache, and the CLI gets the same
PriorityClasses as manifests beside the documents it decides.

The server and the webhook configurations are module-scoped: at the end of the module that uses
them, the configurations are deleted and the server is stopped, so that other test modules sharing
the session's control plane are not sent to a webhook that is gone.

Every kubectl run a test wants to keep is written to a transcript (command, stdin, exit code,
stdout, stderr) in ``$TRAINGUARD_E2E_TRANSCRIPTS``, else in ``<pytest tmp>/e2e*/transcripts/``;
the directory is printed after the test summary.

Also here: the manifests the tests build, and the shared corpus split into one file per document.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from .controlplane import HOST, ControlPlane, clean_environment, free_port, shared_dir

REPO_ROOT = Path(__file__).resolve().parents[2]

TEAM_NS = "e2e-team"  # mapped to a Kueue LocalQueue: the queue mutation runs here
OTHER_NS = "e2e-other"  # no queue: a multi-node job here must declare its own gang
CORPUS_NS = "e2e-corpus"  # queue-mapped too; corpus objects really created (not dry-run) go here
SYSTEM_NS = "trainguard-system"  # trainguard's own namespace, never sent to the webhook
TEAM_QUEUE = "team-queue"
RACK_KEY = "cloud.provider.com/topology-rack"
POOL_KEY = "trainguard.dev/pool"
VALIDATING_WEBHOOK = "validate.trainguard.dev"
MUTATING_WEBHOOK = "mutate.trainguard.dev"
CONFIGURATION_NAME = "trainguard"

# The classes the tiers map to. training-spot does not preempt (a common choice for opportunistic
# capacity), which matters for bare Pods: the Priority admission plugin checks spec.preemptionPolicy.
PRIORITY_CLASSES: dict[str, dict[str, Any]] = {
    "training-high": {"value": 100000, "description": "guaranteed training"},
    "training-spot": {"value": 1000, "preemptionPolicy": "Never", "description": "preemptible training"},
}

PLATFORM_CONFIG: dict[str, Any] = {
    "apiVersion": "trainguard.dev/v1alpha1",
    "kind": "PlatformConfig",
    "queues": {"namespaces": {TEAM_NS: TEAM_QUEUE, CORPUS_NS: TEAM_QUEUE}},
    "tiers": {"assign": {"guaranteed": "training-high", "preemptible": "training-spot"}},
    "pools": {"assignTraining": True},
    "topology": {"rackKey": RACK_KEY},
}

START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
PROPAGATION_TIMEOUT = 30.0


class WebhookError(RuntimeError):
    """trainguard did not start, stop or answer as expected."""


def webhook_configurations(certs: Path, url: str, config: Path) -> subprocess.CompletedProcess[str]:
    """`trainguard webhook-config` for the server at `url`, as YAML: validating webhooks fail closed,
    mutating ones open (the install's failure policies)."""
    return trainguard(
        *("webhook-config", "--certs", str(certs), "--url", url, "--config", str(config)),
        *("--validating-failure-policy", "Fail", "--mutating-failure-policy", "Ignore", "-o", "yaml"),
    )


def trainguard(
    *args: str, input: str | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """``python -m webhook ARGS`` (the ``trainguard`` command) from the repository, not checked."""
    return subprocess.run(
        [sys.executable, "-m", "webhook", *args],
        input=input,
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env=_environment(),
        timeout=timeout,
        check=False,
    )


def _environment() -> dict[str, str]:
    env = clean_environment()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.pop("KUBECONFIG", None)
    return env


def _checked(result: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    if result.returncode != 0:
        raise WebhookError(f"{what} exited {result.returncode}:\n{result.stderr}{result.stdout}")
    return result


# --- transcripts -------------------------------------------------------------------------------------


@dataclass
class Transcripts:
    """kubectl runs worth reading afterwards, one text file per name (runs appended in order)."""

    directory: Path
    written: list[Path] = field(default_factory=list)

    def record(
        self,
        name: str,
        title: str,
        argv: list[str],
        result: subprocess.CompletedProcess[str],
        stdin: str | None = None,
    ) -> None:
        path = self.directory / f"{name}.txt"
        command = shlex.join(["kubectl", *argv])
        lines = [f"# {title}"]
        if stdin is not None:
            # Sent as JSON, shown as the YAML a person would type (kubectl reads either).
            lines += [f"$ {command} <<'EOF'", _as_yaml(stdin).rstrip("\n"), "EOF"]
        else:
            lines.append(f"$ {command}")
        lines += [
            f"exit code: {result.returncode}",
            "--- stdout",
            result.stdout.rstrip("\n"),
            "--- stderr",
            result.stderr.rstrip("\n"),
            "",
            "",
        ]
        with path.open("a", encoding="utf-8") as out:
            out.write("\n".join(lines))
        if path not in self.written:
            self.written.append(path)

    def record_line(self, name: str, line: str) -> None:
        path = self.directory / f"{name}.txt"
        with path.open("a", encoding="utf-8") as out:
            out.write(line.rstrip("\n") + "\n")
        if path not in self.written:
            self.written.append(path)


def _as_yaml(text: str) -> str:
    """A JSON manifest shown as YAML (what a person would have typed); anything else as it is."""
    try:
        return yaml.safe_dump(json.loads(text), sort_keys=False, width=100)
    except ValueError:
        return text


# --- the server --------------------------------------------------------------------------------------


class WebhookServer:
    """``trainguard serve`` as a subprocess on 127.0.0.1; stop() and start() again on the same port."""

    def __init__(self, *, certs: Path, config: Path, kubeconfig: Path, log: Path) -> None:
        self.certs = certs
        self.config = config
        self.kubeconfig = kubeconfig
        self.log = log
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=self._context)
        )

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}"

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "webhook",
            "serve",
            "--tls-cert",
            str(self.certs / "tls.crt"),
            "--tls-key",
            str(self.certs / "tls.key"),
            "--host",
            HOST,
            "--port",
            str(self.port),
            "--config",
            str(self.config),
            "--kubeconfig",
            str(self.kubeconfig),
            # Tests stop the server on purpose: no need to stay up, not ready, for endpoints to catch up.
            "--shutdown-delay",
            "0",
            # Every admission in the log (INFO has only those with findings): tests read it.
            "--log-level",
            "debug",
        ]

    def start(self, timeout: float = START_TIMEOUT) -> WebhookServer:
        """Start (a new port the first time, the same one after a stop) and wait for /readyz."""
        for _attempt in range(3):
            fresh = self.port == 0
            if fresh:
                self.port = free_port()
            with self.log.open("ab") as log:
                self.process = subprocess.Popen(
                    self.argv(),
                    cwd=REPO_ROOT,
                    env=_environment(),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            if self._wait_ready(timeout):
                return self
            self.kill()
            if not (fresh and "address already in use" in self.log_tail()):
                break
            self.port = 0
        raise WebhookError(f"trainguard serve was not ready within {timeout:.0f} s:\n{self.log_tail()}")

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running():
                return False
            if self.get("/readyz")[0] == 200:
                return True
            time.sleep(0.1)
        return False

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait for the exit code; WebhookError (after a SIGKILL) if it does not exit."""
        process = self.process
        if process is None or process.poll() is not None:
            return process.returncode if process is not None else 0
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise WebhookError(
                f"trainguard serve did not exit within {timeout:.0f} s of SIGTERM:\n{self.log_tail()}"
            ) from None

    def kill(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT)

    def get(self, path: str) -> tuple[int, str]:
        """GET over TLS, verified with the CA of `trainguard certs` (0 when nothing answers)."""
        try:
            with self._opener.open(self.url + path, timeout=5) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as error:
            return int(error.code), error.read().decode(errors="replace")
        except OSError:
            return 0, ""

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of /metrics: (name, sorted labels) -> value."""
        status, text = self.get("/metrics")
        if status != 200:
            raise WebhookError(f"/metrics answered {status}")
        return {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def admission_calls(self) -> float:
        """Every call on /validate and /mutate, answered with an AdmissionReview or refused."""
        names = ("trainguard_admission_requests_total", "trainguard_admission_rejected_requests_total")
        return sum(value for (name, _labels), value in self.metrics().items() if name in names)

    def cluster_reloads(self) -> float:
        key = ("trainguard_reloads_total", (("result", "success"), ("source", "cluster")))
        return self.metrics().get(key, 0.0)

    def wait_for_cluster_caches(self, timeout: float = START_TIMEOUT) -> None:
        """Until the engine has been rebuilt from the cluster caches at least once."""
        deadline = time.monotonic() + timeout
        while self.cluster_reloads() < 1:
            if time.monotonic() > deadline:
                raise WebhookError(f"the cluster caches never filled:\n{self.log_tail()}")
            time.sleep(0.1)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


# --- everything together -----------------------------------------------------------------------------


@dataclass
class Admission:
    """The control plane with trainguard registered: kubectl, the server, the CLI, transcripts."""

    plane: ControlPlane
    server: WebhookServer
    certs: Path
    config: Path
    transcripts: Transcripts
    workdir: Path

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        transcript: str | None = None,
        title: str = "",
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl (not checked); keep a transcript under `transcript` when given."""
        result = self.plane.kubectl(*args, input=input, check=False)
        if transcript is not None:
            self.transcripts.record(transcript, title or transcript, list(args), result, stdin=input)
        return result

    def apply(
        self, manifest: dict[str, Any], *flags: str, transcript: str | None = None, title: str = ""
    ) -> subprocess.CompletedProcess[str]:
        return self.kubectl(
            "apply", *flags, "-f", "-", input=json.dumps(manifest), transcript=transcript, title=title
        )

    def get(self, manifest: dict[str, Any]) -> dict[str, Any] | None:
        """The stored object named like `manifest`, None when it does not exist."""
        args = ["get", _resource(manifest), manifest["metadata"]["name"], "-o", "json"]
        namespace = manifest["metadata"].get("namespace")
        if namespace:
            args += ["-n", namespace]
        result = self.plane.kubectl(*args, check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr:
                return None
            raise WebhookError(f"kubectl {' '.join(args)}: {result.stderr}")
        stored: dict[str, Any] = json.loads(result.stdout)
        return stored

    def check(self, paths: list[Path], namespace: str) -> dict[str, Any]:
        """``trainguard check PATHS --config CONFIG -o json --namespace NS``, decoded."""
        result = trainguard(
            "check", *map(str, paths), "--config", str(self.config), "-o", "json", "--namespace", namespace
        )
        if result.returncode not in (0, 1):
            raise WebhookError(f"trainguard check exited {result.returncode}:\n{result.stderr}")
        report: dict[str, Any] = json.loads(result.stdout)
        return report

    def check_manifest(self, manifest: dict[str, Any], namespace: str) -> dict[str, Any]:
        """The CLI's record for one manifest (with the PriorityClasses beside it, as in the cluster)."""
        path = self.workdir / f"check-{namespace}-{manifest['metadata']['name']}.json"
        path.write_text(json.dumps(manifest), encoding="utf-8")
        report = self.check([path, priority_classes_file(self.workdir)], namespace)
        (record,) = [r for r in report["results"] if r["source"].startswith(str(path))]
        return record


def _resource(manifest: dict[str, Any]) -> str:
    """kind.group, which kubectl resolves without ambiguity (Job: batch or batch.volcano.sh)."""
    group = manifest["apiVersion"].rpartition("/")[0]
    return f"{manifest['kind'].lower()}.{group}" if group else manifest["kind"].lower()


def priority_class_manifests() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            **spec,
        }
        for name, spec in PRIORITY_CLASSES.items()
    ]


def priority_classes_file(directory: Path) -> Path:
    """The PriorityClasses as a manifest file: what the CLI takes as context beside workloads."""
    path = directory / "priorityclasses.yaml"
    if not path.is_file():
        path.write_text(yaml.safe_dump_all(priority_class_manifests(), sort_keys=False), encoding="utf-8")
    return path


# --- manifests ---------------------------------------------------------------------------------------

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
CLASS_LABEL = "trainguard.dev/class"
TIER_LABEL = "trainguard.dev/tier"
CHECKPOINT_SPEC = {
    "trainguard.dev/checkpoint-interval": "30m",
    "trainguard.dev/checkpoint-uri": "s3://checkpoints/e2e",
    "trainguard.dev/checkpoint-owner": "ml-platform",
}
IMAGE = "ghcr.io/example/train:1.0"


def pytorchjob(
    name: str,
    namespace: str,
    *,
    workers: int = 3,
    gpus: int = 8,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    elastic: dict[str, int] | None = None,
    node_selector: dict[str, str] | None = None,
    grace_period: int | None = None,
) -> dict[str, Any]:
    """A GPU PyTorchJob launched with torchrun: Master + `workers` Workers (class B), or, with
    `elastic` (an elasticPolicy), Workers only (class C, --nnodes=MIN:MAX)."""
    nnodes = f"{elastic['minReplicas']}:{elastic['maxReplicas']}" if elastic else str(workers + 1)

    def replica(replicas: int) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "containers": [
                {
                    "name": "pytorch",
                    "image": IMAGE,
                    "command": ["torchrun", f"--nnodes={nnodes}", f"--nproc-per-node={gpus}", "train.py"],
                    "resources": {"limits": {"nvidia.com/gpu": gpus}},
                }
            ]
        }
        if node_selector:
            spec["nodeSelector"] = dict(node_selector)
        if grace_period is not None:
            spec["terminationGracePeriodSeconds"] = grace_period
        return {"replicas": replicas, "restartPolicy": "OnFailure", "template": {"spec": spec}}

    replicas = {"Worker": replica(workers)} if elastic else {"Master": replica(1), "Worker": replica(workers)}
    job: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"pytorchReplicaSpecs": replicas},
    }
    if labels:
        job["metadata"]["labels"] = dict(labels)
    if annotations:
        job["metadata"]["annotations"] = dict(annotations)
    if elastic:
        job["spec"]["elasticPolicy"] = {"rdzvBackend": "c10d", **elastic}
    return job


def leaderworkerset(name: str, namespace: str, *, pool: str) -> dict[str, Any]:
    """An inference LeaderWorkerSet (multi-node vLLM) pinned to a pool by nodeSelector."""

    def template(role: str) -> dict[str, Any]:
        return {
            "spec": {
                "nodeSelector": {POOL_KEY: pool},
                "containers": [
                    {
                        "name": f"vllm-{role}",
                        "image": "vllm/vllm-openai:v0.6.0",
                        "resources": {"limits": {"nvidia.com/gpu": 8}},
                    }
                ],
            }
        }

    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "leaderWorkerTemplate": {
                "size": 2,
                "leaderTemplate": template("leader"),
                "workerTemplate": template("worker"),
            },
        },
    }


def pod(
    name: str,
    namespace: str,
    *,
    gpus: int = 0,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    grace_period: int | None = None,
) -> dict[str, Any]:
    """A bare Pod: a single-node trainer when it asks for GPUs, plain CPU infrastructure otherwise."""
    container: dict[str, Any] = {"name": "main", "image": IMAGE, "command": ["python", "train.py"]}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [container]},
    }
    if labels:
        manifest["metadata"]["labels"] = dict(labels)
    if annotations:
        manifest["metadata"]["annotations"] = dict(annotations)
    if grace_period is not None:
        manifest["spec"]["terminationGracePeriodSeconds"] = grace_period
    return manifest


# --- the shared corpus ----------------------------------------------------------------------------

RUNTIME_KINDS = ("TrainingRuntime", "ClusterTrainingRuntime")


@dataclass(frozen=True)
class CorpusDocument:
    """One YAML document of a corpus file: `relpath#index` (1-based, as the CLI numbers them)."""

    relpath: str
    index: int
    data: dict[str, Any]

    @property
    def key(self) -> str:
        return f"{self.relpath}#{self.index}"

    @property
    def gvk(self) -> tuple[str, str]:
        return str(self.data.get("apiVersion")), str(self.data.get("kind"))

    @property
    def is_runtime(self) -> bool:
        return self.gvk[1] in RUNTIME_KINDS and self.gvk[0].startswith("trainer.kubeflow.org/")

    def __str__(self) -> str:
        return self.key


def corpus_documents() -> list[CorpusDocument]:
    """Every mapping document of ``<shared>/corpus/**/*.yaml``, in path order (read at collection)."""
    root = shared_dir() / "corpus"
    documents = []
    for path in sorted(root.rglob("*.yaml")):
        relpath = path.relative_to(root).as_posix()
        for index, data in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8")), start=1):
            if isinstance(data, dict):
                documents.append(CorpusDocument(relpath, index, data))
    return documents


def served_kinds(plane: ControlPlane) -> dict[tuple[str, str], bool]:
    """(apiVersion, kind) -> namespaced, for every resource the API server serves (discovery)."""
    served: dict[tuple[str, str], bool] = {}
    versions = ["v1"]
    for group in (plane.get_json("/apis") or {}).get("groups", []):
        versions += [version["groupVersion"] for version in group["versions"]]
    for group_version in versions:
        path = "/api/v1" if group_version == "v1" else f"/apis/{group_version}"
        for resource in (plane.get_json(path) or {}).get("resources", []):
            if "/" not in resource["name"]:  # subresources
                served[(group_version, resource["kind"])] = bool(resource["namespaced"])
    return served


@dataclass
class CorpusRun:
    """The corpus as applied in one namespace: one file per document, and the CLI's record of each."""

    namespace: str
    files: dict[str, Path]  # document key -> file holding it alone (namespace set when namespaced)
    records: dict[str, dict[str, Any]]  # document key -> `trainguard check -o json` result


def run_corpus(
    setup: Admission,
    documents: list[CorpusDocument],
    namespace: str,
    served: dict[tuple[str, str], bool],
) -> CorpusRun:
    """Write each document alone into a file (moved into `namespace` when namespaced) and decide them
    with the CLI.

    The CLI is given what the cluster holds as context and nothing more: the PriorityClasses (the
    webhook knows them from its cache), and no TrainingRuntime (a dry-run creates none, so the
    webhook's cache has none either). Runtimes are decided in a second, separate run.
    """
    directory = setup.workdir / "corpus" / namespace
    directory.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for number, document in enumerate(documents):
        data = json.loads(json.dumps(document.data))
        if served.get(document.gvk):
            data.setdefault("metadata", {})["namespace"] = namespace
        path = directory / f"{number:03d}-{document.relpath.replace('/', '__')}-{document.index}.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        files[document.key] = path
    records: dict[str, dict[str, Any]] = {}
    runtimes = [files[d.key] for d in documents if d.is_runtime]
    workloads = [files[d.key] for d in documents if not d.is_runtime]
    for group in (workloads + [priority_classes_file(setup.workdir)], runtimes):
        if group:
            for record in setup.check(group, namespace)["results"]:
                records[record["source"].rpartition("#")[0]] = record
    by_file = {str(path): key for key, path in files.items()}
    return CorpusRun(namespace, files, {by_file[s]: r for s, r in records.items() if s in by_file})


# --- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def webhook_certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CA and serving certificate from ``trainguard certs --host 127.0.0.1``."""
    directory = tmp_path_factory.mktemp("trainguard-certs")
    _checked(trainguard("certs", "--out", str(directory), "--host", HOST), "trainguard certs")
    for name in ("ca.crt", "tls.crt", "tls.key"):
        assert (directory / name).is_file(), f"trainguard certs wrote no {name}"
    return directory


@pytest.fixture(scope="session")
def platform_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("trainguard-config") / "platform.yaml"
    path.write_text(yaml.safe_dump(PLATFORM_CONFIG, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def transcripts(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Transcripts:
    """Where the kubectl transcripts go; the directory is printed after the test summary."""
    configured = os.environ.get("TRAINGUARD_E2E_TRANSCRIPTS")
    if configured:
        directory = Path(configured)
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob("*.txt"):
            stale.unlink()
    else:
        directory = tmp_path_factory.mktemp("e2e", numbered=True) / "transcripts"
        directory.mkdir()
    kept = Transcripts(directory)

    def report() -> None:
        reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None and kept.written:
            reporter.write_line(f"kubectl transcripts: {directory}")

    pytestconfig.add_cleanup(report)  # after the summary, where it is not captured
    return kept


@pytest.fixture(scope="module")
def admission(
    control_plane: ControlPlane,
    webhook_certs: Path,
    platform_config: Path,
    transcripts: Transcripts,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Admission]:
    """trainguard serving on 127.0.0.1 and registered with the API server, until the module ends."""
    workdir = tmp_path_factory.mktemp("trainguard-webhook")
    for namespace in (TEAM_NS, OTHER_NS, CORPUS_NS, SYSTEM_NS):
        if control_plane.kubectl("get", "namespace", namespace, check=False).returncode != 0:
            control_plane.kubectl("create", "namespace", namespace)
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(priority_class_manifests()))
    server = WebhookServer(
        certs=webhook_certs,
        config=platform_config,
        kubeconfig=control_plane.kubeconfig,
        log=workdir / "serve.log",
    )
    # trainguard's own PolicyException CRD, so the webhook's exception cache has objects to watch.
    with exception_crd(control_plane):
        server.start()
        setup = Admission(control_plane, server, webhook_certs, platform_config, transcripts, workdir)
        try:
            server.wait_for_cluster_caches()
            rendered = _checked(
                webhook_configurations(webhook_certs, server.url, platform_config),
                "trainguard webhook-config",
            ).stdout
            (workdir / "webhook-configurations.yaml").write_text(rendered, encoding="utf-8")
            control_plane.kubectl("apply", "-f", "-", input=rendered)
            wait_until_enforced(setup)
            yield setup
        finally:
            for kind in ("validatingwebhookconfiguration", "mutatingwebhookconfiguration"):
                control_plane.kubectl("delete", kind, CONFIGURATION_NAME, "--ignore-not-found", check=False)
            try:
                server.stop()
            finally:
                server.kill()


@contextlib.contextmanager
def exception_crd(control_plane: ControlPlane) -> Iterator[None]:
    """trainguard's PolicyException CRD, Established, while the block runs; then deleted, since the
    session's control plane is shared: it is left with the training CRDs only."""
    control_plane.kubectl(
        "apply", "-f", str(REPO_ROOT / "deploy" / "crds" / "trainguard.dev_policyexceptions.yaml")
    )
    try:
        control_plane.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", "crd/policyexceptions.trainguard.dev"
        )
        yield
    finally:
        control_plane.kubectl(
            "delete",
            "crd",
            "policyexceptions.trainguard.dev",
            "--ignore-not-found",
            "--timeout=60s",
            check=False,
        )


def wait_until_enforced(setup: Admission, timeout: float = PROPAGATION_TIMEOUT) -> None:
    """Until the API server calls both webhooks (it picks configurations up from an informer).

    Probe: a dry-run create of a multi-node job in the queue-mapped namespace must come back with the
    queue label (mutating webhook), and the same job without a queue must be denied (validating).
    """
    mutated = pytorchjob("tg-probe", TEAM_NS)
    denied = pytorchjob("tg-probe", OTHER_NS)
    deadline = time.monotonic() + timeout
    while True:
        first = setup.kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(mutated)
        )
        second = setup.kubectl(
            "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(denied)
        )
        labels = json.loads(first.stdout)["metadata"].get("labels", {}) if first.returncode == 0 else {}
        if labels.get("kueue.x-k8s.io/queue-name") == TEAM_QUEUE and "gang-required" in second.stderr:
            return
        if time.monotonic() > deadline:
            raise WebhookError(
                f"the API server did not call trainguard within {timeout:.0f} s "
                f"(mutated labels: {labels}; validating: {second.stderr.strip()!r}):\n"
                f"{setup.server.log_tail()}"
            )
        time.sleep(0.2)

"""A real Kubernetes control plane on 127.0.0.1: etcd plus kube-apiserver, and kubectl against it.

The flags follow controller-runtime's envtest (pkg/internal/testing/controlplane): one etcd member
with plain-HTTP loopback listeners, one kube-apiserver with a secure port only, client-certificate
authentication, RBAC, and the ServiceAccount admission plugin disabled.

Nothing else runs: no kube-controller-manager, no scheduler, no kubelet. What that changes:

* Pods are accepted and stored but stay Pending forever (no scheduler, no node); Jobs never get
  Pods, Deployments never get ReplicaSets, and no operator reconciles the training CRDs. The suite
  tests admission only, which all happens inside the API server.
* No ServiceAccount, token or ``kube-root-ca.crt`` ConfigMap is created in new namespaces (those are
  controller-manager controllers), so the ServiceAccount admission plugin is disabled, as in envtest:
  with it, every Pod would be rejected for lack of a ``default`` ServiceAccount.
* Deleting a namespace leaves it ``Terminating`` (the namespace controller empties and finalises it);
  use fresh namespace names instead of recreating deleted ones.
* Garbage collection does not run: owner references are stored but dependents are never deleted.

What does run inside the API server: the ``default``, ``kube-system``, ``kube-public`` and
``kube-node-lease`` namespaces, the RBAC bootstrap roles, the built-in PriorityClasses, CRD
establishment, and every admission plugin (Priority, webhooks, ValidatingAdmissionPolicy, ...).

Webhooks: nothing stands between the API server and a webhook at ``https://127.0.0.1:PORT``. There is
no egress selector, and the proxy variables are removed from the API server's environment, with
``NO_PROXY`` set to the loopback names.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import functools
import hashlib
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .binaries import Binaries, cache_root, ensure_binaries

HOST = "127.0.0.1"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
ETCD_MEMBER = "trainguard-e2e"
ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "LimitRanger",
    "Priority",
    "DefaultTolerationSeconds",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ResourceQuota",
)
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
NO_PROXY = "127.0.0.1,localhost,::1"

REPO_ROOT = Path(__file__).resolve().parents[2]
LOCAL_CRDS = Path(__file__).resolve().parent / "crds"
# Two CRD files in the shared folder define mpijobs.kubeflow.org: a cluster holds one of them.
# The suite installs the mpi-operator's (kubeflow.org/v2beta1), not the Training Operator v1 one.
SKIPPED_SHARED_CRDS = ("kubeflow-training-operator-v1/kubeflow.org_mpijobs.yaml",)


class ControlPlaneError(RuntimeError):
    """The control plane did not start, or stopped answering."""


class KubectlError(subprocess.CalledProcessError):
    """kubectl exited non-zero; the message carries its stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.stderr}"


def shared_dir() -> Path:
    """The shared material: $TRAINGUARD_SHARED_DIR, else the ``shared`` folder beside the repository."""
    override = os.environ.get("TRAINGUARD_SHARED_DIR")
    return Path(override) if override else REPO_ROOT.parent / "shared"


def default_crd_files() -> list[Path]:
    """The upstream CRDs from the shared folder when present, else the minimal ones in tests/e2e/crds."""
    upstream = shared_dir() / "crds"
    if upstream.is_dir():
        skipped = {upstream / name for name in SKIPPED_SHARED_CRDS}
        files = sorted(path for path in upstream.rglob("*.yaml") if path not in skipped)
        if files:
            return files
    return sorted(LOCAL_CRDS.glob("*.yaml"))


# Plain-HTTP client for etcd's loopback health endpoint, never going through a proxy.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def crd_established(crd: dict[str, Any]) -> bool:
    conditions = crd.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def clean_environment() -> dict[str, str]:
    """The environment for the control-plane processes and kubectl: no proxy for loopback traffic."""
    env = {key: value for key, value in os.environ.items() if key not in PROXY_VARIABLES}
    env["NO_PROXY"] = env["no_proxy"] = NO_PROXY
    return env


# --- certificates ----------------------------------------------------------------------------------


def write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def _name(common_name: str, organizations: Iterable[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


class CertificateAuthority:
    """A throwaway certificate authority (ECDSA P-256), valid for a day."""

    def __init__(self, common_name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        subject = _name(common_name)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )

    def issue(
        self,
        common_name: str,
        *,
        organizations: Iterable[str] = (),
        dns_names: Sequence[str] = (),
        ip_addresses: Sequence[str] = (),
        server: bool,
    ) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False
            )
        )
        if dns_names or ip_addresses:
            names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
            names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        return builder.sign(self.key, hashes.SHA256()), key


# --- processes -------------------------------------------------------------------------------------


PR_SET_PDEATHSIG = 1
try:  # resolved here, in the parent: loading a library between fork and exec is not safe
    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform == "linux" else None
except (OSError, AttributeError):
    _prctl = None


def _die_with_parent() -> None:
    """Runs in the child before exec: it gets SIGTERM when the test process dies, even by SIGKILL."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class _Process:
    """A child process writing to a log file, stopped with SIGTERM and then SIGKILL.

    It runs in a session of its own, so that a Ctrl-C aimed at pytest does not reach it before the
    orderly stop; and it dies with the test process, so that nothing outlives a killed run.
    """

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log = log
        with log.open("wb") as log_file:
            self.popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def running(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(timeout=timeout)


class ControlPlane:
    """etcd and kube-apiserver on free 127.0.0.1 ports, state in a temporary directory.

    Use as a context manager, or call start() and stop(). ``kubeconfig`` authenticates as the
    ``admin`` user in ``system:masters``; ``kubectl()`` runs the real kubectl with it.
    """

    def __init__(
        self,
        binaries: Binaries | None = None,
        *,
        kubectl_path: str | None = None,
        start_timeout: float = 60.0,
        stop_timeout: float = 15.0,
        extra_apiserver_flags: Sequence[str] = (),
        etcd_seed: Path | None = None,
    ) -> None:
        self._binaries = binaries
        self.etcd_seed = etcd_seed
        self.kubectl_path = kubectl_path or os.environ.get("TRAINGUARD_KUBECTL") or shutil.which("kubectl")
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.extra_apiserver_flags = list(extra_apiserver_flags)
        self.dir: Path | None = None
        self.etcd: _Process | None = None
        self.apiserver: _Process | None = None
        self.apiserver_flags: list[str] = []
        self.port = 0
        self.etcd_url = ""
        self._https: urllib.request.OpenerDirector | None = None
        self.crd_names: list[str] = []

    # --- lifecycle ---

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        if self.kubectl_path is None:
            raise ControlPlaneError("kubectl not found (set TRAINGUARD_KUBECTL or put kubectl on PATH)")
        binaries = self._binaries or ensure_binaries()
        self._binaries = binaries
        self.dir = Path(tempfile.mkdtemp(prefix="trainguard-e2e-"))
        try:
            self._write_certificates()
            self._start_etcd(binaries.etcd)
            self._start_apiserver(binaries.kube_apiserver)
            self._write_kubeconfig()
            self._wait_for_default_namespace()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, *, keep_dir: bool = False) -> None:
        """Stop the API server, then etcd; SIGKILL whichever outlives the stop timeout.

        The temporary directory is removed unless keep_dir or $TRAINGUARD_E2E_KEEP is set.
        """
        for process in (self.apiserver, self.etcd):
            if process is not None:
                process.stop(self.stop_timeout)
        self.apiserver = self.etcd = None
        self._https = None
        if self.dir is not None and not keep_dir and not os.environ.get("TRAINGUARD_E2E_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    # --- paths ---

    def _path(self, name: str) -> Path:
        if self.dir is None:
            raise ControlPlaneError("the control plane is not started")
        return self.dir / name

    @property
    def url(self) -> str:
        return f"https://{HOST}:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self._path("kubeconfig")

    @property
    def pki_dir(self) -> Path:
        """ca.crt, the admin client certificate and the service-account key pair (sa.key, sa.pub)."""
        return self._path("pki")

    @property
    def ca_file(self) -> Path:
        """The CA that signed the API server's serving certificate and the client certificates."""
        return self._path("pki/ca.crt")

    @property
    def binaries(self) -> Binaries:
        if self._binaries is None:
            raise ControlPlaneError("the control plane is not started")
        return self._binaries

    # --- certificates ---

    def _write_certificates(self) -> None:
        pki = self._path("pki")
        pki.mkdir()
        ca = CertificateAuthority("trainguard-e2e-ca")
        write_cert(pki / "ca.crt", ca.cert)
        serving, serving_key = ca.issue(
            "kube-apiserver",
            dns_names=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
            ip_addresses=[HOST, "10.0.0.1"],
            server=True,
        )
        write_cert(pki / "apiserver.crt", serving)
        write_key(pki / "apiserver.key", serving_key)
        admin, admin_key = ca.issue("admin", organizations=["system:masters"], server=False)
        write_cert(pki / "admin.crt", admin)
        write_key(pki / "admin.key", admin_key)
        sa_key = ec.generate_private_key(ec.SECP256R1())
        write_key(pki / "sa.key", sa_key)
        (pki / "sa.pub").write_bytes(
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )

    def _opener(self) -> urllib.request.OpenerDirector:
        """An HTTPS client authenticated as admin, never going through a proxy."""
        if self._https is None:
            pki = self._path("pki")
            context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
            context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
            self._https = urllib.request.build_opener(
                urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
            )
        return self._https

    # --- etcd ---

    def _start_etcd(self, etcd: Path) -> None:
        data_dir = self._path("etcd-data")
        for _attempt in range(3):
            shutil.rmtree(data_dir, ignore_errors=True)
            if self.etcd_seed is not None:
                shutil.copytree(self.etcd_seed, data_dir)
            client, peer = free_port(), free_port()
            client_url, peer_url = f"http://{HOST}:{client}", f"http://{HOST}:{peer}"
            argv = [
                str(etcd),
                f"--name={ETCD_MEMBER}",
                f"--data-dir={data_dir}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster={ETCD_MEMBER}={peer_url}",
                # Test data: durability across power loss does not matter, speed does (envtest too).
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ]
            self.etcd = _Process("etcd", argv, self._path("etcd.log"), clean_environment())
            self.etcd_url = client_url
            if self._wait_until(self.etcd, functools.partial(self._etcd_healthy, client_url)):
                return
            if "address already in use" not in self.etcd.tail():
                break
            self.etcd.stop(self.stop_timeout)
        self._fail(self.etcd, f"etcd did not become healthy within {self.start_timeout:.0f} s")

    @staticmethod
    def _etcd_healthy(client_url: str) -> bool:
        try:
            with _DIRECT.open(f"{client_url}/health", timeout=2) as response:
                return bool(json.load(response).get("health") == "true")
        except (OSError, ValueError):
            return False

    # --- kube-apiserver ---

    def _apiserver_argv(self, apiserver: Path) -> list[str]:
        pki = self._path("pki")
        return [
            str(apiserver),
            f"--bind-address={HOST}",
            f"--advertise-address={HOST}",
            f"--secure-port={self.port}",
            f"--etcd-servers={self.etcd_url}",
            "--storage-backend=etcd3",
            f"--cert-dir={pki}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-issuer={self.url}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--authorization-mode=RBAC",
            f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
            # No token controller runs, so no namespace gets a `default` ServiceAccount (envtest too).
            "--disable-admission-plugins=ServiceAccount",
            "--allow-privileged=true",
            # The `kubernetes` Service endpoint would be 127.0.0.1, which Endpoints validation
            # rejects as loopback: the reconciler would log an error every ten seconds.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            *self.extra_apiserver_flags,
        ]

    def _start_apiserver(self, apiserver: Path) -> None:
        for _attempt in range(3):
            self.port = free_port()
            self.apiserver_flags = self._apiserver_argv(apiserver)[1:]
            self.apiserver = _Process(
                "kube-apiserver",
                self._apiserver_argv(apiserver),
                self._path("kube-apiserver.log"),
                clean_environment(),
            )
            if self._wait_until(self.apiserver, self._ready):
                return
            if "address already in use" not in self.apiserver.tail():
                break
            self.apiserver.stop(self.stop_timeout)
        self._fail(self.apiserver, f"kube-apiserver was not ready within {self.start_timeout:.0f} s")

    def _ready(self) -> bool:
        return self.status("/readyz") == 200

    def _get(self, path: str) -> tuple[int, bytes]:
        try:
            with self._opener().open(self.url + path, timeout=10) as response:
                return int(response.status), response.read()
        except urllib.error.HTTPError as error:
            return int(error.code), b""
        except OSError:
            return 0, b""

    def status(self, path: str) -> int:
        """Status code of a GET on the API server as admin (0 when it does not answer)."""
        return self._get(path)[0]

    def get_text(self, path: str) -> str | None:
        """The body of a GET on the API server as admin (its /metrics, say); None unless 200."""
        code, body = self._get(path)
        return body.decode("utf-8", errors="replace") if code == 200 else None

    def get_json(self, path: str) -> Any:
        """The decoded body of a GET on the API server as admin; None unless it answers 200."""
        code, body = self._get(path)
        return json.loads(body) if code == 200 else None

    def _wait_until(self, process: _Process, check: Callable[[], bool]) -> bool:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if not process.running():
                return False
            if check():
                return True
            time.sleep(0.1)
        return False

    def _wait_for_default_namespace(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while self.status("/api/v1/namespaces/default") != 200:
            if time.monotonic() > deadline:
                assert self.apiserver is not None
                self._fail(self.apiserver, "the `default` namespace was not created")
            time.sleep(0.1)

    def _fail(self, process: _Process | None, message: str) -> None:
        if process is None:
            raise ControlPlaneError(message)
        state = "running" if process.running() else f"exited with {process.popen.returncode}"
        raise ControlPlaneError(f"{message} ({process.name} {state}); last log lines:\n{process.tail()}")

    def _write_kubeconfig(self) -> None:
        pki = self._path("pki")
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "e2e", "cluster": {"server": self.url, "certificate-authority": str(pki / "ca.crt")}}
            ],
            "users": [
                {
                    "name": "admin",
                    "user": {
                        "client-certificate": str(pki / "admin.crt"),
                        "client-key": str(pki / "admin.key"),
                    },
                }
            ],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "admin"}}],
            "current-context": "e2e",
        }
        self._path("kubeconfig").write_text(yaml.safe_dump(config), encoding="utf-8")

    # --- kubectl ---

    def kubectl(
        self,
        *args: str,
        input: str | bytes | None = None,
        check: bool = True,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane; raise with its stderr when check and it fails."""
        assert self.kubectl_path is not None
        argv = [
            self.kubectl_path,
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self._path('kube-cache')}",
            *args,
        ]
        env = clean_environment()
        env.pop("KUBECONFIG", None)
        text = input.decode() if isinstance(input, bytes) else input
        result = subprocess.run(
            argv,
            input=text,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, argv, output=result.stdout, stderr=result.stderr)
        return result

    def kubectl_json(self, *args: str) -> dict[str, Any]:
        """``kubectl ... -o json``, decoded."""
        data: dict[str, Any] = json.loads(self.kubectl(*args, "-o", "json").stdout)
        return data

    # --- CRDs ---

    def apply_crds(self, files: Iterable[Path] | None = None, *, timeout: float = 180.0) -> list[str]:
        """Install CRDs (default: default_crd_files()) and wait until each one is served.

        Server-side apply: several upstream CRDs are over 256 KiB, the limit of the annotation in
        which client-side apply keeps the last applied configuration. Returns the CRD names.
        """
        paths = list(default_crd_files() if files is None else files)
        if not paths:
            raise ControlPlaneError("no CRD files to apply")
        arguments: list[str] = []
        for path in paths:
            arguments += ["-f", str(path)]
        result = self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=trainguard-e2e",
            "-o",
            "name",
            *arguments,
            timeout=timeout,
        )
        names = [
            line.partition("/")[2]
            for line in result.stdout.split()
            if line.startswith("customresourcedefinition.apiextensions.k8s.io/")
        ]
        self.wait_for_crds(names, timeout=timeout)
        self.crd_names = sorted({*self.crd_names, *names})
        return names

    def wait_for_crds(self, names: Iterable[str], *, timeout: float = 60.0) -> None:
        """Wait until each CRD is Established and every served version is in API discovery.

        `kubectl wait --for=condition=Established` is not used: it fails, instead of waiting,
        on a CRD whose status has no conditions yet.
        """
        pending = set(names)
        deadline = time.monotonic() + timeout
        while True:
            for name in sorted(pending):
                crd = self.get_json(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
                if crd is not None and crd_established(crd) and self._crd_discoverable(crd):
                    pending.discard(name)
            if not pending:
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"CRDs not established within {timeout:.0f} s: {sorted(pending)}")
            time.sleep(0.2)

    def _crd_discoverable(self, crd: dict[str, Any]) -> bool:
        spec = crd["spec"]
        for version in spec["versions"]:
            if not version.get("served"):
                continue
            listed = self.get_json(f"/apis/{spec['group']}/{version['name']}")
            plurals = {resource["name"] for resource in (listed or {}).get("resources", [])}
            if spec["names"]["plural"] not in plurals:
                return False
        return True


# --- a control plane with the CRDs, started from a cached etcd data directory ------------------------

SEED_FORMAT = "1"


def start_with_crds(
    binaries: Binaries | None = None,
    files: Iterable[Path] | None = None,
    *,
    timeout: float = 180.0,
) -> ControlPlane:
    """A started control plane with the CRDs (default: default_crd_files()) installed and served.

    Installing the upstream CRDs (10 MB of schemas) is the slow part of a start. So the first time,
    they are applied to an empty etcd, the control plane is stopped, and etcd's data directory is
    kept next to the binaries as a seed, keyed by the binaries' versions and the CRD files' bytes.
    Later starts copy the seed in and only wait until each CRD is served again. A seed that does not
    start is discarded and made again. $TRAINGUARD_E2E_FRESH=1 starts from an empty etcd every time.
    """
    binaries = binaries or ensure_binaries()
    paths = list(default_crd_files() if files is None else files)
    if os.environ.get("TRAINGUARD_E2E_FRESH"):
        plane = ControlPlane(binaries).start()
        try:
            plane.apply_crds(paths, timeout=timeout)
        except BaseException:
            plane.stop()
            raise
        return plane

    seed = _seed_dir(binaries, paths)
    for attempt in (1, 2):
        if not (seed / "crds.json").is_file():
            _make_seed(binaries, paths, seed, timeout)
        names = json.loads((seed / "crds.json").read_text(encoding="utf-8"))
        plane = ControlPlane(binaries, etcd_seed=seed / "etcd-data")
        try:
            plane.start()
            plane.wait_for_crds(names, timeout=timeout)
        except ControlPlaneError as error:
            plane.stop()
            if attempt == 2:
                raise
            print(f"discarding the etcd seed {seed}: {error}", file=sys.stderr)
            shutil.rmtree(seed, ignore_errors=True)
            continue
        except BaseException:
            plane.stop()
            raise
        plane.crd_names = sorted(names)
        return plane
    raise AssertionError("unreachable")


def _seed_dir(binaries: Binaries, paths: Sequence[Path]) -> Path:
    digest = hashlib.sha256()
    for part in (SEED_FORMAT, binaries.kubernetes_version, binaries.etcd_version, ETCD_MEMBER):
        digest.update(part.encode() + b"\0")
    for path in paths:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return cache_root() / binaries.kubernetes_version / f"etcd-seed-{digest.hexdigest()[:16]}"


def _make_seed(binaries: Binaries, paths: Sequence[Path], seed: Path, timeout: float) -> None:
    started = time.monotonic()
    plane = ControlPlane(binaries).start()
    try:
        names = plane.apply_crds(paths, timeout=timeout)
        plane.stop(keep_dir=True)  # a clean shutdown: the data directory is consistent
        partial = seed.with_name(f".{seed.name}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        shutil.copytree(plane._path("etcd-data"), partial / "etcd-data")
        (partial / "crds.json").write_text(json.dumps(names), encoding="utf-8")
        for stale in seed.parent.glob("etcd-seed-*"):
            if stale != seed:
                shutil.rmtree(stale, ignore_errors=True)
        try:
            partial.rename(seed)
        except OSError:  # another process made the same seed meanwhile
            shutil.rmtree(partial, ignore_errors=True)
    finally:
        plane.stop()
    elapsed = time.monotonic() - started
    print(f"installed {len(names)} CRDs into a new etcd seed in {elapsed:.0f} s: {seed}", file=sys.stderr)

"""Build, once, the fleet's control-plane components from Go modules.

Built like kube-apiserver and etcd (tests/e2e/binaries.py: the same `go_build`, lock and stamp):

* ``kube-scheduler`` and ``kube-controller-manager`` come from ``go/kubernetes/``, a copy of the
  apiserver's wrapper module (tests/e2e/go/: the same require and replace lines) that also imports
  them; the Go build cache compiles what they share with kube-apiserver once. A module of its own,
  because adding them to the apiserver's go.sum would change kube-apiserver's stamp and rebuild it.
  They are cached beside kube-apiserver in ``$TRAINGUARD_E2E_CACHE/<k8s-version>/``, under its lock;
* KWOK, Kueue and the training operator each come from a wrapper module under ``go/<name>/``
  (go.mod + tools.go + committed go.sum) and are cached in ``$TRAINGUARD_E2E_CACHE/<name>-<version>/``.

The CRDs of Kueue and the training operator are read at run time from the module source in the Go
module cache (`crd_dir`), never copied into the repository.

``python -m tests.fleet.binaries`` builds everything and prints each binary with its build time.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.binaries import (
    DEFAULT_BUILD_TIMEOUT,
    LOCK_FILE,
    BuildError,
    acquire_build_lock,
    apiserver_ldflags,
    build_env,
    build_env_key,
    cache_root,
    find_go,
    go_build,
    kubernetes_version,
    required_version,
    up_to_date,
)

FLEET_GO_DIR = Path(__file__).resolve().parent / "go"


@dataclass(frozen=True)
class Patch:
    """One literal substitution in the source of a component's main package, applied to a copy at
    build time (`Component.build_site`). Used only where an upstream binary hard-codes something
    that cannot run out of cluster on 127.0.0.1 and offers no flag for it."""

    file: str  # relative to the module's source directory, in the main package
    old: str
    new: str
    why: str


@dataclass(frozen=True)
class Component:
    name: str
    module: str
    module_dir: Path
    package: str
    patches: tuple[Patch, ...] = ()

    @property
    def version(self) -> str:
        return required_version(self.module_dir / "go.mod", self.module)

    def ldflags(self) -> str:
        if self.module == "k8s.io/kubernetes":
            return apiserver_ldflags(self.version)
        flags = ["-s", "-w"]
        if self.name == "kueue":
            flags.append(f"-X sigs.k8s.io/kueue/pkg/version.GitVersion={self.version}")
        return " ".join(flags)

    def directory(self) -> Path:
        # The Kubernetes components live beside kube-apiserver, under its lock: they share its
        # module and build cache, and a kube-apiserver build in progress must finish first.
        if self.module == "k8s.io/kubernetes":
            return cache_root() / self.version
        return cache_root() / f"{self.name}-{self.version}"

    def stamp(self) -> str:
        digest = hashlib.sha256()
        for part in (self.name, self.version, self.package, self.ldflags(), build_env_key()):
            digest.update(part.encode() + b"\0")
        for file in ("go.mod", "go.sum"):
            digest.update((self.module_dir / file).read_bytes() + b"\0")
        for patch in self.patches:
            digest.update(f"{patch.file}\0{patch.old}\0{patch.new}\0".encode())
        return digest.hexdigest()

    def build_site(self, directory: Path) -> tuple[Path, str]:
        """Where to run `go build` and which package: the wrapper module as it is, or, with patches,
        a copy of it in `directory` whose own main package is upstream's, patched. (Go refuses
        `-overlay` for files in the module cache, and the module cache must stay untouched.)"""
        if not self.patches:
            return self.module_dir, self.package
        package_dir = module_source(self) / self.package.removeprefix(self.module).lstrip("/")
        texts = {
            path.name: path.read_text(encoding="utf-8")
            for path in package_dir.glob("*.go")
            if not path.name.endswith("_test.go")
        }
        for patch in self.patches:
            text = texts.get(Path(patch.file).name, "")
            if text.count(patch.old) != 1:
                raise BuildError(
                    f"{package_dir / Path(patch.file).name} no longer holds exactly one {patch.old!r}"
                )
            texts[Path(patch.file).name] = text.replace(patch.old, patch.new)
        shutil.rmtree(directory, ignore_errors=True)
        (directory / "main").mkdir(parents=True)
        for name in ("go.mod", "go.sum"):
            shutil.copyfile(self.module_dir / name, directory / name)
        for name, text in texts.items():
            (directory / "main" / name).write_text(text, encoding="utf-8")
        return directory, "./main"


KUBE_SCHEDULER = Component(
    "kube-scheduler", "k8s.io/kubernetes", FLEET_GO_DIR / "kubernetes", "k8s.io/kubernetes/cmd/kube-scheduler"
)
KUBE_CONTROLLER_MANAGER = Component(
    "kube-controller-manager",
    "k8s.io/kubernetes",
    FLEET_GO_DIR / "kubernetes",
    "k8s.io/kubernetes/cmd/kube-controller-manager",
)
KWOK = Component("kwok", "sigs.k8s.io/kwok", FLEET_GO_DIR / "kwok", "sigs.k8s.io/kwok/cmd/kwok")
KUEUE = Component(
    "kueue",
    "sigs.k8s.io/kueue",
    FLEET_GO_DIR / "kueue",
    "sigs.k8s.io/kueue/cmd/kueue",
    patches=(
        Patch(
            "cmd/kueue/main.go",
            'metricsCertPath := "/etc/kueue/metrics/certs"',
            'metricsCertPath := os.Getenv("KUEUE_METRICS_CERT_DIR")',
            "without internal certificate management (whose certificates name only the in-cluster "
            "Service, never 127.0.0.1) the manager exits unless /etc/kueue/metrics/certs holds a "
            "certificate; the fleet gives it one from its own directory instead of writing to /etc",
        ),
    ),
)
# Set, the training operator serves its webhook from this directory (the fleet's certificate for
# 127.0.0.1) instead of running its certificate rotator, which only works where a kubelet mounts
# the rotator's Secret at a fixed path under /tmp.
TRAINING_OPERATOR_CERT_DIR = "TRAINING_OPERATOR_CERT_DIR"
TRAINING_OPERATOR = Component(
    "training-operator",
    "github.com/kubeflow/training-operator",
    FLEET_GO_DIR / "training-operator",
    "github.com/kubeflow/training-operator/cmd/training-operator.v1",
    patches=(
        Patch(
            "cmd/training-operator.v1/main.go",
            "Port: webhookServerPort,",
            f'Port: webhookServerPort, Host: "127.0.0.1", CertDir: os.Getenv("{TRAINING_OPERATOR_CERT_DIR}"),',
            "its webhook server has a port flag but no host or certificate-directory flag",
        ),
        Patch(
            "cmd/training-operator.v1/main.go",
            "\tdefer close(certsReady)\n",
            "",
            "manageCerts closes it when the rotator does not run",
        ),
        Patch(
            "cmd/training-operator.v1/main.go",
            "if err = cert.ManageCerts(mgr, certGenerationConfig, certsReady); err != nil {",
            "if err = manageCerts(mgr, certGenerationConfig, certsReady); err != nil {",
            "the rotator waits forever for a Secret volume out of cluster",
        ),
        Patch(
            "cmd/training-operator.v1/main.go",
            "func setupControllers(",
            f"""func manageCerts(mgr ctrl.Manager, config cert.Config, ready chan struct{{}}) error {{
\tif os.Getenv("{TRAINING_OPERATOR_CERT_DIR}") != "" {{
\t\tclose(ready)
\t\treturn nil
\t}}
\treturn cert.ManageCerts(mgr, config, ready)
}}

func setupControllers(""",
            "see the patch above",
        ),
    ),
)
COMPONENTS = (KUBE_SCHEDULER, KUBE_CONTROLLER_MANAGER, KWOK, KUEUE, TRAINING_OPERATOR)


def ensure(component: Component, *, timeout: float | None = None) -> Path:
    """The cached binary of `component`, built first when missing or stale. Raises BuildError."""
    if component.module == "k8s.io/kubernetes" and component.version != kubernetes_version():
        raise BuildError(
            f"{component.module_dir / 'go.mod'} requires k8s.io/kubernetes {component.version}, "
            f"the apiserver's module {kubernetes_version()}: copy its require and replace lines"
        )
    if timeout is None:
        timeout = float(os.environ.get("TRAINGUARD_E2E_BUILD_TIMEOUT", DEFAULT_BUILD_TIMEOUT))
    directory = component.directory()
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / component.name
    stamp = component.stamp()
    if up_to_date(binary, stamp):
        return binary
    with (directory / LOCK_FILE).open("a+") as lock:
        # Another process may be building kube-apiserver here for several minutes: wait long.
        acquire_build_lock(lock.fileno(), 3 * timeout)
        try:
            if not up_to_date(binary, stamp):
                site, package = component.build_site(directory / "src")
                go_build(
                    f"{component.name} {component.version}",
                    lambda partial: [
                        find_go(),
                        "build",
                        "-trimpath",
                        "-ldflags",
                        component.ldflags(),
                        "-o",
                        str(partial),
                        package,
                    ],
                    module_dir=site,
                    env=build_env(),
                    binary=binary,
                    stamp=stamp,
                    timeout=timeout,
                    note="first use only; cold, this takes several minutes on 2 cores",
                )
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return binary


def module_source(component: Component) -> Path:
    """Where the Go module cache holds `component`'s module source (downloaded if missing)."""
    result = subprocess.run(
        [find_go(), "list", "-m", "-json", component.module],
        cwd=component.module_dir,
        env=build_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if result.returncode != 0:
        raise BuildError(f"go list -m {component.module} failed: {result.stderr.strip()}")
    directory = json.loads(result.stdout).get("Dir")
    if not directory:
        # `go list -m` names the Dir only once the module is downloaded.
        subprocess.run(
            [find_go(), "mod", "download", component.module],
            cwd=component.module_dir,
            env=build_env(),
            check=True,
            timeout=600,
        )
        return module_source(component)
    return Path(directory)


def crd_dir(component: Component) -> Path:
    """The directory of `component`'s CRD manifests inside its module source."""
    relative = {
        "kueue": "config/components/crd/bases",
        "training-operator": "manifests/base/crds",
    }[component.name]
    return module_source(component) / relative


if __name__ == "__main__":
    wanted = sys.argv[1:] or [component.name for component in COMPONENTS]
    by_name = {component.name: component for component in COMPONENTS}
    for name in wanted:
        print(f"{name}: {ensure(by_name[name])}", flush=True)

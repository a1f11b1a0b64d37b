"""Build, once, the `helm` binary the deployment tests run, from the Go module in ``go/helm/``.

Built like the end-to-end suite's kube-apiserver (tests/e2e/binaries.py): the version is read from
``go/helm/go.mod``, the binary is cached in ``$TRAINGUARD_E2E_CACHE/helm-<version>/helm`` (default
``~/.cache/trainguard-e2e``) next to a stamp that hashes go.mod, go.sum and the flags, and a lock file
serialises builds across processes (a process that waited reuses the other's result).

``python -m tests.deploy.tools`` builds it and prints the path (`.ci/setup` runs that).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path

from tests.e2e.binaries import (
    acquire_build_lock,
    cache_root,
    find_go,
    go_build,
    required_version,
    up_to_date,
)

HELM_MODULE_DIR = Path(__file__).resolve().parent / "go" / "helm"
HELM_MODULE = "helm.sh/helm/v3"
HELM_PACKAGE = "helm.sh/helm/v3/cmd/helm"
DEFAULT_BUILD_TIMEOUT = 1800.0

# What `make build` in the Helm repository sets: the release it reports (`helm version`), and the
# Kubernetes version `helm template` and `helm lint` assume without a cluster (that of its client-go).
_KUBE_MINOR = "37"


def helm_version() -> str:
    return required_version(HELM_MODULE_DIR / "go.mod", HELM_MODULE)


def _ldflags(version: str) -> str:
    flags = ["-s", "-w", f"-X helm.sh/helm/v3/internal/version.version={version}"]
    for package in ("helm.sh/helm/v3/pkg/lint/rules", "helm.sh/helm/v3/pkg/chartutil"):
        flags += [f"-X {package}.k8sVersionMajor=1", f"-X {package}.k8sVersionMinor={_KUBE_MINOR}"]
    return " ".join(flags)


_ENV = {"CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-mod=readonly -buildvcs=false"}


def _stamp(version: str) -> str:
    digest = hashlib.sha256()
    for part in (version, HELM_PACKAGE, _ldflags(version), repr(sorted(_ENV.items()))):
        digest.update(part.encode() + b"\0")
    for name in ("go.mod", "go.sum"):
        digest.update((HELM_MODULE_DIR / name).read_bytes() + b"\0")
    return digest.hexdigest()


def ensure_helm(*, timeout: float | None = None) -> Path:
    """The cached helm binary, built first when missing or stale. Raises BuildError on failure."""
    if timeout is None:
        timeout = float(os.environ.get("TRAINGUARD_E2E_BUILD_TIMEOUT", DEFAULT_BUILD_TIMEOUT))
    version = helm_version()
    directory = cache_root() / f"helm-{version}"
    directory.mkdir(parents=True, exist_ok=True)
    binary = directory / "helm"
    stamp = _stamp(version)
    with (directory / ".build.lock").open("a+") as lock:
        acquire_build_lock(lock.fileno(), timeout)
        try:
            if not up_to_date(binary, stamp):
                _build(version, binary, stamp, timeout)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return binary


def _build(version: str, binary: Path, stamp: str, timeout: float) -> None:
    env = {**os.environ, **_ENV}
    env["GOFLAGS"] += f" -p={max(1, min(os.cpu_count() or 1, 4))}"
    go_build(
        f"helm {version}",
        lambda partial: [
            find_go(),
            "build",
            "-trimpath",
            "-ldflags",
            _ldflags(version),
            "-o",
            str(partial),
            HELM_PACKAGE,
        ],
        module_dir=HELM_MODULE_DIR,
        env=env,
        binary=binary,
        stamp=stamp,
        timeout=timeout,
        note="first use only",
    )


if __name__ == "__main__":
    print(ensure_helm())

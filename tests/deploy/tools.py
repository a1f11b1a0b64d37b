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
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.e2e.binaries import BuildError, cache_root, find_go, required_version

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
        _acquire(lock.fileno(), timeout)
        try:
            if not _up_to_date(binary, stamp):
                _build(version, binary, stamp, timeout)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return binary


def _up_to_date(binary: Path, stamp: str) -> bool:
    stamp_file = binary.with_name("helm.stamp")
    return (
        binary.is_file()
        and os.access(binary, os.X_OK)
        and stamp_file.is_file()
        and stamp_file.read_text(encoding="utf-8").strip() == stamp
    )


def _build(version: str, binary: Path, stamp: str, timeout: float) -> None:
    partial = binary.with_name(f".helm.partial-{os.getpid()}")
    log = binary.with_name("helm.build.log")
    print(f"building helm {version} into {binary.parent} (first use only)...", file=sys.stderr, flush=True)
    jobs = max(1, min(os.cpu_count() or 1, 4))
    env = {**os.environ, **_ENV}
    env["GOFLAGS"] += f" -p={jobs}"
    command = [
        find_go(),
        "build",
        "-trimpath",
        "-ldflags",
        _ldflags(version),
        "-o",
        str(partial),
        HELM_PACKAGE,
    ]
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as log_file:
        # Its own session, so that a timeout or an interrupt stops the compiler children too.
        process = subprocess.Popen(
            command,
            cwd=HELM_MODULE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            returncode = process.wait(timeout=timeout)
        except BaseException as exc:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            partial.unlink(missing_ok=True)
            if isinstance(exc, subprocess.TimeoutExpired):
                raise BuildError(f"building helm {version} took longer than {timeout:.0f} s") from exc
            raise
    if returncode != 0:
        partial.unlink(missing_ok=True)
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-30:])
        raise BuildError(f"building helm {version} failed (exit {returncode}); log in {log}:\n{tail}")
    os.replace(partial, binary)
    binary.with_name("helm.stamp").write_text(stamp + "\n", encoding="utf-8")
    print(f"built helm {version} in {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)


def _acquire(fd: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise BuildError(f"waited {timeout:.0f} s for another process's helm build") from None
            time.sleep(1.0)


if __name__ == "__main__":
    print(ensure_helm())

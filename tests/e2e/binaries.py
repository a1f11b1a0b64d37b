"""Build, once, the kube-apiserver and etcd binaries the end-to-end suite runs.

Both come from the Go module proxy as source and are compiled with the local Go toolchain:

* ``tests/e2e/go/``       requires ``k8s.io/kubernetes`` and builds ``cmd/kube-apiserver``;
* ``tests/e2e/go/etcd/``  requires ``go.etcd.io/etcd/server/v3`` and builds its main package.

The versions are read from those two ``go.mod`` files, which are the single source of truth.
The binaries are cached outside the repository, in ``$TRAINGUARD_E2E_CACHE/<k8s-version>/``
(default ``~/.cache/trainguard-e2e/<k8s-version>/``), next to a stamp that hashes everything the
build depends on (go.mod, go.sum, flags), so editing a go.mod rebuilds. A lock file serialises
builds across processes; a process that waited for another one's build reuses its result.

Environment:

* ``TRAINGUARD_E2E_CACHE``          cache root (default ``~/.cache/trainguard-e2e``)
* ``TRAINGUARD_E2E_GO``             the ``go`` binary (default: ``go`` on PATH, then /usr/local/go/bin/go)
* ``TRAINGUARD_E2E_BUILD_TIMEOUT``  seconds allowed for one binary's build (default 3600)
* ``TRAINGUARD_E2E_BUILD_JOBS``     parallel compile jobs (default: CPU count, at most 4)
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

GO_DIR = Path(__file__).resolve().parent / "go"
APISERVER_MODULE_DIR = GO_DIR
ETCD_MODULE_DIR = GO_DIR / "etcd"

APISERVER_PACKAGE = "k8s.io/kubernetes/cmd/kube-apiserver"
ETCD_PACKAGE = "go.etcd.io/etcd/server/v3"

DEFAULT_BUILD_TIMEOUT = 3600.0
LOCK_FILE = ".build.lock"


class BuildError(RuntimeError):
    """A binary could not be built (no Go toolchain, a failed compile, a timeout)."""


@dataclass(frozen=True)
class Binaries:
    kube_apiserver: Path
    etcd: Path
    kubernetes_version: str
    etcd_version: str


def required_version(go_mod: Path, module: str) -> str:
    """The version of ``module`` that the ``require`` block of ``go_mod`` names."""
    text = go_mod.read_text(encoding="utf-8")
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", text, re.MULTILINE)
    if match is None:
        raise BuildError(f"{go_mod} does not require {module}")
    return match.group(1)


def kubernetes_version() -> str:
    return required_version(APISERVER_MODULE_DIR / "go.mod", "k8s.io/kubernetes")


def etcd_version() -> str:
    return required_version(ETCD_MODULE_DIR / "go.mod", "go.etcd.io/etcd/server/v3")


def cache_root() -> Path:
    override = os.environ.get("TRAINGUARD_E2E_CACHE")
    if override:
        return Path(override).expanduser()
    return Path.home() / ".cache" / "trainguard-e2e"


def find_go() -> str:
    explicit = os.environ.get("TRAINGUARD_E2E_GO")
    candidates = [explicit] if explicit else [shutil.which("go"), "/usr/local/go/bin/go"]
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise BuildError(
        f"no Go toolchain found (tried {', '.join(c for c in candidates if c)}; set TRAINGUARD_E2E_GO "
        "or put `go` on PATH): the end-to-end suite builds kube-apiserver and etcd from source"
    )


def apiserver_ldflags(version: str) -> str:
    """Linker flags that stamp the version the way the Kubernetes release build does.

    hack/lib/version.sh sets the same variables in both k8s.io/component-base/version (read by
    the server, hence `kubectl version` and /version) and k8s.io/client-go/pkg/version.
    """
    major, minor = version.lstrip("v").split(".")[:2]
    values = {
        "gitVersion": version,
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
    }
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.{key}={value}" for key, value in values.items()]
    return " ".join(flags)


@dataclass(frozen=True)
class _Build:
    name: str
    version: str
    module_dir: Path
    package: str
    ldflags: str

    def command(self, go: str, output: Path) -> list[str]:
        return [go, "build", "-trimpath", "-ldflags", self.ldflags, "-o", str(output), self.package]

    def stamp(self) -> str:
        """Hash of what the binary depends on; the Go toolchain's version is deliberately left out."""
        digest = hashlib.sha256()
        for part in (self.name, self.version, self.package, self.ldflags, build_env_key()):
            digest.update(part.encode() + b"\0")
        for file in ("go.mod", "go.sum"):
            digest.update((self.module_dir / file).read_bytes() + b"\0")
        return digest.hexdigest()


def _builds() -> list[_Build]:
    k8s = kubernetes_version()
    etcd = etcd_version()
    return [
        _Build("kube-apiserver", k8s, APISERVER_MODULE_DIR, APISERVER_PACKAGE, apiserver_ldflags(k8s)),
        _Build("etcd", etcd, ETCD_MODULE_DIR, ETCD_PACKAGE, "-s -w"),
    ]


# What the binaries depend on besides go.mod/go.sum; part of the cache stamp.
_BUILD_SETTINGS = {
    "CGO_ENABLED": "0",
    "GOWORK": "off",
    # go.sum is committed and authoritative.
    "GOFLAGS": "-mod=readonly -buildvcs=false",
}


def build_jobs() -> int:
    """Parallel compile jobs: $TRAINGUARD_E2E_BUILD_JOBS, else the CPU count capped at 4.

    Each job of the kube-apiserver build can take several hundred MB; the cap keeps the peak
    memory of a cold build bounded on large machines.
    """
    configured = os.environ.get("TRAINGUARD_E2E_BUILD_JOBS")
    if configured:
        return max(1, int(configured))
    return max(1, min(os.cpu_count() or 1, 4))


def build_env() -> dict[str, str]:
    env = {**os.environ, **_BUILD_SETTINGS}
    env["GOFLAGS"] += f" -p={build_jobs()}"
    return env


def build_env_key() -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(_BUILD_SETTINGS.items()))


def up_to_date(binary: Path, stamp: str) -> bool:
    stamp_file = binary.with_name(binary.name + ".stamp")
    return (
        binary.is_file()
        and os.access(binary, os.X_OK)
        and stamp_file.is_file()
        and stamp_file.read_text(encoding="utf-8").strip() == stamp
    )


def _build_one(build: _Build, go: str, binary: Path, stamp: str, timeout: float) -> None:
    go_build(
        f"{build.name} {build.version}",
        lambda partial: build.command(go, partial),
        module_dir=build.module_dir,
        env=build_env(),
        binary=binary,
        stamp=stamp,
        timeout=timeout,
        note="not cached yet; with an empty Go build cache this takes 10-20 minutes on 2 cores",
    )


def go_build(
    what: str,
    command: Callable[[Path], list[str]],
    *,
    module_dir: Path,
    env: dict[str, str],
    binary: Path,
    stamp: str,
    timeout: float,
    note: str,
) -> None:
    """Run `command(partial)` (a `go build -o partial` in `module_dir`), then move the partial file
    to `binary` and write its stamp; a failure or timeout leaves neither behind and raises
    BuildError. Shared by every binary the tests build from Go modules (kube-apiserver, etcd, helm)."""
    partial = binary.with_name(f".{binary.name}.partial-{os.getpid()}")
    log = binary.with_name(binary.name + ".build.log")
    print(f"building {what} into {binary.parent} ({note})...", file=sys.stderr, flush=True)
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as log_file:
        # A session of its own, so that a timeout or an interrupt stops the compiler children too.
        process = subprocess.Popen(
            command(partial),
            cwd=module_dir,
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
                raise BuildError(f"building {what} took longer than {timeout:.0f} s") from exc
            raise
    if returncode != 0:
        partial.unlink(missing_ok=True)
        tail = "\n".join(log.read_text(encoding="utf-8", errors="replace").splitlines()[-40:])
        raise BuildError(f"building {what} failed (exit {returncode}); full log in {log}:\n{tail}")
    os.replace(partial, binary)
    binary.with_name(binary.name + ".stamp").write_text(stamp + "\n", encoding="utf-8")
    elapsed = time.monotonic() - started
    print(f"built {what} in {elapsed:.0f} s", file=sys.stderr, flush=True)


def ensure_binaries(*, timeout: float | None = None) -> Binaries:
    """Return the cached binaries, building whichever is missing or stale first.

    Raises BuildError when Go is missing or a build fails: the caller must not skip on it.
    """
    if timeout is None:
        timeout = float(os.environ.get("TRAINGUARD_E2E_BUILD_TIMEOUT", DEFAULT_BUILD_TIMEOUT))
    builds = _builds()
    directory = cache_root() / builds[0].version
    directory.mkdir(parents=True, exist_ok=True)
    paths = {build.name: directory / build.name for build in builds}

    with (directory / LOCK_FILE).open("a+") as lock:
        acquire_build_lock(lock.fileno(), timeout * len(builds))
        try:
            for build in builds:
                stamp = build.stamp()
                if not up_to_date(paths[build.name], stamp):
                    _build_one(build, find_go(), paths[build.name], stamp, timeout)
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return Binaries(
        kube_apiserver=paths["kube-apiserver"],
        etcd=paths["etcd"],
        kubernetes_version=builds[0].version,
        etcd_version=builds[1].version,
    )


def acquire_build_lock(fd: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    announced = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise BuildError(f"waited {timeout:.0f} s for another process's build lock") from None
            if not announced:
                print("waiting for another process to finish its build...", file=sys.stderr)
                announced = True
            time.sleep(1.0)


if __name__ == "__main__":
    found = ensure_binaries()
    print(f"kube-apiserver {found.kubernetes_version}: {found.kube_apiserver}")
    print(f"etcd {found.etcd_version}: {found.etcd}")

"""README.md "Install": every fenced command, run as written against a real kube-apiserver.

Each of the three blocks (Helm, kustomize, CLI only) runs in a copy of the repository, against a
control plane of its own (both the Helm and the kustomize block install into trainguard-system).
The environment is what a reader has: `helm`, `kubectl` and the CLI on PATH, KUBECONFIG set.

What a control plane without a kubelet cannot do: run the chart's pre-install certificate Job. So
`helm install` and `helm upgrade` get `--no-hooks` here; the Job's steps are run for real by
test_chart_apiserver.py. `REGISTRY` stays as written: nothing pulls the image. `pip install .`
installs into a fresh virtualenv, from the package index as a reader's would.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.chart import Helm
from tests.e2e.binaries import ensure_binaries
from tests.e2e.controlplane import ControlPlane, clean_environment

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)
EXIT = re.compile(r"#\s*exit (\d+)")


def install_blocks() -> list[list[str]]:
    text = (ROOT / "README.md").read_text("utf-8")
    section = text.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    blocks = []
    for block in FENCE.findall(section):
        commands = []
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip():
                commands.append(line.strip())
        blocks.append(commands)
    return blocks


def test_install_shows_helm_then_kustomize_then_the_cli() -> None:
    blocks = install_blocks()
    assert [block[0].split()[0] for block in blocks] == ["helm", "trainguard", "pip"]


def _copy_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    ignore = shutil.ignore_patterns(
        ".venv", ".git", "__pycache__", "*.pyc", ".mypy_cache", ".ruff_cache", "certs"
    )
    for name in ("deploy", "policies", "webhook"):
        shutil.copytree(ROOT / name, repo / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, repo / name)
    return repo


def _run(commands: list[str], cwd: Path, path: list[Path], kubeconfig: Path | None) -> None:
    env = clean_environment()
    env["PATH"] = os.pathsep.join([*map(str, path), env.get("PATH", "")])
    env["HOME"] = str(cwd.parent)
    env.pop("VIRTUAL_ENV", None)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    for command in commands:
        expected = EXIT.search(command)
        argv = shlex.split(command, comments=True)
        if argv[0] == "helm" and argv[1] in ("install", "upgrade"):
            argv.append("--no-hooks")
        result = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
        )
        code = int(expected.group(1)) if expected else 0
        assert result.returncode == code, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


@pytest.fixture
def own_apiserver() -> Iterator[ControlPlane]:
    with ControlPlane(ensure_binaries()) as plane:
        yield plane


def test_helm_block(helm: Helm, own_apiserver: ControlPlane, tmp_path: Path) -> None:
    repo = _copy_repo(tmp_path)
    _run(
        install_blocks()[0], repo, [helm.binary.parent, Path(sys.executable).parent], own_apiserver.kubeconfig
    )
    deployment = own_apiserver.kubectl_json("-n", "trainguard-system", "get", "deployment", "trainguard")
    assert deployment["spec"]["replicas"] == 3  # the upgrade's value
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "REGISTRY/trainguard:0.1.0"
    validating = own_apiserver.kubectl_json("get", "validatingwebhookconfiguration", "trainguard")
    assert "monitoring" in validating["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]["values"]
    namespace = own_apiserver.kubectl_json("get", "namespace", "trainguard-system")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def test_kustomize_block(own_apiserver: ControlPlane, tmp_path: Path) -> None:
    repo = _copy_repo(tmp_path)
    _run(install_blocks()[1], repo, [Path(sys.executable).parent], own_apiserver.kubeconfig)
    secret = own_apiserver.kubectl_json("-n", "trainguard-system", "get", "secret", "trainguard-tls")
    assert sorted(secret["data"]) == ["ca.crt", "tls.crt", "tls.key"]
    own_apiserver.kubectl("-n", "trainguard-system", "get", "deployment", "trainguard")
    own_apiserver.kubectl("get", "mutatingwebhookconfiguration", "trainguard")


def test_cli_block(tmp_path: Path) -> None:
    repo = _copy_repo(tmp_path)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    _run(install_blocks()[2], repo, [env_dir / "bin"], None)
    assert (env_dir / "bin" / "kubectl-trainguard").is_file()

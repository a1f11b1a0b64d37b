"""`kubectl trainguard`: the plugin run through the real kubectl, found on PATH as kubectl finds plugins.

The kubeconfig here names no reachable cluster: check and review decide files, and the plugin only
asks kubectl which namespace the chosen context has.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
DENIED = ROOT / "deploy" / "counterexamples" / "bare-torchrun-pod.yaml"
ADMITTED = ROOT / "deploy" / "examples" / "finetune-single-node-a.yaml"


def _kubeconfig(path: Path) -> Path:
    cluster = {"server": "https://127.0.0.1:1"}
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "lab", "cluster": cluster}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "ml", "context": {"cluster": "lab", "user": "me", "namespace": "ml-team"}},
                    {"name": "plain", "context": {"cluster": "lab", "user": "me"}},
                ],
                "current-context": "ml",
            }
        ),
        encoding="utf-8",
    )
    return path


@pytest.fixture
def kubectl(tmp_path: Path) -> Any:
    binary = shutil.which("kubectl")
    assert binary, "kubectl is needed: the plugin is run through it"
    env = {
        **os.environ,
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUBECONFIG": str(_kubeconfig(tmp_path / "config")),
        "HOME": str(tmp_path),
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [binary, *args], capture_output=True, text=True, env=env, timeout=120, check=False, cwd=ROOT
        )

    return run


@pytest.fixture
def unnamespaced(tmp_path: Path) -> Path:
    """A Pod that names no namespace: it is decided in the namespace the plugin resolves."""
    path = tmp_path / "pod.yaml"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"containers": [{"name": "c", "image": "nginx"}]},
    }
    path.write_text(yaml.safe_dump(pod), encoding="utf-8")
    return path


def _namespaces(result: subprocess.CompletedProcess[str]) -> set[str]:
    assert result.returncode in (0, 1), result.stderr
    return {r["namespace"] for r in json.loads(result.stdout)["results"]}


def test_kubectl_finds_the_plugin(kubectl: Any) -> None:
    listed = kubectl("plugin", "list")
    assert str(VENV_BIN / "kubectl-trainguard") in listed.stdout, listed.stdout + listed.stderr


@pytest.mark.parametrize(
    ("path", "code", "words"),
    [
        pytest.param(DENIED, 1, ["gang-required", "DENIED"], id="denied-exit-1"),
        pytest.param(ADMITTED, 0, ["admitted"], id="admitted-exit-0"),
    ],
)
def test_check_through_kubectl(kubectl: Any, path: Path, code: int, words: list[str]) -> None:
    result = kubectl("trainguard", "check", str(path))
    assert result.returncode == code, result.stdout + result.stderr
    for word in words:
        assert word.lower() in result.stdout.lower(), result.stdout


@pytest.mark.parametrize(
    ("flags", "namespace"),
    [
        pytest.param([], "ml-team", id="current-context-namespace"),
        pytest.param(["-n", "research"], "research", id="short-namespace-flag"),
        pytest.param(["--namespace=research"], "research", id="long-namespace-flag"),
        pytest.param(["--context", "plain"], "default", id="context-without-namespace"),
        pytest.param(["--context=ml", "-n", "other"], "other", id="flag-beats-context"),
    ],
)
def test_kubectl_flags_choose_the_namespace(
    kubectl: Any, unnamespaced: Path, flags: list[str], namespace: str
) -> None:
    assert _namespaces(kubectl("trainguard", "check", str(unnamespaced), "-o", "json", *flags)) == {namespace}


def test_explicit_kubeconfig(kubectl: Any, unnamespaced: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.write_text((tmp_path / "config").read_text().replace("ml-team", "from-file"), encoding="utf-8")
    for args in (
        ["--kubeconfig", str(other), "check", str(unnamespaced), "-o", "json"],
        ["check", str(unnamespaced), "-o", "json", f"--kubeconfig={other}"],
    ):
        assert _namespaces(kubectl("trainguard", *args)) == {"from-file"}


def test_unknown_context_is_an_error(kubectl: Any) -> None:
    result = kubectl("trainguard", "check", str(ADMITTED), "--context", "nowhere")
    assert result.returncode == 2
    assert "nowhere" in result.stderr and "Traceback" not in result.stderr


def test_review_through_kubectl(kubectl: Any) -> None:
    result = kubectl("trainguard", "review", str(DENIED), "-o", "json")
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout)


def test_unknown_command(kubectl: Any) -> None:
    result = kubectl("trainguard", "serve")
    assert result.returncode == 2
    assert "unknown command 'serve'" in result.stderr

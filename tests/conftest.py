"""Shared fixtures: the shared corpus of real upstream manifests, engines on both CEL backends, and
the files a served webhook reads (a CA per module, serving certificates, the shipped policies)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from webhook import certs
from webhook.config import PlatformConfig, load_config
from webhook.engine import PolicySet, default_policies_dir, load_policy_set

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("cel-expr-python", "cel-python")


def shared_dir() -> Path | None:
    """The shared design folder (corpus/, crds/): $TRAINGUARD_SHARED_DIR, else beside the checkout."""
    env = os.environ.get("TRAINGUARD_SHARED_DIR")
    path = Path(env) if env else REPO.parent / "shared"
    return path if (path / "corpus").is_dir() else None


def corpus_files() -> list[Path]:
    shared = shared_dir()
    if shared is None:
        return []
    return sorted(p for p in (shared / "corpus").rglob("*.yaml"))


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


_NO_CORPUS = "corpus"  # every skip for a missing corpus says so in its reason


def _corpus_skip(report: pytest.CollectReport | pytest.TestReport) -> bool:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return bool(report.skipped and _NO_CORPUS in reason and shared_dir() is None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """In CI (CI=true) a test skipped for want of the shared corpus fails: CI must not pass
    without the corpus tests."""
    outcome = yield
    report = outcome.get_result()
    if _in_ci() and _corpus_skip(report):
        report.outcome = "failed"
        report.longrepr = f"the shared corpus is missing in CI (set TRAINGUARD_SHARED_DIR): {report.longrepr}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Any:
    outcome = yield
    report = outcome.get_result()
    if _in_ci() and _corpus_skip(report):
        report.outcome = "failed"
        report.longrepr = f"the shared corpus is missing in CI (set TRAINGUARD_SHARED_DIR): {report.longrepr}"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/reviewgate/golden/*.md from the current output (then review the diff)",
    )


@pytest.fixture(scope="session")
def config() -> PlatformConfig:
    return load_config()


@pytest.fixture(scope="session", params=BACKENDS)
def policy_set(request: pytest.FixtureRequest) -> PolicySet:
    # Session scope: compiling the set is the expensive part, and a PolicySet is immutable.
    return load_policy_set([default_policies_dir()], request.param)


@pytest.fixture(scope="module")
def ca() -> tuple[bytes, bytes]:
    # One CA per module: every server and client of its tests trusts it.
    return certs.make_ca()


def pod_files(tmp_path: Path, ca: tuple[bytes, bytes]) -> Path:
    """A directory as the pod sees it: certs/{ca.crt,ca.key,tls.crt,tls.key} and policies/."""
    (tmp_path / "certs").mkdir()
    (tmp_path / "certs" / "ca.crt").write_bytes(ca[0])
    (tmp_path / "certs" / "ca.key").write_bytes(ca[1])
    certs.write_bundle(tmp_path / "certs", hosts=["127.0.0.1", "localhost"], days=2)
    shutil.copytree(default_policies_dir(), tmp_path / "policies")
    return tmp_path


@pytest.fixture
def files(tmp_path: Path, ca: tuple[bytes, bytes]) -> Path:
    return pod_files(tmp_path, ca)

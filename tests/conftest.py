"""Shared fixtures: the shared corpus of real upstream manifests, and engines on both CEL backends."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

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

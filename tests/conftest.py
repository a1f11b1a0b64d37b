"""Shared fixtures: the shared corpus of real upstream manifests, and engines on both CEL backends."""

from __future__ import annotations

import os
from pathlib import Path

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

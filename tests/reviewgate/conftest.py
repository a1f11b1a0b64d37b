"""Review-gate test helpers: the --update-golden option and a runner for the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent
REPO = HERE.parents[1]


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden", default=False))


@pytest.fixture
def in_repo(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run from the repository root, so report paths are repository-relative as in CI."""
    monkeypatch.chdir(REPO)
    return REPO

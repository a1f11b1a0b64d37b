"""Audit test helpers: the --update-golden option (declared in tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden", default=False))

"""Fixtures for the fleet suite: one fleet per session, trainguard switched per scenario.

Every test under tests/fleet gets the ``fleet`` marker (deselected by default; run with
``pytest -m fleet tests/fleet``). The fleet's size is $TRAINGUARD_FLEET_NODES (default 20: four
training racks and one inference rack of four nodes). A missing Go toolchain or a failed build is
an error, never a skip.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from .fleet import Fleet, start_fleet
from .recovery import recovery_block

FLEET_DIR = Path(__file__).resolve().parent
DEFAULT_NODES = 20


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # tryfirst: the marker must be on the items before `-m` deselects.
    for item in items:
        if FLEET_DIR in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.fleet)


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    nodes = int(os.environ.get("TRAINGUARD_FLEET_NODES", DEFAULT_NODES))
    started = start_fleet(nodes, workdir=tmp_path_factory.mktemp("fleet"), recovery=recovery_block())
    try:
        yield started
    finally:
        started.stop()

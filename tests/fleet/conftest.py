"""Fixtures for the fleet suite: one fleet per session, trainguard switched per scenario.

Every test under tests/fleet gets the ``fleet`` marker (deselected by default; run with
``pytest -m fleet tests/fleet``). The fleet's size is $TRAINGUARD_FLEET_NODES (default 20: four
training racks and one inference rack of four nodes). A missing Go toolchain or a failed build is
an error, never a skip.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.binaries import BuildError, ensure_binaries

from .binaries import COMPONENTS, ensure
from .fleet import Fleet, start_fleet
from .recovery import recovery_block

FLEET_DIR = Path(__file__).resolve().parent
DEFAULT_NODES = 20
_BUILD_ERROR = pytest.StashKey[BuildError]()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # tryfirst: the marker must be on the items before `-m` deselects.
    for item in items:
        if FLEET_DIR in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.fleet)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the binaries when fleet tests were selected, outside any test's timeout, with the
    build's output shown live; a failure is reported by the fixture, as an error of each test."""
    selected = any(FLEET_DIR in Path(item.path).resolve().parents for item in session.items)
    if session.config.option.collectonly or not selected:
        return
    capture = session.config.pluginmanager.getplugin("capturemanager")
    live = capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext()
    with live:
        try:
            ensure_binaries()
            for component in COMPONENTS:
                ensure(component)
        except BuildError as error:
            session.config.stash[_BUILD_ERROR] = error


@pytest.fixture(scope="session")
def fleet(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    error = pytestconfig.stash.get(_BUILD_ERROR, None)
    if error is not None:
        pytest.fail(f"the fleet's binaries could not be built: {error}", pytrace=False)
    nodes = int(os.environ.get("TRAINGUARD_FLEET_NODES", DEFAULT_NODES))
    started = start_fleet(nodes, workdir=tmp_path_factory.mktemp("fleet"), recovery=recovery_block())
    try:
        yield started
    finally:
        started.stop()

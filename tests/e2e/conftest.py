"""Fixtures for the end-to-end suite: one real control plane per session.

Every test under tests/e2e gets the ``e2e`` marker. The binaries are built (first use only) once
collection is over, outside any test's timeout. A missing Go toolchain or a failed build is an
error for every e2e test, never a skip: CI must really run this suite.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .binaries import Binaries, BuildError, ensure_binaries
from .controlplane import ControlPlane, start_with_crds
from .webhook_server import admission, platform_config, transcripts, webhook_certs  # noqa: F401 (fixtures)

E2E_DIR = Path(__file__).resolve().parent
_BINARIES = pytest.StashKey[Binaries | BuildError]()


def _is_e2e(item: pytest.Item) -> bool:
    return E2E_DIR in Path(item.path).resolve().parents


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # tryfirst: the marker must be on the items before `-m` deselects.
    for item in items:
        if _is_e2e(item):
            item.add_marker(pytest.mark.e2e)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the binaries when e2e tests were selected to run, with output shown live."""
    if session.config.option.collectonly or not any(_is_e2e(item) for item in session.items):
        return
    capture = session.config.pluginmanager.getplugin("capturemanager")
    live = capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext()
    with live:
        try:
            session.config.stash[_BINARIES] = ensure_binaries()
        except BuildError as error:
            session.config.stash[_BINARIES] = error


@pytest.fixture(scope="session")
def e2e_binaries(pytestconfig: pytest.Config) -> Binaries:
    found = pytestconfig.stash.get(_BINARIES, None)
    if found is None:
        found = ensure_binaries()
    if isinstance(found, BuildError):
        pytest.fail(f"the e2e binaries could not be built: {found}", pytrace=False)
    return found


@pytest.fixture(scope="session")
def control_plane(e2e_binaries: Binaries) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver on 127.0.0.1 with the training CRDs installed and Established."""
    plane = start_with_crds(e2e_binaries)
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def namespace(control_plane: ControlPlane) -> str:
    """A fresh namespace per test (deleted namespaces never finish terminating: no controllers)."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    control_plane.kubectl("create", "namespace", name)
    return name

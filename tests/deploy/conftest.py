"""Fixtures for the deployment tests: the real `helm` (built once from its Go module) and an API server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.deploy.chart import Helm
from tests.deploy.tools import ensure_helm
from tests.e2e.binaries import BuildError, ensure_binaries
from tests.e2e.controlplane import ControlPlane


@pytest.fixture(scope="session")
def helm() -> Helm:
    try:
        return Helm(ensure_helm())
    except BuildError as error:
        pytest.fail(f"helm could not be built: {error}", pytrace=False)


@pytest.fixture(scope="session")
def apiserver() -> Iterator[ControlPlane]:
    """A real kube-apiserver + etcd on 127.0.0.1 (tests/e2e/controlplane.py), without CRDs."""
    try:
        binaries = ensure_binaries()
    except BuildError as error:
        pytest.fail(f"the e2e binaries could not be built: {error}", pytrace=False)
    with ControlPlane(binaries) as plane:
        yield plane


@pytest.fixture
def fresh_namespace(apiserver: ControlPlane) -> str:
    name = f"tg-{uuid.uuid4().hex[:8]}"
    apiserver.kubectl("create", "namespace", name)
    return name

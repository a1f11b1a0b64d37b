"""The import contract covers the whole package: every top-level module of webhook/ is in a layer
of .importlinter (lint-imports checks only the modules a layer names, so a new module outside
every layer could import anything), and no two modules import each other, not even for types."""

from __future__ import annotations

import configparser
from pathlib import Path

import grimp  # import-linter's import graph, installed with it
import pytest

REPO = Path(__file__).parents[1]

# Known and owned elsewhere: the server and its worker processes name each other's types.
KNOWN_CYCLES = {frozenset({"webhook.server", "webhook.workers"})}


def layered_modules() -> set[str]:
    contract = configparser.ConfigParser()
    contract.read(REPO / ".importlinter")
    layers = contract["importlinter:contract:layers"]["layers"]
    return {
        name.strip("() ")
        for line in layers.splitlines()
        for name in line.replace("|", ":").split(":")
        if name.strip()
    }


def top_level_modules() -> set[str]:
    package = REPO / "webhook"
    modules = {f"webhook.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    return modules | {f"webhook.{p.parent.name}" for p in package.glob("*/__init__.py")}


def test_every_top_level_module_is_in_a_layer() -> None:
    assert sorted(top_level_modules() - layered_modules()) == []


def test_the_layers_name_only_modules_that_exist() -> None:
    assert sorted(layered_modules() - top_level_modules()) == []


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("webhook", include_external_packages=False)


def test_no_two_modules_import_each_other(graph: grimp.ImportGraph) -> None:
    mutual = set()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            # A package and its own modules are one unit (its __init__ re-exports them).
            if imported.startswith(module + ".") or module.startswith(imported + "."):
                continue
            if module in graph.find_modules_directly_imported_by(imported):
                mutual.add(frozenset({module, imported}))
    assert sorted(sorted(pair) for pair in mutual - KNOWN_CYCLES) == []

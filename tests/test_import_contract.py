"""The import contract covers the whole package: every module of webhook/ is in a layer of
.importlinter (lint-imports checks only the modules a layer names, so a new module outside every
layer could import anything), and no modules import one another in a cycle, not even for types."""

from __future__ import annotations

import configparser
from pathlib import Path
from typing import Any

import grimp  # import-linter's import graph, installed with it
import pytest

REPO = Path(__file__).parents[1]
PACKAGE = REPO / "webhook"


def layers_contracts() -> list[configparser.SectionProxy]:
    contract = configparser.ConfigParser()
    contract.read(REPO / ".importlinter")
    return [contract[name] for name in contract.sections() if contract[name].get("type") == "layers"]


def layered(section: configparser.SectionProxy) -> dict[str, set[str]]:
    """Container -> the modules its layers name (the root contract's container is `webhook`)."""
    names = {
        name.strip("() ")
        for line in section["layers"].splitlines()
        for name in line.replace("|", ":").split(":")
        if name.strip()
    }
    containers = section.get("containers", "").split()
    if not containers:
        return {"webhook": names}
    return {container: {f"{container}.{name}" for name in names} for container in containers}


def modules_in(container: str) -> set[str]:
    """The modules and packages directly inside `container`, a package of webhook/."""
    package = REPO.joinpath(*container.split("."))
    modules = {f"{container}.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    return modules | {f"{container}.{p.parent.name}" for p in package.glob("*/__init__.py")}


def contract_cases() -> list[Any]:
    cases = []
    for section in layers_contracts():
        for container, names in layered(section).items():
            cases.append(pytest.param(container, names, id=container))
    return cases


def test_every_package_with_modules_of_its_own_has_a_layers_contract() -> None:
    """The served webhook, the command line and the audit are layered inside too."""
    covered = {container for section in layers_contracts() for container in layered(section)}
    assert {"webhook", "webhook.serve", "webhook.cli", "webhook.audit"} <= covered


@pytest.mark.parametrize(("container", "names"), contract_cases())
def test_every_module_is_in_a_layer(container: str, names: set[str]) -> None:
    assert sorted(modules_in(container) - names) == []


@pytest.mark.parametrize(("container", "names"), contract_cases())
def test_the_layers_name_only_modules_that_exist(container: str, names: set[str]) -> None:
    assert sorted(names - modules_in(container)) == []


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm: grimp finds
    paths between two given modules, not every cycle in a graph)."""
    edges = {module: sorted(graph.find_modules_directly_imported_by(module)) for module in graph.modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(root: str) -> None:
        # Iterative: a recursive walk would be as deep as the longest import chain.
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, pending = work[-1]
            imported = next(pending, None)
            if imported is not None:
                if imported not in index:
                    index[imported] = low[imported] = len(index)
                    stack.append(imported)
                    on_stack.add(imported)
                    work.append((imported, iter(edges[imported])))
                elif imported in on_stack:
                    low[module] = min(low[module], index[imported])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))

    for module in sorted(edges):
        if module not in index:
            visit(module)
    return sorted(cycles)


def test_no_modules_import_one_another_in_a_cycle() -> None:
    # Imports under `if TYPE_CHECKING:` count: a cycle for types is still two modules that cannot
    # be read, moved or layered apart.
    graph = grimp.build_graph("webhook", include_external_packages=False, exclude_type_checking_imports=False)
    assert import_cycles(graph) == []


CYCLES = [
    pytest.param({"a": {"b"}, "b": {"a"}}, [["a", "b"]], id="two-modules"),
    pytest.param(
        {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]], id="three-modules-and-a-tail"
    ),
    pytest.param({"a": {"b"}, "b": {"c"}, "c": set()}, [], id="a-chain"),
    pytest.param({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}, [["a", "b"], ["c", "d"]], id="two-cycles"),
]


@pytest.mark.parametrize(("imports", "cycles"), CYCLES)
def test_the_cycle_finder_finds_cycles_of_any_length(
    imports: dict[str, set[str]], cycles: list[list[str]]
) -> None:
    graph = grimp.ImportGraph()
    for module, imported in imports.items():
        graph.add_module(module)
        for other in imported:
            graph.add_import(importer=module, imported=other)
    assert import_cycles(graph) == cycles

"""The import graph runs one way: the composition root (assembly) on top, importing anything; below
it each service package, the world, the edge and the console side by side, importing only the
generated protocol (egbe), the chassis (services) and themselves; the chassis imports neither a
service package, the world nor the root; no module imports itself back through others. Read from
source with ast: nothing is imported to check it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import ROOT

SERVICE_PACKAGES = (
    "kernel_service",
    "gateway",
    "cognition_service",
    "policy_service",
    "biography_service",
    "world",
    "edge",
    "console",
)
PROTOCOL = "egbe"
CHASSIS = "services"
COMPOSITION_ROOT = "assembly"
FIRST_PARTY = (*SERVICE_PACKAGES, PROTOCOL, CHASSIS, COMPOSITION_ROOT)


@dataclass(frozen=True)
class Import:
    module: str  # the importing module
    target: str  # the most specific first-party module (or package) it names
    line: int
    deferred: bool  # inside a function: runs when called, not at import


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for package in FIRST_PARTY
        for path in sorted((ROOT / package).rglob("*.py"))
        if "__pycache__" not in path.parts
    }


MODULES = _modules()


def _resolve(name: str) -> str:
    """The longest known module that `name` is or lies in (`pkg.mod.attr` -> `pkg.mod`)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path) -> Iterator[Import]:
    """Every first-party import a module runs (type-only imports under TYPE_CHECKING never run)."""
    is_package = path.name == "__init__.py"

    def visit(node: ast.AST, deferred: bool) -> Iterator[Import]:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                yield from visit(child, deferred)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FIRST_PARTY:
                    yield Import(module, _resolve(alias.name), node.lineno, deferred)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            if base.split(".")[0] in FIRST_PARTY:
                for alias in node.names:
                    named = f"{base}.{alias.name}"
                    yield Import(module, named if named in MODULES else _resolve(base), node.lineno, deferred)
        inner = deferred or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            yield from visit(child, inner)

    yield from visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), False)


IMPORTS = [found for module, path in MODULES.items() for found in _imports(module, path)]


def _top(name: str) -> str:
    return name.split(".", maxsplit=1)[0]


def _where(found: Import) -> str:
    return f"{MODULES[found.module].relative_to(ROOT)}:{found.line} imports {found.target}"


def test_the_graph_is_read_from_every_package() -> None:
    assert {_top(m) for m in MODULES} == set(FIRST_PARTY)
    # The resolution is exact: a from-import of a submodule names the submodule.
    found = {(i.module, i.target) for i in IMPORTS}
    assert ("kernel_service.servicer", "kernel_service.errors") in found
    assert ("gateway.adapters.offline", "services.errors") in found
    assert ("assembly.settings", "kernel_service.config") in found


def test_a_service_imports_only_the_protocol_the_chassis_and_itself() -> None:
    crossing = [
        _where(i)
        for i in IMPORTS
        if _top(i.module) in SERVICE_PACKAGES and _top(i.target) not in {_top(i.module), PROTOCOL, CHASSIS}
    ]
    assert crossing == []


def test_the_chassis_imports_no_service_package_and_not_the_root() -> None:
    upward = [
        _where(i) for i in IMPORTS if _top(i.module) == CHASSIS and _top(i.target) not in {CHASSIS, PROTOCOL}
    ]
    assert upward == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def test_no_import_loop() -> None:
    """No module reaches itself again through what it imports, deferred imports included."""
    edges: dict[str, set[str]] = {module: set() for module in MODULES}
    for found in IMPORTS:
        if found.target != found.module:
            edges[found.module].add(found.target)
    assert _cycles(edges) == []


def test_the_checks_catch_a_crossing_and_a_loop() -> None:
    """The same functions see a service import of another service and a two-module loop."""
    crossing = Import("gateway.adapters.offline", "cognition_service.output_schemas", 1, False)
    assert _top(crossing.target) not in {_top(crossing.module), PROTOCOL, CHASSIS}
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []

"""The layer's shape, as issue-level rules: no class grows into a do-everything object,
and the dependencies point one way (handlers -> bootstrap -> services -> ports)."""

from __future__ import annotations

import ast
from pathlib import Path

LAYER = Path(__file__).resolve().parents[2] / "layers" / "common" / "convo_memory"
MAX_CLASS_LINES = 300


def modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text())) for path in sorted(LAYER.rglob("*.py"))]


def imported(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_class_in_the_layer_is_over_300_lines() -> None:
    sizes = {
        f"{path.relative_to(LAYER)}:{node.name}": (node.end_lineno or node.lineno) - node.lineno + 1
        for path, tree in modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }
    too_long = {name: lines for name, lines in sizes.items() if lines > MAX_CLASS_LINES}
    assert too_long == {}


def test_services_and_the_domain_import_no_adapter_and_not_the_composition_root() -> None:
    offenders = []
    for path, tree in modules():
        part = path.relative_to(LAYER).parts[0]
        if part not in ("services", "domain"):
            continue
        for name in imported(tree):
            if name.startswith(("convo_memory.adapters", "convo_memory.bootstrap", "boto3")):
                offenders.append(f"{path.relative_to(LAYER)} imports {name}")
    assert offenders == []


def test_the_domain_imports_nothing_of_the_layer_but_itself() -> None:
    offenders = [
        f"{path.relative_to(LAYER)} imports {name}"
        for path, tree in modules()
        if path.relative_to(LAYER).parts[0] == "domain"
        for name in imported(tree)
        if name.startswith("convo_memory.") and not name.startswith("convo_memory.domain")
    ]
    assert offenders == []


def _module_name(path: Path) -> str:
    parts = path.relative_to(LAYER.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the layer's modules it imports, lazily or for type checking too."""
    trees = {_module_name(path): tree for path, tree in modules()}
    graph: dict[str, set[str]] = {}
    for name, tree in trees.items():
        found = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        graph[name] = {other for other in found if other in trees and other != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of nodes that import each other in a loop (Tarjan's components)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_of_the_layer_imports_itself_back_through_others() -> None:
    assert circles(import_graph()) == []


def test_the_layers_parts_import_one_way() -> None:
    # A part is a top-level module or package (domain, services, adapters, bootstrap, ...):
    # with no circle between parts, every import runs down, none back up.
    def part(module: str) -> str:
        return module.split(".")[1] if "." in module else module

    parts: dict[str, set[str]] = {}
    for module, imports in import_graph().items():
        parts.setdefault(part(module), set()).update(part(other) for other in imports)
    for name, imports in parts.items():
        imports.discard(name)
    assert circles(parts) == []


def test_the_circle_finder_finds_a_loop_and_only_the_loop() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

    assert circles(graph) == [["a", "b", "c"]]

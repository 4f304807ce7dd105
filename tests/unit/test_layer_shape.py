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

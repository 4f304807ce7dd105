"""The layer's shape, as issue-level rules: no class grows into a do-everything object,
no function outgrows a screen, a composition root read at a glance, handlers without
closures, doors that hand the turn edge no callback, and dependencies that point one
way (handlers -> doors -> turn edge -> services -> ports, services speaking the domain)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYER = ROOT / "layers" / "common" / "convo_memory"
HANDLERS = ROOT / "functions"
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 60
MAX_BOOTSTRAP_LINES = 300
# The modules that read a turn's request and frame its answer around the turn edge.
DOORS = ("doors/predict.py", "doors/chat_completions.py", "doors/stream.py")


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


def functions_of(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]


def test_no_function_of_the_layer_or_a_handler_is_over_60_lines() -> None:
    sources = [*LAYER.rglob("*.py"), *HANDLERS.rglob("*.py")]
    sizes = {
        f"{path.relative_to(ROOT)}:{node.name}": (node.end_lineno or node.lineno) - node.lineno + 1
        for path in sorted(sources)
        for node in functions_of(ast.parse(path.read_text()))
    }
    too_long = {name: lines for name, lines in sizes.items() if lines > MAX_FUNCTION_LINES}
    assert too_long == {}


def test_the_composition_root_reads_at_a_glance() -> None:
    lines = (LAYER / "bootstrap.py").read_text().count("\n")
    assert lines <= MAX_BOOTSTRAP_LINES


def nested_definitions(tree: ast.Module) -> list[str]:
    """Functions defined inside another function (closures, callbacks)."""
    return [
        f"{outer.name}.{inner.name}"
        for outer in functions_of(tree)
        for inner in functions_of(outer)
        if inner is not outer
    ]


def test_handlers_define_no_function_inside_another() -> None:
    offenders = {
        str(path.relative_to(ROOT)): nested
        for path in sorted(HANDLERS.glob("*/app.py"))
        if (nested := nested_definitions(ast.parse(path.read_text())))
    }
    assert offenders == {}


# What a door calls of the turn edge: the input gate, and the edge's serve.
EDGE_CALLS = frozenset({"gate", "serve"})


def callbacks_handed_to_the_edge(tree: ast.Module) -> list[str]:
    """Arguments of a call of the turn edge (``gate(...)``, ``<edge>.serve(...)``) that
    are code to call back: a lambda, a ``partial``, or a function the module defines."""
    defined = {node.name for node in functions_of(tree)}
    found = []
    for call in ast.walk(tree):
        if not isinstance(call, ast.Call):
            continue
        func = call.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name not in EDGE_CALLS:
            continue
        for value in [*call.args, *(keyword.value for keyword in call.keywords)]:
            is_partial = (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id == "partial"
            )
            is_defined = isinstance(value, ast.Name) and value.id in defined
            if isinstance(value, ast.Lambda) or is_partial or is_defined:
                found.append(f"line {value.lineno}: {ast.unparse(value)}")
    return found


def test_no_door_hands_the_turn_edge_a_callback() -> None:
    doors = [LAYER / name for name in (*DOORS, "edge/resolver.py")] + sorted(
        HANDLERS.glob("*/app.py")
    )
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in doors
        if (found := callbacks_handed_to_the_edge(ast.parse(path.read_text())))
    }
    assert offenders == {}


def test_the_shape_checks_see_a_closure_and_a_callback() -> None:
    tree = ast.parse(
        "def door(edge, request):\n"
        "    def compute():\n"
        "        return 1\n"
        "    edge.serve('predict', request, compute)\n"
        "    edge.serve('chat', request, lambda: 2, sink=partial(print))\n"
        "    gate(method='GET', workspace=lambda: 'ws')\n"
    )
    assert nested_definitions(tree) == ["door.compute"]
    assert callbacks_handed_to_the_edge(tree) == [
        "line 4: compute",
        "line 5: lambda: 2",
        "line 5: partial(print)",
        "line 6: lambda: 'ws'",
    ]


def test_no_service_imports_the_http_models() -> None:
    offenders = [
        f"{path.relative_to(LAYER)} imports {name}"
        for path, tree in modules()
        if path.relative_to(LAYER).parts[0] == "services"
        for name in imported(tree)
        if name == "convo_memory.api"
    ]
    assert offenders == []


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

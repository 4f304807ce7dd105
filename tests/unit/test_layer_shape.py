"""The layer's shape, as issue-level rules: a floor plan read from the folder names (a
root of at most eight modules; doors, the edge, wire models, workers, services, ports,
adapters and the domain each in a room), no file past 500 lines, no class grown into a
do-everything object, no function outgrowing a screen, a composition root read at a
glance, handlers without closures, doors that hand the turn edge no callback, services
given their collaborators, and dependencies that point one way (handlers -> doors ->
edge -> services -> ports, services speaking the domain)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYER = ROOT / "layers" / "common" / "convo_memory"
HANDLERS = ROOT / "functions"
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 60
MAX_BOOTSTRAP_LINES = 300
MAX_FILE_LINES = 500
MAX_ROOT_MODULES = 8
# The modules that read a turn's request and frame its answer around the turn edge: every
# module of the doors' room, and the resolver glue that hands a route's request to one.
DOORS = LAYER / "doors"
RESOLVER = LAYER / "edge" / "resolver.py"


@cache
def parsed(path: Path) -> ast.Module:
    """A module's tree, parsed once for every check that reads it (callers only read)."""
    return ast.parse(path.read_text())


def modules() -> list[tuple[Path, ast.Module]]:
    return [(path, parsed(path)) for path in sorted(LAYER.rglob("*.py"))]


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
        for node in functions_of(parsed(path))
    }
    too_long = {name: lines for name, lines in sizes.items() if lines > MAX_FUNCTION_LINES}
    assert too_long == {}


def test_the_composition_root_reads_at_a_glance() -> None:
    sizes = {path.name: path.read_text().count("\n") for path in (LAYER / "bootstrap").glob("*.py")}
    assert sizes and max(sizes.values()) <= MAX_BOOTSTRAP_LINES, sizes


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
        if (nested := nested_definitions(parsed(path)))
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
    doors = [*sorted(DOORS.glob("*.py")), RESOLVER, *sorted(HANDLERS.glob("*/app.py"))]
    assert LAYER / "doors" / "responses.py" in doors
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in doors
        if (found := callbacks_handed_to_the_edge(parsed(path)))
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


@cache
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


# -- the floor plan ---------------------------------------------------------------------

# What each room of the layer may import of the others (its own room always). A room is
# a package of the layer's root, or one of the root's modules. Anything else is an arrow
# running up, or across to a room that is not its business.
ROOMS_MAY_IMPORT: dict[str, set[str]] = {
    "domain": set(),
    "ports": {"domain"},
    "services": {"domain", "ports"},
    "api": {"domain"},
    "config": {"domain"},
    "observability": {"domain", "ports"},
    "adapters": {"domain", "ports", "config", "observability"},
    "bootstrap": {"domain", "ports", "services", "adapters", "config", "observability"},
    "execution_environment": {"domain", "ports", "services", "adapters", "bootstrap", "config"},
    "cli": {"domain", "ports", "services", "adapters", "execution_environment"},
    "workers": {"domain", "ports", "observability", "bootstrap", "execution_environment"},
    "edge": {
        "domain",
        "ports",
        "api",
        "config",
        "observability",
        "bootstrap",
        "execution_environment",
    },
    "doors": {
        "domain",
        "ports",
        "api",
        "edge",
        "observability",
        "bootstrap",
        "execution_environment",
    },
}


def room(module: str) -> str:
    """``convo_memory.doors.chat_completions`` -> ``doors``; the package itself -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_the_root_of_the_layer_holds_at_most_eight_modules() -> None:
    root_modules = sorted(path.name for path in LAYER.glob("*.py"))
    assert len(root_modules) <= MAX_ROOT_MODULES, root_modules


def test_every_room_of_the_layer_is_on_the_floor_plan() -> None:
    rooms = {path.stem for path in LAYER.glob("*.py") if path.stem != "__init__"}
    rooms |= {path.name for path in LAYER.iterdir() if (path / "__init__.py").exists()}
    assert rooms == set(ROOMS_MAY_IMPORT)


def test_each_room_imports_only_the_rooms_below_it() -> None:
    offenders = sorted(
        f"{module} imports {other}"
        for module, imports in import_graph().items()
        for other in imports
        if room(other) not in {room(module), ""}
        and room(other) not in ROOMS_MAY_IMPORT.get(room(module), set())
    )
    assert offenders == []


def test_no_room_but_the_doors_imports_a_door() -> None:
    offenders = sorted(
        f"{module} imports {other}"
        for module, imports in import_graph().items()
        for other in imports
        if room(other) == "doors" and room(module) != "doors"
    )
    assert offenders == []


def test_no_file_under_the_layer_is_over_500_lines() -> None:
    sizes = {
        str(path.relative_to(ROOT)): path.read_text().count("\n")
        for path in sorted((ROOT / "layers").rglob("*.py"))
    }
    assert {name: n for name, n in sizes.items() if n > MAX_FILE_LINES} == {}


def constructed_in_init(tree: ast.Module, classes: set[str]) -> list[str]:
    """Calls in an ``__init__`` of ``tree`` that build one of ``classes``."""
    found: list[str] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        for method in node.body:
            if not isinstance(method, ast.FunctionDef) or method.name != "__init__":
                continue
            found.extend(
                f"{node.name}.__init__ builds {call.func.id}"
                for call in ast.walk(method)
                if isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id in classes
            )
    return found


def service_classes() -> set[str]:
    """The services' classes that are collaborators (they define ``__init__``), not
    values (a policy is a frozen dataclass a service may default)."""
    return {
        node.name
        for path in (LAYER / "services").glob("*.py")
        for node in parsed(path).body
        if isinstance(node, ast.ClassDef)
        and any(isinstance(item, ast.FunctionDef) and item.name == "__init__" for item in node.body)
    }


def test_services_are_given_their_collaborators_by_the_composition_root() -> None:
    services = service_classes()
    offenders = {
        str(path.relative_to(LAYER)): found
        for path in sorted((LAYER / "services").glob("*.py"))
        if (found := constructed_in_init(parsed(path), services))
    }
    assert offenders == {}


def test_the_collaborator_check_sees_a_service_building_another() -> None:
    tree = ast.parse(
        "class Turns:\n"
        "    def __init__(self, recorder):\n"
        "        self._pauses = PausedTurns(recorder)\n"
        "        self._policy = TurnPolicy()\n"
    )
    assert constructed_in_init(tree, {"PausedTurns"}) == ["Turns.__init__ builds PausedTurns"]


WORKERS = ("summarize", "repair_transcript", "erase_end_user", "copy_forks")


def test_the_worker_handlers_leave_their_queues_to_the_worker_policy() -> None:
    """A worker's handler says what a job does; redelivery, its queue, correlation and
    the failure's log line are the worker policy's (``workers.worker``)."""
    offenders = {
        name: found
        for name in WORKERS
        if (
            found := [
                word
                for word in ("redeliver_after", "_queue", "set_correlation_id", "receive_count(")
                if word in (HANDLERS / name / "app.py").read_text()
            ]
        )
    }
    assert offenders == {}

"""The unit tier is unit: no module under tests/unit, nor a test helper it imports
(tests/support, tests/fakes, followed import by import), reaches moto, boto3, a
subprocess, a socket or HTTP client or server, a browser, or the helpers that start a
local runtime or an in-process stack. Those tests live in their tiers: moto in
tests/integration, processes and sockets in tests/e2e, the benchmark's measured figures
in tests/bench. tests/unit/conftest.py refuses a process or a connection at run time."""

from __future__ import annotations

import ast
import os
from functools import cache
from pathlib import Path

import pytest

from tests.support.schedule import LONGEST_FIRST, module_rank

TESTS = Path(__file__).resolve().parents[1]
UNIT = TESTS / "unit"

# Modules (and their submodules) a unit test must not reach.
FORBIDDEN = {
    "moto": "moto belongs to tests/integration",
    "boto3": "an AWS client belongs to tests/integration (a Stubber needs only botocore)",
    "subprocess": "a process belongs to tests/e2e",
    "multiprocessing": "a process belongs to tests/e2e",
    "socket": "a socket belongs to tests/e2e",
    "socketserver": "a server belongs to tests/e2e",
    "http.server": "a server belongs to tests/e2e",
    "http.client": "an HTTP client belongs to tests/e2e",
    "urllib.request": "an HTTP client belongs to tests/e2e",
    "requests": "an HTTP client belongs to tests/e2e",
    "httpx": "an HTTP client belongs to tests/e2e",
    "openai": "an SDK over HTTP belongs to tests/e2e",
    "playwright": "a browser belongs to tests/e2e",
    "schemathesis": "API fuzzing over HTTP belongs to tests/e2e",
    "bench": "the benchmark's tests live in tests/bench",
    "tests.support.runtime_process": "a local runtime belongs to tests/e2e",
    "tests.support.inprocess_api": "the in-process stack (moto) belongs to tests/integration",
    "tests.support.fake_aws": "moto belongs to tests/integration",
    "tests.support.aws_cli": "moto belongs to tests/integration",
    "tests.support.outage_soak": "the in-process stack (moto) belongs to tests/integration",
    "tests.fakes.quiet_server": "a server belongs to tests/e2e",
    "tests.fakes.openai_server": "a server belongs to tests/e2e",
    "tests.fakes.webhook_server": "a server belongs to tests/e2e",
    "tests.fakes.trickle_server": "a server belongs to tests/e2e",
    "tests.fakes.connect_proxy": "a server belongs to tests/e2e",
}
# Names that reach moto or a runtime whatever the imports say, and fixtures a test asks
# for by its parameter. (A botocore client for a Stubber names an endpoint it never
# calls: tests/unit/conftest.py refuses the call itself.)
FORBIDDEN_NAMES = {
    "mock_aws": "moto belongs to tests/integration",
    "launch_runtime": "a local runtime belongs to tests/e2e",
    "runtime_on_fake_model": "a local runtime belongs to tests/e2e",
    "shared_runtime_on": "a local runtime belongs to tests/e2e",
}
FORBIDDEN_FIXTURES = {
    "local_runtime": "a local runtime belongs to tests/e2e",
    "start_runtime": "a local runtime belongs to tests/e2e",
    "backend": "the in-process stack (moto) belongs to tests/integration",
    "api": "the in-process stack (moto) belongs to tests/integration",
}


def imports_of(tree: ast.AST) -> set[str]:
    """Every module an ``import`` or ``from ... import`` names, at any depth (a lazy
    import inside a function counts), with ``from a import b``'s ``a.b``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def names_used(tree: ast.AST) -> set[str]:
    """Identifiers, attributes and keywords the code names."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            found.add(node.arg)
    return found


def fixtures_asked_for(tree: ast.AST) -> set[str]:
    """The parameters of the test functions (``test_*``): the fixtures they ask for."""
    return {
        arg.arg
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
        for arg in node.args.args + node.args.kwonlyargs
    }


def forbidden(module: str) -> str | None:
    """The forbidden module ``module`` is or is part of, and why: "socket: a socket ..."."""
    for name, why in FORBIDDEN.items():
        if module == name or module.startswith(name + "."):
            return f"{name}: {why}"
    return None


def helper_path(module: str) -> Path | None:
    """The file of a test helper module (tests.support.x, tests.fakes), else None."""
    parts = module.split(".")
    if parts[0] != "tests":
        return None
    for candidate in (
        TESTS.parent.joinpath(*parts).with_suffix(".py"),
        TESTS.parent.joinpath(*parts, "__init__.py"),
    ):
        if candidate.is_file():
            return candidate
    return None


@cache
def parsed(path: Path) -> ast.Module:
    """A file's syntax tree, read once: the helpers are shared by most test modules."""
    return ast.parse(path.read_text(encoding="utf-8"))


def tier_offences(path: Path) -> set[str]:
    """What ``path`` reaches that the unit tier must not, through its own code and every
    test helper it imports (followed import by import)."""
    offences: set[str] = set()
    seen: set[Path] = set()
    todo = [(path, path.name)]
    while todo:
        current, via = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        tree = parsed(current)
        for module in imports_of(tree):
            if what := forbidden(module):
                offences.add(f"{via} imports {what}")
            elif (helper := helper_path(module)) is not None:
                todo.append((helper, f"{via} -> {module}"))
        for name in names_used(tree) & FORBIDDEN_NAMES.keys():
            offences.add(f"{via} names {name}: {FORBIDDEN_NAMES[name]}")
        for name in fixtures_asked_for(tree) & FORBIDDEN_FIXTURES.keys():
            offences.add(f"{via} asks for {name}: {FORBIDDEN_FIXTURES[name]}")
    return offences


def test_no_unit_test_reaches_moto_a_process_a_socket_or_a_runtime() -> None:
    # (tests/unit/conftest.py imports what it refuses, to refuse it: not a test module.)
    modules = sorted(UNIT.glob("test_*.py"))
    assert len(modules) > 40

    offences = {offence for path in modules for offence in tier_offences(path)}

    assert offences == set(), "\n".join(sorted(offences))


def test_the_check_sees_a_lazy_import_a_helpers_import_and_a_forbidden_call(
    tmp_path: Path,
) -> None:
    module = tmp_path / "test_sample.py"
    module.write_text(
        "from tests.support.turns import predict\n"
        "def test_x() -> None:\n"
        "    import subprocess\n"
        "    with mock_aws(): ...\n"
        "def test_y(start_runtime) -> None: ...\n"
        "def helper(local_runtime) -> None: ...\n"  # not a test: not a fixture
    )
    helper = TESTS / "support" / "turns.py"
    assert helper.is_file()  # a helper the unit tier may use: followed, and clean

    assert tier_offences(module) == {
        "test_sample.py imports subprocess: a process belongs to tests/e2e",
        "test_sample.py names mock_aws: moto belongs to tests/integration",
        "test_sample.py asks for start_runtime: a local runtime belongs to tests/e2e",
    }
    runtime_user = tmp_path / "test_runtime.py"
    runtime_user.write_text("from tests.fakes.openai_server import FakeOpenAIServer\n")
    assert tier_offences(runtime_user) == {
        "test_runtime.py imports tests.fakes.openai_server: a server belongs to tests/e2e",
    }


def test_a_unit_test_that_starts_a_process_fails_at_that_call() -> None:
    """tests/unit/conftest.py's guard is on for every unit test."""
    with pytest.raises(AssertionError, match="started a process"):
        os.system("true")


def test_the_longest_modules_named_for_the_schedule_exist_and_start_first() -> None:
    repo = TESTS.parent
    assert all((repo / path).is_file() for path in LONGEST_FIRST), LONGEST_FIRST

    modules = [
        "tests/unit/test_cors.py",
        "tests/integration/test_turns_api.py",
        LONGEST_FIRST[1],
        "tests/e2e/test_client_e2e.py",
        LONGEST_FIRST[0],
    ]

    order = sorted(modules, key=module_rank)

    assert order == [
        LONGEST_FIRST[0],
        LONGEST_FIRST[1],
        "tests/e2e/test_client_e2e.py",
        "tests/integration/test_turns_api.py",
        "tests/unit/test_cors.py",
    ]

"""Shared test helpers live in tests/support (and fakes in tests/fakes): a test module
never imports from another test module or from a conftest, so deleting or renaming a
test cannot break another, and a helper has one copy."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported_modules(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            # ``from tests.integration import test_turns_api`` imports a module too.
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def is_a_test_module(name: str) -> bool:
    parts = name.split(".")
    return parts[0] == "tests" and (parts[-1] == "conftest" or parts[-1].startswith("test_"))


def test_no_test_code_imports_a_test_module_or_a_conftest() -> None:
    sources = {path: path.read_text(encoding="utf-8") for path in sorted(TESTS.rglob("*.py"))}
    offenders = {
        f"{path.relative_to(TESTS)} imports {name}"
        for path, source in sources.items()
        if "tests." in source  # only these can name one (parsing all is slow)
        for name in imported_modules(ast.parse(source))
        if is_a_test_module(name)
    }
    assert offenders == set()


def test_the_check_sees_both_kinds_of_import() -> None:
    tree = ast.parse(
        "from tests.integration.test_turns_api import predict\n"
        "import tests.e2e.conftest\n"
        "from tests.unit import test_cors\n"
        "from tests.support.tenants import Tenant\n"
    )
    found = {name for name in imported_modules(tree) if is_a_test_module(name)}
    assert found == {
        "tests.integration.test_turns_api",
        "tests.e2e.conftest",
        "tests.unit.test_cors",
    }

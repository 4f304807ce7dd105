"""Running a script of tests/node (Vercel's AI SDK, pinned by its lockfile) under Node."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

NODE_DIR = Path(__file__).resolve().parents[1] / "node"


def node_command(script: str) -> list[str]:
    """``node <script>`` in tests/node, failing (never skipping) without Node or its packages."""
    node = shutil.which("node")
    if node is None:
        pytest.fail("Node (>= 20) is needed for the AI SDK test: install nodejs and npm")
    if not (NODE_DIR / "node_modules" / ".installed").exists():
        pytest.fail("tests/node's packages are not installed: run make node (npm ci)")
    return [node, script]

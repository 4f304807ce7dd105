"""The recipes of the docs, as the e2e tier runs them: a marked code block of a docs page
(``<!-- <name>:start -->`` ... ``<!-- <name>:end -->``), and what it prints once run."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def docs_block(name: str, languages: tuple[str, ...], page: str = "openai.md") -> tuple[str, ...]:
    """The code blocks between ``docs/<page>``'s ``<name>:start`` and ``:end`` markers."""
    fences = "\n\n".join(f"```{language}\n(.*?)```" for language in languages)
    pattern = f"<!-- {name}:start -->\n{fences}\n<!-- {name}:end -->"
    (found,) = re.findall(pattern, (DOCS / page).read_text(), re.S)
    return (found,) if isinstance(found, str) else tuple(found)


def recipe_output(command: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    """The lines a recipe printed, once it ran to the end."""
    result = subprocess.run(
        command, capture_output=True, text=True, env={**os.environ, **env}, cwd=cwd, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()

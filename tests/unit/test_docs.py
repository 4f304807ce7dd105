"""The README is a newcomer's document, every relative link of it and of docs/ resolves
(to a file of the repository, and to a heading of that file when it names one), and the
architecture's module map names every module of the layer, and only those."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", REPO / "client" / "README.md", REPO / "events" / "README.md"]
DOCS += sorted((REPO / "docs").glob("*.md"))
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
README_MAX_LINES = 300


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {anchor(h) for h in HEADING.findall(text)}


def links(path: Path) -> list[str]:
    return LINK.findall(FENCE.sub("", path.read_text(encoding="utf-8")))


def test_the_readme_is_at_most_300_lines() -> None:
    lines = (REPO / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves_to_a_file_and_heading(doc: Path) -> None:
    for target in links(doc):
        if "://" in target or target.startswith("mailto:"):
            continue
        path, _, fragment = target.partition("#")
        resolved = (doc.parent / path).resolve() if path else doc
        assert resolved.exists(), f"{doc.name}: {target} does not exist"
        if fragment and resolved.suffix == ".md":
            assert fragment in anchors(resolved), f"{doc.name}: no heading #{fragment} in {path}"


def test_the_anchor_rule_matches_githubs() -> None:
    assert anchor("Model providers: connections belong to the operator") == (
        "model-providers-connections-belong-to-the-operator"
    )
    assert anchor("Declaring connections (operators)") == "declaring-connections-operators"
    assert anchor("The missing-header 401") == "the-missing-header-401"


def test_a_broken_link_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n[ok](#title) [bad](#nothing) [gone](missing.md)\n")
    assert links(page) == ["#title", "#nothing", "missing.md"]
    assert "title" in anchors(page) and "nothing" not in anchors(page)


LAYER = REPO / "layers" / "common" / "convo_memory"
MAP_ENTRY = re.compile(r"^- `([\w/]+\.py)`: ", re.M)


def module_map(text: str) -> list[str]:
    """The modules docs/architecture.md's "Module map" section lists, in order."""
    section = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    return MAP_ENTRY.findall(section)


def test_the_module_map_names_every_module_of_the_layer_once() -> None:
    listed = module_map((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    modules = {
        str(path.relative_to(LAYER))
        for path in LAYER.rglob("*.py")
        if path.name != "__init__.py" and "__pycache__" not in path.parts
    }
    assert len(listed) == len(set(listed))
    assert set(listed) == modules


def test_the_module_map_reader_sees_only_its_section() -> None:
    text = "## Module map\n\n- `a.py`: one\n- `b/c.py`: two\n\n## Tests\n\n- `d.py`: three\n"
    assert module_map(text) == ["a.py", "b/c.py"]

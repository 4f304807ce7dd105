"""The user-facing docs stay inside the repository and in step with the client."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from convo_memory_client import errors

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", REPO / "client" / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_links_stay_inside_the_repository(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    assert "../shared" not in text and "CONTRACT.md" not in text
    for target in LINK.findall(text):
        if target.startswith(("#", "http://127.0.0.1", "http://localhost")):
            continue
        assert "://" not in target, f"{doc.name} links outside the repository: {target}"
        resolved = (doc.parent / target.split("#", 1)[0]).resolve()
        assert resolved.is_relative_to(REPO), f"{doc.name}: {target} leaves the repository"
        assert resolved.exists(), f"{doc.name}: {target} does not exist"


def test_the_api_reference_documents_every_error_code_the_client_knows() -> None:
    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    table = re.findall(r"^\| (\d{3}) \| `([a-z_]+)` \|", text, re.M)
    documented = {code: int(status) for status, code in table}
    known = {code: cls.status for code, cls in errors._BY_CODE.items()}
    assert documented == known


def test_the_readme_points_at_the_api_reference_and_the_client() -> None:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert "(docs/api.md)" in text and "(client/README.md)" in text

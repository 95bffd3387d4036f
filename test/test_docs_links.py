"""The README is the front door: at most ~300 lines, a table of contents, and every relative
link in it and in docs/ resolving to a file, and an anchor to a heading (GitHub's slugs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE = re.compile(r"```.*?```", re.S)


def slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(path: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.*)$", CODE.sub("", path.read_text()), re.M)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path):
    broken = []
    for link in re.findall(r"\]\(([^)\s]+)\)", CODE.sub("", doc.read_text())):
        if link.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = link.partition("#")
        target = (doc.parent / path) if path else doc
        if not target.exists() or (
            anchor and target.suffix == ".md" and anchor not in headings(target)
        ):
            broken.append(link)
    assert not broken


def test_the_readme_is_a_front_door():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert "## Contents" in text
    assert "make run" in text and "make test" in text

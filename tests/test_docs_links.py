"""Every relative link in README.md and docs/*.md points to a file that exists and, with a `#anchor`, to a heading
that exists; and the README's table of contents links every docs page, so a page cannot be orphaned."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```[ \t]*$", re.S | re.M)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def prose(text: str) -> str:
    """The text outside fenced blocks (a `# comment` in a bash block is no heading, a `[x](y)` in code no link)."""
    return FENCE.sub("", text)


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    for heading in HEADING.findall(prose(path.read_text(encoding="utf-8"))):
        base, n = anchor(heading), 0
        while (name := base if n == 0 else f"{base}-{n}") in found:
            n += 1
        found.add(name)
    return found


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not a file of this repository
            continue
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target}: no heading #{fragment} in {linked.name}")
    return broken


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_the_readme_links_every_docs_page() -> None:
    linked = {target.partition("#")[0] for target in LINK.findall(prose((ROOT / "README.md").read_text()))}
    pages = {f"docs/{page.name}" for page in DOCUMENTS[1:]}
    assert pages - linked == set()


def test_a_missing_file_and_a_missing_heading_are_both_caught(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# Other page\n\n## Its `first` part: here\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[fine](other.md#its-first-part-here) [self](#page) [web](https://example.com/x.md)\n"
        "[gone](missing.md) [bad anchor](other.md#nowhere) [bad self](#nope)\n"
        "```bash\n# not a heading\n[not a link](nothing.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "other.md#nowhere: no heading #nowhere in other.md",
        "#nope: no heading #nope in page.md",
    ]

"""The README stays a five-minute read that still tells the truth: its commands, links and sources."""

from __future__ import annotations

import re
from pathlib import Path

from services.connectors.sources import SOURCES

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
# A markdown link or image target that is neither a URL nor a bare anchor: [text](target) -> target.
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _relative_links(path: Path) -> list[str]:
    targets = LINK.findall(path.read_text(encoding="utf-8"))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_readme_is_at_most_210_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 210


def test_readme_holds_the_two_commands_ci_and_the_makefile_rely_on():
    text = README.read_text(encoding="utf-8")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    for target in ("demo", "test"):
        assert re.search(rf"^make {target}\b", text, re.M), f"README lacks `make {target}`"
        assert re.search(rf"^{target}:", makefile, re.M), f"Makefile lacks target {target}"
    assert "make test" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_every_relative_link_in_readme_and_docs_points_to_a_file():
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in _relative_links(page):
            file_part = target.split("#", 1)[0]
            if file_part and not (page.parent / file_part).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


def _sources_table_names(text: str) -> set[str]:
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| source |"))
    names = set()
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        first_cell = line.split("|")[1]
        names.update(re.findall(r"`([a-z-]+)`", first_cell)[:1])
    return names


def test_readme_sources_table_names_every_source():
    named = _sources_table_names(README.read_text(encoding="utf-8"))
    for source in [*SOURCES, "email", "tickets", "meetings", "documents"]:
        assert source in named, f"README sources table lacks {source}"

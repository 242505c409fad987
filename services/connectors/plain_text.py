"""Text of files read in the caller's process: plain text by its encoding, HTML by one walk of
its parsed tree (visible text and title), and `Extracted`, what every extraction returns."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class Extracted:
    text: str
    title: str = ""
    author: str = ""
    date: datetime | None = None  # the file's own metadata (modified, else created), if any
    notes: tuple[str, ...] = field(default=())  # what was cut (cells past the cap)


def decode_text(data: bytes) -> str:
    """Bytes of a text file as text: a BOM decides, else UTF-8, else Windows-1252 (never fails)."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return data.decode("utf-16", errors="replace")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("cp1252", errors="replace")


_SKIP_TAGS = frozenset({"script", "style", "noscript", "template", "head", "title", "svg"})
_CELL_TAGS = frozenset({"td", "th"})
_BLOCK_TAGS = frozenset("p div li tr h1 h2 h3 h4 h5 h6 table section article header footer pre blockquote "
                        "ul ol dd dt hr".split())


def html_text(markup: str | bytes, root=None) -> Extracted:
    """Visible text of an HTML page and its <title> (else its first <h1>). `root` (a BeautifulSoup
    tag) reads one part of a page already parsed. One walk with a stack, no edits: decompose and
    get_text recurse or rescan, and deeply nested or long pages took minutes."""
    from bs4 import BeautifulSoup, NavigableString, Tag
    from bs4.element import PreformattedString  # comments, doctypes, CDATA: not visible text

    soup = root if root is not None else BeautifulSoup(markup, "html.parser")
    title_tag = soup.find("title") if root is None else None
    title = title_tag.get_text(" ", strip=True) if title_tag else ""
    if not title:
        heading = soup.find("h1")
        title = heading.get_text(" ", strip=True) if heading else ""
    pieces: list[str] = []
    stack = [soup]
    while stack:
        node = stack.pop()
        if isinstance(node, PreformattedString):
            continue
        if isinstance(node, NavigableString):
            pieces.append(str(node))
        elif isinstance(node, Tag):
            if node.name in _SKIP_TAGS:
                continue
            if node.name == "br":
                pieces.append("\n")
            elif node.name in _BLOCK_TAGS:  # a line of its own: a break before, one pushed for after
                _break(pieces)
                stack.append("\n")
            elif node.name in _CELL_TAGS:  # cells stay apart from each other and their row's text
                pieces.append(" ")
                stack.append(" ")
            stack.extend(reversed(node.contents))
        elif node == "\n":  # the marks pushed above: plain strings, never a node of the page
            _break(pieces)
        else:
            pieces.append(node)
    return Extracted(text=_tidy("".join(pieces)), title=" ".join(title.split())[:4096])


def _break(pieces: list[str]) -> None:
    """One line break between blocks, not one per tag: nested blocks end on the same line."""
    if pieces and pieces[-1] != "\n":
        pieces.append("\n")


def _tidy(text: str) -> str:
    lines = (" ".join(line.split()) for line in text.replace("\x00", "").splitlines())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()

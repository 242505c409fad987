"""What the documents source reads from names and text alone: the layout of an export (files,
Confluence, Notion), dates as exports write them, Markdown front matter and headings. Pure
functions, so the reader in `documents` keeps only the walking of exports."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from pathlib import PurePosixPath

from services.connectors.contract import ExportTree
from services.connectors.dates import to_utc
from services.connectors.extract import SUFFIXES

READ = tuple(s for suffixes in SUFFIXES.values() for s in suffixes)
HINTS = {".doc": "save as .docx", ".ppt": "save as .pptx", ".xls": "save as .xlsx", ".rtf": "save as .docx or PDF",
         ".odt": "save as .docx or PDF", ".zip": "pass the .zip itself as an export (archives inside are not unpacked)",
         ".csv": "tables are read only as Notion databases; use `orgmem connect csv` for tickets"}
IMAGES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".bmp", ".ico", ".tif", ".tiff"})
MAX_XML_BYTES = 512 * 1024 * 1024  # entities.xml is read whole (the tree has no streaming read)
PAGE_FILE = re.compile(r"(?:.*_)?(\d{3,})\.html?")  # a Confluence HTML page: `Title_123456.html`
NOTION = re.compile(r"(.*?) ?([0-9a-f]{32})(_all)?\.(md|csv)")  # title, id, `_all` (every row), suffix
META_DATE = re.compile(r"on\s+([A-Z][a-z]{2,8}\.? \d{1,2}, \d{4}(?: \d{1,2}:\d{2}(?: ?[AP]M)?)?)")
PROP = re.compile(r"([A-Z][\w ()-]{0,40}): (.+)")  # a Notion page's `Property: value` line
_NOTION_ID = re.compile(r".*?([0-9a-f]{32})$")
_FRONT = re.compile(r"\A---\r?\n(.*?)\r?\n---\r?\n", re.S)
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
_DATE_FORMATS = ("%B %d, %Y %I:%M %p", "%B %d, %Y", "%b %d, %Y %H:%M", "%b %d, %Y", "%Y/%m/%d %H:%M", "%Y/%m/%d",
                 "%d/%m/%Y", "%b. %d, %Y")


class DocError(ValueError):
    """A date or field of one document that cannot be read: a dead letter."""


def parse_date(value: str, where: str) -> datetime:
    """A date as exports write it (ISO, Confluence's 'Mar 04, 2024', Notion's 'March 4, 2024
    10:15 AM'), in UTC (naive = UTC); DocError for what is not one or outside the window."""
    text = value.strip().strip("\"'@").strip()
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        for form in _DATE_FORMATS:
            try:
                when = datetime.strptime(text, form)
                break
            except ValueError:
                continue
        else:
            raise DocError(f"{where}: {text[:60]!r} is not a date") from None
    return to_utc(when, where, DocError)


def digest(*values: object) -> str:
    """A short, stable version id of what a document carries (so a rerun adds nothing)."""
    return hashlib.sha256("\x1f".join(str(v) for v in values).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def export_name(tree: ExportTree) -> str:
    """The export's folder or .zip name, the first part of a plain file's item id."""
    name = PurePosixPath(tree.label.replace("\\", "/")).name
    name = name[:-4] if name.lower().endswith(".zip") else name
    return re.sub(r"[/\x00]", "_", name.strip("<>")) or "export"


def base_folder(names: list[str], leaf: str) -> str | None:
    """The folder (at the root or one down) holding `leaf`, with its slash; None when none does."""
    found = sorted((n.count("/"), n) for n in names if n.rsplit("/", 1)[-1] == leaf and n.count("/") <= 1)
    if not found:
        return None
    return (found[0][1].rpartition("/")[0] + "/").lstrip("/")


def detect(names: list[str]) -> str:
    """The export's kind by its names: confluence, notion or files."""
    if base_folder(names, "entities.xml") is not None:
        return "confluence"
    base = base_folder(names, "index.html")
    if base is not None:
        inside = [n[len(base):] for n in names if n.startswith(base)]
        if any(PAGE_FILE.fullmatch(rest) or rest.startswith("attachments/") for rest in inside):
            return "confluence"
    if any(NOTION.fullmatch(n.rsplit("/", 1)[-1]) for n in names):
        return "notion"
    return "files"


def front_matter(text: str) -> tuple[dict[str, str], str]:
    """`key: value` lines between two `---` at the top of a Markdown file, and the rest."""
    match = _FRONT.match(text)
    fields: dict[str, str] = {}
    if not match:
        return fields, text
    for line in match.group(1).splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip() and not key.startswith((" ", "\t", "-")):
            fields[key.strip().lower()] = value.strip().strip("\"'")
    return fields, text[match.end():]


def first_heading(text: str) -> str:
    match = _HEADING.search(text)
    return match.group(1).strip() if match else ""


def notion_top(name: str, own: str) -> str:
    """The id of the export's top page holding `name`: the first folder named '<title> <id>'."""
    for part in name.split("/")[:-1]:
        if match := _NOTION_ID.fullmatch(part):
            return match.group(1)
    return own

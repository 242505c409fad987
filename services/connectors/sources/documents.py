"""Documents: folders of files, Confluence space exports and Notion exports, as a folder or a .zip.

The kind is told by the export's contents (or the option `kind`: files, confluence, notion):
- Confluence, XML export: `entities.xml` (Page objects with `version`, `originalVersion` for a
  page's history, BodyContent in storage format). Each page's history is versions of one item,
  oldest first, so the runner supersedes older versions. Item `confluence:<space key>/<page id>`.
- Confluence, HTML export: `index.html` and one `<title>_<page id>.html` per page (breadcrumbs, a
  `page-metadata` line "Created by X, last modified by Y on <date>", `main-content`) and
  `attachments/<page id>/...`. The export holds each page's current version: a later export's
  edit is a new version superseding it. Attachments are documents whose `parent` is their page.
- Notion: pages `Title <32 hex id>.md` (folders of the same name hold subpages), databases as
  `Name <id>.csv` (each row a document, merged with its row page in the `Name <id>/` folder) and
  the properties Notion writes ("Created", "Last edited time", "Created by"). Item
  `notion:<top page id>/<page id>`: the container is the top page, so a subtree exported alone
  removes nothing outside it.
- files: .md/.markdown/.txt/.html/.htm/.pdf/.docx/.pptx/.xlsx, a document per file, item
  `<export name>/<relative path>` (the export's folder or .zip name: keep it between exports).

A document's date (required): front matter `date:`, the Confluence or Notion metadata, the file's
own metadata (PDF ModDate, Office modified); else the option `date`; else the run's time (counted
as `dated_by_run`: the tree gives no file times). Versions are a hash of the text and title (a
Confluence XML version number), so a rerun adds nothing. Other files are counted by suffix with a
hint (`skipped`); Office and PDF go through `services.connectors.extract` (a time cap per file).
"""

from __future__ import annotations

import csv
import hashlib
import io
import re
import xml.etree.ElementTree as ElementTree
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import PurePosixPath

from schemas.documents import MAX_TEXT_CHARS, DocumentIn
from services.connectors.base import DeadLetter
from services.connectors.contract import ExportTree, Found, MemberRefused, Version
from services.connectors.dates import to_utc
from services.connectors.extract import (SUFFIXES, TIME_CAP_SECONDS, Extracted, ExtractError, Extractor, decode_text,
                                         html_text, kind_of)

NAME = "documents"
READ = tuple(s for suffixes in SUFFIXES.values() for s in suffixes)
HINTS = {".doc": "save as .docx", ".ppt": "save as .pptx", ".xls": "save as .xlsx", ".rtf": "save as .docx or PDF",
         ".odt": "save as .docx or PDF", ".zip": "pass the .zip itself as an export (archives inside are not unpacked)",
         ".csv": "tables are read only as Notion databases; use `orgmem connect csv` for tickets"}
IMAGES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp", ".bmp", ".ico", ".tif", ".tiff"})
MAX_XML_BYTES = 512 * 1024 * 1024  # entities.xml is read whole (the tree has no streaming read)
_PAGE_FILE = re.compile(r"(?:.*_)?(\d{3,})\.html?")
_NOTION = re.compile(r"(.*?) ?([0-9a-f]{32})(_all)?\.(md|csv)")
_NOTION_ID = re.compile(r".*?([0-9a-f]{32})$")
_META_DATE = re.compile(r"on\s+([A-Z][a-z]{2,8}\.? \d{1,2}, \d{4}(?: \d{1,2}:\d{2}(?: ?[AP]M)?)?)")
_FRONT = re.compile(r"\A---\r?\n(.*?)\r?\n---\r?\n", re.S)
_PROP = re.compile(r"([A-Z][\w ()-]{0,40}): (.+)")
_DATE_FORMATS = ("%B %d, %Y %I:%M %p", "%B %d, %Y", "%b %d, %Y %H:%M", "%b %d, %Y", "%Y/%m/%d %H:%M", "%Y/%m/%d",
                 "%d/%m/%Y", "%b. %d, %Y")


class DocError(ValueError):
    pass


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


def _hash(*values: object) -> str:
    return hashlib.sha256("\x1f".join(str(v) for v in values).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _export_name(tree: ExportTree) -> str:
    name = PurePosixPath(tree.label.replace("\\", "/")).name
    name = name[:-4] if name.lower().endswith(".zip") else name
    return re.sub(r"[/\x00]", "_", name.strip("<>")) or "export"


def _base(names: list[str], leaf: str) -> str | None:
    """The folder (at the root or one down) holding `leaf`, with its slash; None when none does."""
    found = sorted((n.count("/"), n) for n in names if n.rsplit("/", 1)[-1] == leaf and n.count("/") <= 1)
    return (found[0][1].rpartition("/")[0] + "/").lstrip("/") if found else None


def detect(names: list[str]) -> str:
    if _base(names, "entities.xml") is not None:
        return "confluence"
    base = _base(names, "index.html")
    if base is not None and any(n.startswith(base) and (_PAGE_FILE.fullmatch(n[len(base):]) or
                                                        n[len(base):].startswith("attachments/")) for n in names):
        return "confluence"
    if any(_NOTION.fullmatch(n.rsplit("/", 1)[-1]) for n in names):
        return "notion"
    return "files"


def front_matter(text: str) -> tuple[dict[str, str], str]:
    """`key: value` lines between two `---` at the top of a Markdown file, and the rest."""
    match = _FRONT.match(text)
    if not match:
        return {}, text
    fields = {}
    for line in match.group(1).splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip() and not key.startswith((" ", "\t", "-")):
            fields[key.strip().lower()] = value.strip().strip("\"'")
    return fields, text[match.end():]


def _first_heading(text: str) -> str:
    match = re.search(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)
    return match.group(1).strip() if match else ""


class DocumentsSource:
    name = NAME

    def __init__(self) -> None:
        self.counts: Counter = Counter()  # the last read's tally
        self.skipped: dict[str, int] = {}  # why -> files, as ConnectorReport.skip counts them

    def skip(self, why: str, count: int = 1) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + count

    def read(self, tree: ExportTree, options: Mapping[str, object] | None = None) -> Iterator[Found]:
        options = options or {}
        self.counts, self.skipped = Counter(), {}
        self.label = tree.label
        self.fallback = datetime.now(UTC)
        if options.get("date"):
            self.fallback = parse_date(str(options["date"]), "option date")
        names = tree.names()
        kind = str(options.get("kind") or detect(names))
        readers = {"files": self._files, "confluence": self._confluence, "notion": self._notion}
        if kind not in readers:
            yield DeadLetter(NAME, tree.label, f"kind {kind!r}: one of {', '.join(readers)}")
            return
        self.counts[f"kind:{kind}"] += 1
        with Extractor(time_cap=float(options.get("extract_seconds") or TIME_CAP_SECONDS)) as extractor:
            self.extractor = extractor
            yield from readers[kind](tree, names)

    # --- shared ---------------------------------------------------------------------------------
    def _where(self, name: str) -> str:
        return f"{self.label}/{name}"

    def _other(self, name: str) -> None:
        suffix = PurePosixPath(name.lower()).suffix or "(no suffix)"
        how = HINTS.get(suffix) or ("images carry no text orgmem reads" if suffix in IMAGES
                                    else f"documents reads {', '.join(READ)} only")
        self.skip(f"{suffix} files: {how}")

    def _text(self, tree: ExportTree, name: str) -> str | DeadLetter:
        """A Markdown or CSV member's text (decoded as text files are)."""
        try:
            return decode_text(tree.read(name)).replace("\x00", "")
        except MemberRefused as exc:
            return DeadLetter(NAME, self._where(name), exc.reason)

    def _extract(self, tree: ExportTree, name: str) -> Extracted | DeadLetter:
        try:
            data = tree.read(name)
        except MemberRefused as exc:
            return DeadLetter(NAME, self._where(name), exc.reason)
        try:
            return self.extractor.extract(data, "", name)
        except ExtractError as exc:
            return DeadLetter(NAME, self._where(name), f"cannot extract text: {exc}"[:2000])

    def _version(self, name: str, item: str, text: str, *, title: str, author: str = "", date: datetime | None,
                 version: str = "", tags: tuple[str, ...] = (), participants: tuple[str, ...] = (),
                 parent: str | None = None) -> Found | None:
        text = text.replace("\x00", "").strip()
        if not text:
            self.skip("files with no text: nothing to search in them (a scan needs OCR first)")
            return None
        if len(text) > MAX_TEXT_CHARS:
            return DeadLetter(NAME, self._where(name), f"text over {MAX_TEXT_CHARS} characters ({len(text)}), not read")
        if date is None:
            self.counts["dated_by_run"] += 1
        version = version or _hash(title, text, author)
        try:
            document = DocumentIn(text=text, title=title[:4096] or None, author=author[:512], kind="doc",
                                  date=date or self.fallback, tags=list(tags), thread=item.split("/", 1)[0],
                                  participants=[p[:512] for p in dict.fromkeys(participants) if p],
                                  parent=parent, source_id=f"{item}@{version}" if parent else None)
        except ValueError as exc:
            return DeadLetter(NAME, self._where(name), f"not a valid document: {exc}"[:1000])
        return Version(item=item[:900], version=version, document=document)

    def _file(self, tree: ExportTree, name: str, item: str, parent: str | None = None,
              title: str = "") -> Found | None:
        """One file of any readable type as a version of `item`."""
        kind = kind_of("", name)
        meta: dict[str, str] = {}
        if kind == "text":
            found = self._text(tree, name)
            if isinstance(found, DeadLetter):
                return found
            meta, text = front_matter(found)
            found = Extracted(text=text, title=meta.get("title") or _first_heading(text))
        else:
            found = self._extract(tree, name)
            if isinstance(found, DeadLetter):
                return found
        for note in found.notes:
            self.counts[f"cut: {note}"] += 1
        try:
            date = parse_date(meta["date"], f"{name} date") if meta.get("date") else None
            date = date or (to_utc(found.date, f"{name} metadata date", DocError) if found.date else None)
        except DocError as exc:
            return DeadLetter(NAME, self._where(name), str(exc))
        title = title or found.title or PurePosixPath(name).stem
        return self._version(name, item, found.text, title=title, author=meta.get("author") or found.author,
                             date=date, parent=parent)

    # --- plain folders --------------------------------------------------------------------------
    def _files(self, tree: ExportTree, names: list[str]) -> Iterator[Found]:
        collection = _export_name(tree)
        for name in names:
            if any(part.startswith(".") for part in name.split("/")):
                self.skip("hidden files (names starting with '.'): not read")
            elif PurePosixPath(name.lower()).suffix not in READ:
                self._other(name)
            elif (found := self._file(tree, name, f"{collection}/{name}")) is not None:
                yield found

    # --- Confluence -----------------------------------------------------------------------------
    def _confluence(self, tree: ExportTree, names: list[str]) -> Iterator[Found]:
        base = _base(names, "entities.xml")
        if base is not None:
            yield from self._confluence_xml(tree, base + "entities.xml")
            for name in names:
                if name != base + "entities.xml":
                    self.skip("Confluence XML export files besides entities.xml (attachments are not read)")
            return
        base = _base(names, "index.html") or ""
        space = base.rstrip("/") or _export_name(tree)
        pages: dict[str, str] = {}  # page id -> its source id, for its attachments' parent
        for name in names:
            rest = name[len(base):] if name.startswith(base) else name
            if rest.startswith("attachments/") or rest == "index.html" or not _PAGE_FILE.fullmatch(rest):
                continue
            found = self._confluence_page(tree, name, space, _PAGE_FILE.fullmatch(rest).group(1))
            if isinstance(found, Version):
                pages[found.item.rsplit("/", 1)[1]] = f"{found.item}@{found.version}"
            if found is not None:
                yield found
        for name in names:
            rest = name[len(base):] if name.startswith(base) else name
            parts = rest.split("/")
            if rest == "index.html" or _PAGE_FILE.fullmatch(rest):
                continue
            if len(parts) >= 3 and parts[0] == "attachments" and PurePosixPath(name.lower()).suffix in READ:
                found = self._file(tree, name, f"confluence:{space}/{parts[1]}/{'/'.join(parts[2:])}",
                                   parent=pages.get(parts[1]))
                if found is not None:
                    yield found
            else:
                self._other(name)

    def _confluence_page(self, tree: ExportTree, name: str, space: str, page_id: str) -> Found | None:
        from bs4 import BeautifulSoup

        try:
            soup = BeautifulSoup(tree.read(name), "html.parser")
        except MemberRefused as exc:
            return DeadLetter(NAME, self._where(name), exc.reason)
        heading = soup.find(id="title-text") or soup.find("title")
        title = " ".join(heading.get_text(" ").split()) if heading else PurePosixPath(name).stem
        title = title.split(" : ", 1)[1] if " : " in title else title
        meta = soup.find(class_="page-metadata")
        line = " ".join(meta.get_text(" ").split()) if meta else ""
        author = soup.find(class_="author")
        editor = soup.find(class_="editor")
        people = tuple(" ".join(t.get_text(" ").split()) for t in (author, editor) if t)
        try:
            match = _META_DATE.search(line)
            date = parse_date(match.group(1), f"{name} last modified") if match else None
        except DocError as exc:
            return DeadLetter(NAME, self._where(name), str(exc))
        crumbs = [" ".join(a.get_text(" ").split()) for a in soup.select("#breadcrumbs a")]
        body = soup.find(id="main-content")
        text = html_text("", root=body).text if body else html_text(str(soup)).text
        path = " > ".join([*crumbs, title])
        return self._version(name, f"confluence:{space}/{page_id}", f"{path}\n\n{text}", title=title,
                             author=people[0] if people else "", date=date, participants=people,
                             tags=(f"space:{space}",))

    def _confluence_xml(self, tree: ExportTree, name: str) -> Iterator[Found]:
        try:
            data = tree.read(name, MAX_XML_BYTES)
        except MemberRefused as exc:
            yield DeadLetter(NAME, self._where(name), exc.reason)
            return
        if b"<!DOCTYPE" in data[:4096] or b"<!ENTITY" in data:
            # Confluence writes no DTD: one here is an entity bomb or an external-entity read.
            yield DeadLetter(NAME, self._where(name), "a DTD or entity declarations in entities.xml: not read")
            return
        objects: dict[str, dict[str, dict]] = defaultdict(dict)
        try:
            for _, element in ElementTree.iterparse(io.BytesIO(data), events=("end",)):
                if element.tag != "object" or element.get("class") not in ("Page", "BodyContent", "Space"):
                    continue
                ident = element.findtext("id") or ""
                fields = {p.get("name"): (p.findtext("id") if p.find("id") is not None else (p.text or ""))
                          for p in element.findall("property")}
                fields["body_ids"] = [e.findtext("id") for e in element.findall("collection/element")]
                objects[element.get("class")][ident] = fields
                element.clear()
        except ElementTree.ParseError as exc:
            yield DeadLetter(NAME, self._where(name), f"not XML: {exc}")
            return
        space = next((s.get("key") for s in objects["Space"].values() if s.get("key")), "") or _export_name(tree)
        bodies = {b.get("content"): b.get("body", "") for b in objects["BodyContent"].values()}
        history: dict[str, list[tuple[int, str, dict]]] = defaultdict(list)
        for ident, page in objects["Page"].items():
            status = page.get("contentStatus") or "current"
            if status != "current" and not page.get("originalVersion"):
                self.counts[f"pages:{status}"] += 1
                continue
            try:
                number = int(page.get("version") or 0)
            except ValueError:
                yield DeadLetter(NAME, f"{self._where(name)}#page/{ident}", f"version {page.get('version')!r} is not a number")
                continue
            history[page.get("originalVersion") or ident].append((number, ident, page))
        for item_id in sorted(history, key=lambda i: (len(i), i)):
            for number, ident, page in sorted(history[item_id]):
                where = f"{name}#page/{ident}"
                try:
                    raw = page.get("lastModificationDate") or page.get("creationDate") or ""
                    date = parse_date(raw, f"{where} lastModificationDate") if raw else None
                except DocError as exc:
                    yield DeadLetter(NAME, self._where(where), str(exc))
                    continue
                title = page.get("title") or ident
                people = tuple(p for p in (page.get("creatorName"), page.get("lastModifierName")) if p)
                found = self._version(where, f"confluence:{space}/{item_id}", html_text(bodies.get(ident, "")).text,
                                      title=title, author=people[0] if people else "", date=date,
                                      version=f"v{number}", participants=people, tags=(f"space:{space}",))
                if found is not None:
                    yield found

    # --- Notion ---------------------------------------------------------------------------------
    def _notion(self, tree: ExportTree, names: list[str]) -> Iterator[Found]:
        used: set[str] = set()
        tables = [n for n in names if (m := _NOTION.fullmatch(n.rsplit("/", 1)[-1])) and m.group(4) == "csv"]
        for name in tables:
            match = _NOTION.fullmatch(name.rsplit("/", 1)[-1])
            if not match.group(3) and name[:-4] + "_all.csv" in tables:
                continue  # Notion writes both: _all holds every row, the other the current view
            yield from self._notion_table(tree, names, name, match.group(1), match.group(2), used)
        for name in names:
            match = _NOTION.fullmatch(name.rsplit("/", 1)[-1])
            if name in used or (match and match.group(4) == "csv"):
                continue
            if not match:
                self._other(name)
                continue
            text = self._text(tree, name)
            if isinstance(text, DeadLetter):
                yield text
                continue
            yield from self._notion_page(name, _notion_top(name, match.group(2)), match.group(2),
                                         match.group(1), text)

    def _notion_page(self, name: str, top: str, page_id: str, stem: str, text: str,
                     extra: dict[str, str] | None = None) -> Iterator[Found]:
        lines = text.splitlines()
        title = lines[0].lstrip("#").strip() if lines and lines[0].startswith("# ") else stem
        props = dict(extra or {})
        for line in lines[1:40]:
            if (match := _PROP.fullmatch(line.strip())) and len(match.group(2)) < 500:
                props.setdefault(match.group(1), match.group(2).strip())
        try:
            raw = props.get("Last edited time") or props.get("Created") or props.get("Created time")
            date = parse_date(raw, f"{name} Last edited time") if raw else None
        except DocError as exc:
            yield DeadLetter(NAME, self._where(name), str(exc))
            return
        people = tuple(p for p in (props.get("Created by"), props.get("Last edited by")) if p)
        if extra:  # a database row: its properties head the text, as the row page shows them
            head = "\n".join(f"{k}: {v}" for k, v in extra.items() if v and f"{k}: {v}" not in text)
            text = f"{head}\n\n{text}" if head else text
        found = self._version(name, f"notion:{top}/{page_id}", text, title=title, author=people[0] if people else "",
                              date=date, participants=people)
        if found is not None:
            yield found

    def _notion_table(self, tree: ExportTree, names: list[str], name: str, db: str, db_id: str,
                      used: set[str]) -> Iterator[Found]:
        text = self._text(tree, name)
        try:
            rows = [] if isinstance(text, DeadLetter) else list(csv.reader(io.StringIO(text)))
        except csv.Error as exc:
            text = DeadLetter(NAME, self._where(name), f"not CSV: {exc}")
        if isinstance(text, DeadLetter):
            yield text
            return
        if not rows:
            return
        folder = name[: -len(f"{db_id}.csv")].rstrip("_") + db_id + "/"
        folder = folder if any(n.startswith(folder) for n in names) else f"{name.rsplit('/', 1)[0]}/{db} {db_id}/"
        pages = {}
        for page in names:
            if page.startswith(folder) and "/" not in page[len(folder):] and (m := _NOTION.fullmatch(page[len(folder):])):
                pages.setdefault(m.group(1), (page, m.group(2)))
        header, seen = rows[0], Counter()
        top = _notion_top(name, db_id)
        for index, row in enumerate(rows[1:], 2):
            values = dict(zip(header, row, strict=False))
            title = (row[0] if row else "").strip() or f"{db} row {index}"
            seen[title] += 1
            page, page_id = pages.get(title, (None, ""))
            text = ""
            if page and seen[title] == 1:
                used.add(page)
                text = self._text(tree, page)
                if isinstance(text, DeadLetter):
                    yield text
                    continue
            page_id = page_id if page and seen[title] == 1 else f"{db_id}-{_hash(title, seen[title])}"
            yield from self._notion_page(page or f"{name}#row/{index}", top, page_id, title,
                                         text or f"# {title}", values)


def _notion_top(name: str, own: str) -> str:
    """The id of the export's top page holding `name`: the first folder named '<title> <id>'."""
    for part in name.split("/")[:-1]:
        if match := _NOTION_ID.fullmatch(part):
            return match.group(1)
    return own

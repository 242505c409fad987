"""Documents: folders of files, Confluence space exports and Notion exports, as a folder or a .zip.

Kind by the contents (or option `layout`: files, confluence, notion); docs/connectors.md has the
layouts. Items: `<export name>/<path>` (files), `confluence:<space>/<page id>` (page history, from
entities.xml's `originalVersion`, is versions of one item, oldest first; HTML export attachments
are documents whose parent is their page), `notion:<top page id>/<page id>` (a database row: its
row page's id). A date is required: front matter `date:`, the Confluence or Notion metadata, the
file's own (PDF ModDate, Office modified), else option `date`, else the run's time (counted
`dated_by_run`; the tree gives no file times). Versions hash text and title (Confluence XML: the
version number), so a rerun adds nothing. Other files are counted by suffix with a hint
(`skipped`); Office and PDF go through `services.connectors.extract` (a time cap per file).
"""

from __future__ import annotations

import csv
import io
import xml.etree.ElementTree as ElementTree
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import PurePosixPath

from schemas.documents import MAX_TEXT_CHARS, DocumentIn
from services.connectors.base import DeadLetter
from services.connectors.contract import ExportTree, Found, MemberRefused, Version
from services.connectors.dates import to_utc
from services.connectors.extract import (TIME_CAP_SECONDS, Extracted, ExtractError, Extractor, decode_text, html_text,
                                         kind_of)
from services.connectors.sources.document_formats import (HINTS, IMAGES, MAX_XML_BYTES, META_DATE, NOTION, PAGE_FILE,
                                                          PROP, READ, DocError, base_folder, detect, digest,
                                                          export_name, first_heading, front_matter, notion_top,
                                                          parse_date)
from services.core.people import self_named

NAME = "documents"
__all__ = ["NAME", "DocError", "DocumentsSource", "detect", "front_matter", "parse_date"]


class DocumentsSource:
    name = NAME

    def __init__(self) -> None:
        self.counts: Counter = Counter()  # the last read's tally
        self.skipped: dict[str, int] = {}  # why -> files, as ConnectorReport.skip counts them

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1

    def read(self, tree: ExportTree, options: Mapping[str, object] | None = None) -> Iterator[Found]:
        options = options or {}
        self.counts, self.skipped, self.label, names = Counter(), {}, tree.label, tree.names()
        self.fallback = parse_date(str(options["date"]), "option date") if options.get("date") else datetime.now(UTC)
        kind = str(options.get("layout") or detect(names))
        readers = {"files": self._files, "confluence": self._confluence, "notion": self._notion}
        if kind not in readers:
            yield DeadLetter(NAME, tree.label, f"kind {kind!r}: one of {', '.join(readers)}")
            return
        self.counts[f"kind:{kind}"] += 1
        with Extractor(time_cap=float(options.get("extract_seconds") or TIME_CAP_SECONDS)) as extractor:
            self.extractor = extractor
            yield from readers[kind](tree, names)

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

    def _extract(self, tree: ExportTree, name: str, typed_as: str = "") -> Extracted | DeadLetter:
        try:
            return self.extractor.extract(tree.read(name), "", typed_as or name)
        except MemberRefused as exc:
            return DeadLetter(NAME, self._where(name), exc.reason)
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
        version = version or digest(title, text, author)  # of the name as written: ids stay as they were
        # Whoever writes a file sets its author (front matter, a PDF's or an Office file's
        # properties, a page's author in an export): never an address on the rows, as chat names
        # (services.core.people.self_named).
        author, participants = self_named(author), tuple(self_named(p) for p in participants if p)
        try:
            document = DocumentIn(text=text, title=title[:4096] or None, author=author[:512], kind="doc",
                                  date=date or self.fallback, tags=list(tags), thread=item.split("/", 1)[0],
                                  participants=[p[:512] for p in dict.fromkeys(participants)],
                                  parent=parent, source_id=f"{item}@{version}" if parent else None)
        except ValueError as exc:
            return DeadLetter(NAME, self._where(name), f"not a valid document: {exc}"[:1000])
        return Version(item=item[:900], version=version, document=document)

    def _file(self, tree: ExportTree, name: str, item: str, parent: str | None = None,
              title: str = "", typed_as: str = "") -> Found | None:
        """One file of any readable type as a version of `item`; its type from `typed_as` (a file
        name) where the member's own name has none (a Confluence XML export's attachments)."""
        meta: dict[str, str] = {}
        typed_as = typed_as or name
        found = self._text(tree, name) if kind_of("", typed_as) == "text" else self._extract(tree, name, typed_as)
        if isinstance(found, DeadLetter):
            return found
        if isinstance(found, str):  # Markdown or text: front matter first, else the first heading
            meta, text = front_matter(found)
            found = Extracted(text=text, title=meta.get("title") or first_heading(text))
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

    def _files(self, tree: ExportTree, names: list[str]) -> Iterator[Found]:
        collection = export_name(tree)
        for name in names:
            if any(part.startswith(".") for part in name.split("/")):
                self.skip("hidden files (names starting with '.'): not read")
            elif PurePosixPath(name.lower()).suffix not in READ:
                self._other(name)
            elif (found := self._file(tree, name, f"{collection}/{name}")) is not None:
                yield found

    def _confluence(self, tree: ExportTree, names: list[str]) -> Iterator[Found]:
        if (base := base_folder(names, "entities.xml")) is not None:
            yield from self._confluence_xml(tree, base, names)
            return
        base = base_folder(names, "index.html") or ""
        space = base.rstrip("/") or export_name(tree)
        pages: dict[str, str] = {}  # page id -> its source id, for its attachments' parent
        self.attached: dict[str, str] = {}  # attachment link -> the name the page shows
        for name in names:
            rest = name[len(base):] if name.startswith(base) else name
            if rest.startswith("attachments/") or rest == "index.html" or not PAGE_FILE.fullmatch(rest):
                continue
            found = self._confluence_page(tree, name, space, PAGE_FILE.fullmatch(rest).group(1))
            if isinstance(found, Version):
                pages[found.item.rsplit("/", 1)[1]] = f"{found.item}@{found.version}"
            if found is not None:
                yield found
        for name in names:
            rest = name[len(base):] if name.startswith(base) else name
            parts = rest.split("/")
            if rest == "index.html" or PAGE_FILE.fullmatch(rest):
                continue
            if len(parts) >= 3 and parts[0] == "attachments" and PurePosixPath(name.lower()).suffix in READ:
                if (found := self._file(tree, name, f"confluence:{space}/{parts[1]}/{'/'.join(parts[2:])}",
                                        parent=pages.get(parts[1]), title=self.attached.get(rest, ""))) is not None:
                    yield found
            else:
                self._other(name)

    def _confluence_page(self, tree: ExportTree, name: str, space: str, page_id: str) -> Found | None:
        from bs4 import BeautifulSoup

        try:
            soup = BeautifulSoup(tree.read(name), "html.parser")
        except MemberRefused as exc:
            return DeadLetter(NAME, self._where(name), exc.reason)
        for link in soup.select('a[href^="attachments/"]'):
            self.attached[link["href"]] = " ".join(link.get_text(" ").split())
        heading = soup.find(id="title-text") or soup.find("title")
        title = " ".join(heading.get_text(" ").split()) if heading else PurePosixPath(name).stem
        title = title.split(" : ", 1)[1] if " : " in title else title
        line = " ".join(meta.get_text(" ").split()) if (meta := soup.find(class_="page-metadata")) else ""
        people = tuple(" ".join(tag.get_text(" ").split())
                       for tag in (soup.find(class_="author"), soup.find(class_="editor")) if tag)
        try:
            match = META_DATE.search(line)
            date = parse_date(match.group(1), f"{name} last modified") if match else None
        except DocError as exc:
            return DeadLetter(NAME, self._where(name), str(exc))
        path = " > ".join([*(" ".join(a.get_text(" ").split()) for a in soup.select("#breadcrumbs a")), title])
        text = html_text("", root=body).text if (body := soup.find(id="main-content")) else html_text(str(soup)).text
        return self._version(name, f"confluence:{space}/{page_id}", f"{path}\n\n{text}", title=title,
                             author=people[0] if people else "", date=date, participants=people,
                             tags=(f"space:{space}",))

    def _confluence_xml(self, tree: ExportTree, base: str, names: list[str]) -> Iterator[Found]:
        name = base + "entities.xml"
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
                if element.tag != "object" or element.get("class") not in ("Page", "BodyContent", "Space", "Attachment"):
                    continue
                objects[element.get("class")][element.findtext("id") or ""] = {
                    p.get("name"): (p.findtext("id") if p.find("id") is not None else (p.text or ""))
                    for p in element.findall("property")}
                element.clear()
        except ElementTree.ParseError as exc:
            yield DeadLetter(NAME, self._where(name), f"not XML: {exc}")
            return
        space = next((s.get("key") for s in objects["Space"].values() if s.get("key")), "") or export_name(tree)
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
                yield DeadLetter(NAME, f"{self._where(name)}#page/{ident}",
                                 f"version {page.get('version')!r} is not a number")
                continue
            history[page.get("originalVersion") or ident].append((number, ident, page))
        current: dict[str, str] = {}  # page id -> the source id of its current version
        for item_id in sorted(history, key=lambda i: (len(i), i)):
            for number, ident, page in sorted(history[item_id]):
                where = f"{name}#page/{ident}"
                try:
                    raw = page.get("lastModificationDate") or page.get("creationDate") or ""
                    date = parse_date(raw, f"{where} lastModificationDate") if raw else None
                except DocError as exc:
                    yield DeadLetter(NAME, self._where(where), str(exc))
                    continue
                people = tuple(p for p in (page.get("creatorName"), page.get("lastModifierName")) if p)
                found = self._version(where, f"confluence:{space}/{item_id}", html_text(bodies.get(ident, "")).text,
                                      title=page.get("title") or ident, author=people[0] if people else "", date=date,
                                      version=f"v{number}", participants=people, tags=(f"space:{space}",))
                if found is not None:
                    yield found
                if isinstance(found, Version):
                    current[item_id] = f"{found.item}@{found.version}"
        yield from self._xml_attachments(tree, base, names, objects["Attachment"], space, current)

    def _xml_attachments(self, tree: ExportTree, base: str, names: list[str], attachments: dict[str, dict],
                         space: str, current: dict[str, str]) -> Iterator[Found]:
        """attachments/<page id>/<attachment id>[/<version>]: each attachment's newest file, named
        and typed by its Attachment object (the files have no suffix), linked to its page's current
        version. An attachment entities.xml does not name, or of a type not read, is counted."""
        newest: dict[tuple[str, str], tuple[int, str]] = {}
        for member in names:
            rest = member[len(base):] if member.startswith(base) else member
            parts = rest.split("/")
            if rest == "entities.xml":
                continue
            if parts[0] != "attachments" or len(parts) not in (3, 4) or not all(p.isdigit() for p in parts[1:]):
                self._other(member)
                continue
            number = int(parts[3]) if len(parts) == 4 else 0
            if newest.get((parts[1], parts[2]), (-1, ""))[0] < number:
                newest[(parts[1], parts[2])] = (number, member)
        for (page_id, attachment_id), (_, member) in sorted(newest.items()):
            title = (attachments.get(attachment_id) or {}).get("title") or (attachments.get(attachment_id) or {}).get("fileName")
            if not title:
                self.skip("Confluence XML attachments entities.xml does not name: not read")
            elif PurePosixPath(title.lower()).suffix not in READ:
                self._other(title)
            elif (found := self._file(tree, member, f"confluence:{space}/{page_id}/{title}", parent=current.get(page_id),
                                      title=title, typed_as=title)) is not None:
                yield found

    def _notion(self, tree: ExportTree, names: list[str]) -> Iterator[Found]:
        used: set[str] = set()
        tables = [n for n in names if (m := NOTION.fullmatch(n.rsplit("/", 1)[-1])) and m.group(4) == "csv"]
        for name in tables:
            match = NOTION.fullmatch(name.rsplit("/", 1)[-1])
            if not match.group(3) and name[:-4] + "_all.csv" in tables:
                continue  # Notion writes both: _all holds every row, the other the current view
            yield from self._notion_table(tree, names, name, match.group(1), match.group(2), used)
        for name in names:
            match = NOTION.fullmatch(name.rsplit("/", 1)[-1])
            if name in used or (match and match.group(4) == "csv"):
                continue
            if not match:
                self._other(name)
            elif isinstance(text := self._text(tree, name), DeadLetter):
                yield text
            else:
                yield from self._notion_page(name, notion_top(name, match.group(2)), match.group(2),
                                             match.group(1), text)

    def _notion_page(self, name: str, top: str, page_id: str, stem: str, text: str,
                     extra: dict[str, str] | None = None) -> Iterator[Found]:
        lines = text.splitlines()
        title = lines[0].lstrip("#").strip() if lines and lines[0].startswith("# ") else stem
        props = dict(extra or {})
        for line in lines[1:40]:
            if (match := PROP.fullmatch(line.strip())) and len(match.group(2)) < 500:
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
        folder = (name.rpartition("/")[0] + "/").lstrip("/") + f"{db} {db_id}/"  # the rows' pages
        pages = {}
        for page in names:
            rest = page[len(folder):] if page.startswith(folder) else "/"
            if "/" not in rest and (match := NOTION.fullmatch(rest)):
                pages.setdefault(match.group(1), (page, match.group(2)))
        header, seen, top = rows[0], Counter(), notion_top(name, db_id)
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
            page_id = page_id if page and seen[title] == 1 else f"{db_id}-{digest(title, seen[title])}"
            yield from self._notion_page(page or f"{name}#row/{index}", top, page_id, title,
                                         text or f"# {title}", values)


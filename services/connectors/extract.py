"""Text from a file's bytes, by type: what the documents source and mail/ticket attachments share.

Markdown, plain text and HTML are read in the caller (services.connectors.plain_text).
PDF (pypdf), DOCX (python-docx), PPTX (python-pptx) and XLSX (openpyxl, read-only, a cap on cells)
are parsed in a child process, never in the caller's: a hostile or broken file can make a parser
loop, crash or eat memory, so each file has a time cap (the child is killed past it and the file
fails naming the cap) and the child an address-space cap (resource.setrlimit, where the platform
has it). One long-lived child serves file after file, so a folder of 1,000 PDFs pays one process
start, not 1,000; a child that was killed is replaced on the next file. The libraries are imported
in the child, the first time a file needs them, so a run that meets no PDF never loads pypdf.

The child is quiet: stdout and stderr go to /dev/null, the libraries' loggers (pypdf warns on every
odd file) only count there, and the count goes to the caller's debug log.
"""

from __future__ import annotations

import atexit
import io
import logging
import os
import subprocess
import sys
import threading
import warnings
from datetime import datetime, timedelta
from multiprocessing.connection import Connection
from pathlib import Path, PurePosixPath

from schemas.documents import MAX_TEXT_CHARS
from services.connectors.plain_text import Extracted, decode_text, html_text

log = logging.getLogger(__name__)

TIME_CAP_SECONDS = 30.0  # one file's extraction in the child
MEMORY_CAP_BYTES = 1024 * 1024 * 1024  # what the child may map beyond what it held at start
MAX_CELLS = 500_000  # one workbook's cells read (empty ones too); the rest is cut, and the text says so
_TEXT_LIMIT = MAX_TEXT_CHARS + 1  # the child stops there: a longer text is refused by the caller
_ROOT = str(Path(__file__).resolve().parents[2])  # where the child imports this module from

# kind -> suffixes, and the content types mail and tickets carry.
SUFFIXES = {"text": (".md", ".markdown", ".txt"), "html": (".html", ".htm"), "pdf": (".pdf",),
            "docx": (".docx",), "pptx": (".pptx",), "xlsx": (".xlsx",)}
CONTENT_TYPES = {
    "text/plain": "text", "text/markdown": "text", "text/html": "html", "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xlsx",
}
CHILD_KINDS = frozenset({"pdf", "docx", "pptx", "xlsx"})
_BY_SUFFIX = {suffix: kind for kind, suffixes in SUFFIXES.items() for suffix in suffixes}


class ExtractError(Exception):
    """A file whose text cannot be had: broken, encrypted, over a cap. `str()` says why."""


def kind_of(content_type: str, name: str) -> str | None:
    """The kind of a file ('pdf', 'docx', ...) by content type, else by its name's suffix."""
    kind = CONTENT_TYPES.get((content_type or "").split(";")[0].strip().lower())
    return kind or _BY_SUFFIX.get(PurePosixPath(name.lower()).suffix)


def reads(content_type: str, name: str) -> bool:
    """Whether `extract` reads this file as Office or PDF (mail decodes text and HTML itself)."""
    return kind_of(content_type, name) in CHILD_KINDS


# --- in the child: PDF and Office -----------------------------------------------------------------
class _Full(Exception):
    """The text reached the limit: stop reading, the caller refuses it."""


class _Text:
    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0

    def add(self, text: str | None) -> None:
        if text and text.strip():
            self.parts.append(text.strip())
            self.size += len(text)
            if self.size > _TEXT_LIMIT:
                raise _Full

    def value(self) -> str:
        return "\n\n".join(self.parts)[:_TEXT_LIMIT]


# The creation times python-docx's and python-pptx's default templates carry: a file those
# libraries wrote without setting its properties says it was made then, and by "python-docx".
# Such a date is the template's, not the document's: the file is read as undated instead.
_TEMPLATE_CREATED = frozenset({datetime(2013, 12, 23, 23, 15), datetime(2013, 1, 27, 9, 14, 16)})
_TEMPLATE_AUTHORS = frozenset({"python-docx", "python-pptx"})
_TEMPLATE_EDIT = timedelta(hours=1)  # pptx's template was saved 102 s after it was created


def _office_meta(props) -> tuple[str, str, datetime | None]:
    author = str(getattr(props, "author", None) or getattr(props, "creator", None) or "").strip()
    created, modified = props.created, props.modified
    if created is not None and created.replace(tzinfo=None) in _TEMPLATE_CREATED:
        stamped = modified is None or modified.replace(tzinfo=None) - created.replace(tzinfo=None) < _TEMPLATE_EDIT
        created, modified = None, None if stamped else modified
    return ((props.title or "").strip(), "" if author in _TEMPLATE_AUTHORS else author, modified or created)


def _pdf(data: bytes, out: _Text) -> tuple[str, str, datetime | None, tuple[str, ...]]:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted and not reader.decrypt(""):
        raise ExtractError("an encrypted PDF (a password is needed)")
    meta, when = reader.metadata, None
    try:
        when = (meta.modification_date or meta.creation_date) if meta else None
    except Exception:  # a malformed date string in the metadata is no reason to lose the text
        pass
    title, author = (str(getattr(meta, key, None) or "") for key in ("title", "author"))
    for page in reader.pages:
        out.add(page.extract_text())
    return title, author, when, ()


def _docx(data: bytes, out: _Text) -> tuple[str, str, datetime | None, tuple[str, ...]]:
    from docx import Document
    from docx.table import Table

    document = Document(io.BytesIO(data))
    title, author, when = _office_meta(document.core_properties)
    for block in document.iter_inner_content():
        if isinstance(block, Table):
            for row in block.rows:
                out.add(" | ".join(cell.text.strip() for cell in row.cells))
        else:
            style = (block.style.name if block.style is not None else "") or ""
            if not title and style in ("Title", "Heading 1") and block.text.strip():
                title = block.text.strip()
            out.add(block.text)
    return title, author, when, ()


def _pptx(data: bytes, out: _Text) -> tuple[str, str, datetime | None, tuple[str, ...]]:
    from pptx import Presentation

    deck = Presentation(io.BytesIO(data))
    title, author, when = _office_meta(deck.core_properties)
    for number, slide in enumerate(deck.slides, 1):
        lines = []
        for shape in slide.shapes:
            if shape.has_text_frame:
                lines.append(shape.text_frame.text)
            elif getattr(shape, "has_table", False):
                lines += [" | ".join(c.text for c in row.cells) for row in shape.table.rows]
        heading = slide.shapes.title.text_frame.text.strip() if slide.shapes.title is not None else ""
        title = title or heading
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            lines.append("Notes: " + slide.notes_slide.notes_text_frame.text)
        out.add(f"Slide {number}" + (f": {heading}" if heading else "") + "\n" + "\n".join(lines))
    return title, author, when, ()


def _xlsx(data: bytes, out: _Text, max_cells: int) -> tuple[str, str, datetime | None, tuple[str, ...]]:
    from openpyxl import load_workbook

    # read_only streams the sheets' XML row by row instead of building every cell in memory.
    book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        title, author, when = _office_meta(book.properties)
        cells, notes = 0, ()
        for sheet in book.worksheets:
            rows = []
            for row in sheet.iter_rows(values_only=True):
                values = ["" if v is None else str(v) for v in row]
                cells += len(values)  # empty ones too: they cost the parse as much
                if cells > max_cells:
                    notes = (f"cut at {max_cells} cells (the cap on one workbook)",)
                    break
                if any(values):
                    rows.append("\t".join(values).rstrip("\t"))
            out.add(f"Sheet {sheet.title}\n" + "\n".join(rows) if rows else "")
            if notes:
                out.add(f"[{notes[0]}]")
                break
        return title, author, when, notes
    finally:
        book.close()


_READERS = {"pdf": _pdf, "docx": _docx, "pptx": _pptx}


class _Counter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def _child() -> None:
    """The child's loop, its pipes' fds and the memory cap its arguments: (kind, bytes, cells) in,
    ('ok', text, title, author, date, notes, warnings) or ('error', why) out, until None or EOF."""
    read_fd, write_fd, memory_cap = (int(a) for a in sys.argv[1:4])
    conn, reply = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    warnings.simplefilter("ignore")
    counter = _Counter()
    for name in ("pypdf", "docx", "pptx", "openpyxl"):
        logger = logging.getLogger(name)
        logger.handlers, logger.propagate = [counter], False
        logger.setLevel(logging.WARNING)
    try:
        import resource

        held = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        resource.setrlimit(resource.RLIMIT_AS, (held + memory_cap, held + memory_cap))
    except (ImportError, OSError, ValueError):
        pass  # no address-space limit on this platform: the time cap still holds
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        counter.count, (kind, data, max_cells), out = 0, request, _Text()
        try:
            try:
                meta = _xlsx(data, out, max_cells) if kind == "xlsx" else _READERS[kind](data, out)
            except _Full:
                meta = ("", "", None, ())
            reply.send(("ok", out.value(), *meta, counter.count))
        except MemoryError:
            reply.send(("memory", f"over the extractor's memory cap ({memory_cap // 2**20} MiB)"))
        except ExtractError as exc:
            reply.send(("error", str(exc)))
        except Exception as exc:  # a broken file: its reason, the child serves the next
            reply.send(("error", f"{type(exc).__name__}: {exc}"[:1000]))


class Extractor:
    """Text of files by type, Office and PDF in one long-lived child (see the module doc).
    Thread-safe: one file at a time. Close it (or use `with`) to end the child."""

    def __init__(self, time_cap: float = TIME_CAP_SECONDS, memory_cap: int = MEMORY_CAP_BYTES,
                 max_cells: int = MAX_CELLS):
        self.time_cap, self.memory_cap, self.max_cells = time_cap, memory_cap, max_cells
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._send = self._conn = None
        self.started = 0  # children started: 1 for a run of any length unless one was killed
        self.warnings = 0  # what the libraries warned about, all files together

    def extract(self, data: bytes, content_type: str = "", name: str = "") -> Extracted:
        kind = kind_of(content_type, name)
        if kind is None:
            raise ExtractError(f"no text extractor for {content_type or name!r}")
        if kind == "text":
            return Extracted(text=decode_text(data).replace("\x00", ""))
        if kind == "html":
            return html_text(data)
        with self._lock:
            reply = self._ask(kind, data, name)
        if reply[0] != "ok":
            raise ExtractError(reply[1])
        text, title, author, when, notes, warned = reply[1:]
        self.warnings += warned
        if warned:
            log.debug("extract: %s: the %s library warned %d times", name, kind, warned)
        return Extracted(text=text, title=title.strip()[:4096], author=author.strip()[:512], date=when,
                         notes=tuple(notes))

    def _ask(self, kind: str, data: bytes, name: str) -> tuple:
        if self._process is None or self._process.poll() is not None:
            self._stop(kill=True)
            self._start()
        try:
            self._send.send((kind, data, self.max_cells))
            if not self._conn.poll(self.time_cap):
                self._stop(kill=True)
                return ("error", f"extraction ran past the {self.time_cap:g} s time cap per file; stopped")
            reply = self._conn.recv()
        except (EOFError, OSError, BrokenPipeError):
            code = self._process.poll() if self._process is not None else None
            self._stop(kill=True)
            return ("error", f"the extractor stopped on this file (exit code {code}); "
                             f"over its memory cap ({self.memory_cap // 2**20} MiB) or a crash")
        if reply[0] == "memory":  # the child's heap after a MemoryError is not to be trusted
            self._stop(kill=True)
        return reply

    def _start(self) -> None:
        # A fresh interpreter started by path, not multiprocessing's spawn (which re-runs the
        # caller's main script, an unguarded one included) nor a fork of a server's threads and
        # locks. Two pipes carry multiprocessing's Connection framing; stdout and stderr go nowhere.
        from_parent, to_child = os.pipe()
        from_child, to_parent = os.pipe()
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH", "")) if p)
        code = "from services.connectors.extract import _child; _child()"
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-c", code, str(from_parent), str(to_parent), str(self.memory_cap)],
                pass_fds=(from_parent, to_parent), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env=env, close_fds=True)
        finally:
            os.close(from_parent)
            os.close(to_parent)
        self._send = Connection(to_child, readable=False)
        self._conn = Connection(from_child, writable=False)
        self.started += 1

    def _stop(self, kill: bool = False) -> None:
        process, send, conn, self._process, self._send, self._conn = self._process, self._send, self._conn, None, None, None
        if process is None:
            return
        if not kill:
            try:
                send.send(None)
                process.wait(2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        if process.poll() is None:
            process.kill()
        process.wait(5)
        send.close(), conn.close()

    def close(self) -> None:
        with self._lock:
            self._stop()

    def __enter__(self) -> Extractor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_shared: Extractor | None = None
_shared_lock = threading.Lock()


def extract(data: bytes, content_type: str = "", name: str = "") -> str:
    """The text of one file through the process's shared extractor (mail and ticket attachments:
    the `Extract` they take). ExtractError says why not."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Extractor()
            atexit.register(_shared.close)
    return _shared.extract(data, content_type, name).text

"""Email files: .eml files, mbox files and maildir folders (or folders holding any of them),
parsed by `email.parse_email`, one message one document. A file whose bytes have not changed
since the last run is skipped; a message that cannot be read becomes a dead letter.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from email import policy
from email.errors import CloseBoundaryNotFoundDefect
from email.parser import BytesParser
from pathlib import Path
from typing import BinaryIO

from schemas.documents import DocumentIn
from services.connectors.base import ConnectorState, DeadLetter, Sink, reporting
from services.connectors.email import CONNECTOR, EmailReport, parse_item
from services.connectors.paths import PathGuard, PathRefused, Refused, real

log = logging.getLogger(__name__)

_PARSER = BytesParser(policy=policy.compat32)
# A file is a single message when its first line is a header and a well-known header follows.
_HEADER_LINE = re.compile(rb"^[\x21-\x39\x3b-\x7e]+:")
_KNOWN_HEADERS = re.compile(rb"^(from|to|date|subject|message-id|received|return-path):", re.I | re.M)
_FROM_ESCAPE = re.compile(rb"^>(>*From )")
# One message: an .eml or maildir file, or one message of an mbox (an mbox itself has no limit: it
# is read message by message). A larger one is a dead letter naming the limit.
MAX_MESSAGE_BYTES = 50 * 1024 * 1024
# Text held for the sink before a batch is handed on, whatever the batch size says.
BATCH_CHARS = 16_000_000
_LINE_PIECE = 1 << 16  # bytes of one line read at a time
_HASH_CHUNK = 1 << 20


@dataclass(frozen=True)
class MboxSplit:
    messages: list[bytes]  # complete messages, From_ line removed and >From unescaped
    broken_tail: bytes | None = None  # the cut-off last message, if any
    tail_problem: str | None = None


def _tail_problem(raw: bytes, ends_in_newline: bool) -> str | None:
    if not ends_in_newline:
        return "file ends in the middle of a line"
    if b"\n\n" not in raw.replace(b"\r\n", b"\n"):
        return "headers cut off (no blank line before the body)"
    if b"multipart/" in raw[:65536].lower():
        for part in _PARSER.parsebytes(raw).walk():
            if any(isinstance(d, CloseBoundaryNotFoundDefect) for d in part.defects):
                return "closing MIME boundary missing"
    return None


def iter_mbox(handle: BinaryIO, max_message: int = MAX_MESSAGE_BYTES) -> Iterator[tuple[bytes, str | None]]:
    """The messages of an mbox read from `handle` one at a time, never the whole file: (bytes, None)
    for a message (From_ line removed, >From unescaped); (b"", reason) for one over `max_message`
    bytes, which is skipped without being held; (bytes, reason) for a cut-off last message."""
    parts: list[bytes] | None = None  # None before the first From_ line
    size, in_from_line, at_start = 0, False, True

    def finished(last: bool) -> tuple[bytes, str | None]:
        if size > max_message:
            return b"", f"message: over {max_message} bytes ({size} bytes), not read"
        raw = b"".join(parts)
        problem = _tail_problem(raw, at_start) if last else None
        return raw, f"mbox: last message truncated ({problem})" if problem else None

    while line := handle.readline(_LINE_PIECE):  # a line longer than that comes in pieces
        starts, at_start = at_start, line.endswith(b"\n")
        if starts and line.startswith(b"From "):
            if parts is not None:
                yield finished(False)
            parts, size, in_from_line = [], 0, not at_start
            continue
        if in_from_line:  # the rest of a long From_ line
            in_from_line = not at_start
            continue
        if parts is None:
            continue  # before the first message
        if starts and line.startswith(b">"):
            line = _FROM_ESCAPE.sub(rb"\1", line)
        size += len(line)
        if size > max_message:
            parts.clear()  # counted, no longer held
        else:
            parts.append(line)
    if parts is not None:
        yield finished(True)


def split_mbox(data: bytes) -> MboxSplit:
    """Split an mbox held in memory; the last message is checked for truncation."""
    messages, tail, problem = [], None, None
    for raw, why in iter_mbox(io.BytesIO(data), max_message=len(data) + 1):
        if why:
            tail, problem = raw, why.removeprefix("mbox: last message truncated (").removesuffix(")")
        else:
            messages.append(raw)
    return MboxSplit(messages, tail, problem)


def _is_maildir(path: Path) -> bool:
    return (path / "cur").is_dir() and (path / "new").is_dir()


def _looks_like_message(head: bytes) -> bool:
    """A header block of header lines only (continuations allowed) holding From: and one of Date:,
    Message-ID: or Received:, as every delivered message does. A text file of `Name: value` lines
    (a transcript, a config file) is not mail."""
    text = head.replace(b"\r\n", b"\n")
    block, blank, _ = text.partition(b"\n\n")
    lines = block.split(b"\n")
    if not blank and len(lines) > 1:
        lines = lines[:-1]  # the head may end in the middle of a long header block
    if not lines or not _HEADER_LINE.match(lines[0]):
        return False
    if not all(_HEADER_LINE.match(line) or line[:1] in (b" ", b"\t") for line in lines):
        return False
    names = {m.group(1).lower() for m in _KNOWN_HEADERS.finditer(b"\n".join(lines))}
    return b"from" in names and bool(names & {b"date", b"message-id", b"received"})


def _sniff(path: Path, guard: PathGuard) -> str | None:
    """'mbox', 'message' or None (not mail) from the first bytes of a file."""
    try:
        with guard.open(path) as handle:
            head = handle.read(4096)
    except (OSError, PathRefused):
        return "message"  # let the reader report why it cannot be read
    if head.startswith(b"From "):
        return "mbox"
    if path.suffix.lower() == ".eml":
        return "message"
    return "message" if _looks_like_message(head) else None


def _inputs(path: Path, explicit: bool, guard: PathGuard, folders: set[Path]) -> Iterator[tuple[Path, str]]:
    """(file, kind) for each mail file at or under `path`; kind "!reason" for a path not read."""
    if path.is_file():
        kind = _sniff(path, guard)
        if kind or explicit:  # a file named by the caller is read even if it does not look like mail
            yield path, kind or "message"
        else:
            yield path, "?"  # under a folder and not mail: counted as skipped, never silent
        return
    if not path.is_dir() or real(path) in folders:
        return  # a link back to a folder already walked
    folders.add(real(path))
    try:
        children, refused = guard.children(path)
        boxes: list[Path] = []
        if _is_maildir(path):
            for box in ("new", "cur"):  # tmp holds messages still being delivered
                why = guard.refusal(path / box)
                if why:
                    refused.append(Refused(str(path / box), why))
                    continue
                files, out = guard.children(path / box)
                refused += out
                boxes += [f for f in files if f.is_file()]
            children = [c for c in children if c.name not in {"cur", "new", "tmp"}]
    except OSError as exc:
        yield path, f"!folder: unreadable ({exc.strerror})"
        return
    yield from ((Path(r.path), f"!{r.reason}") for r in refused)
    yield from ((f, "message") for f in boxes)
    for child in children:
        if child.is_dir() or (child.is_file() and not child.name.startswith(".")):
            yield from _inputs(child, False, guard, folders)
        elif child.is_file():
            yield child, "?."  # a hidden file (.DS_Store, an editor's swap file)


def _skipped_why(path: Path, hidden: bool) -> str:
    suffix = path.suffix.lower() or "(no suffix)"
    if hidden:
        return "hidden files: not read under a folder; name the file to read it"
    return (f"{suffix} files: not mail (no From: with Date:, Message-ID: or Received: in the first "
            "4 KiB); name the file to read it anyway")


def _digest(handle: BinaryIO) -> str:
    sha = hashlib.sha256()
    while chunk := handle.read(_HASH_CHUNK):
        sha.update(chunk)
    return sha.hexdigest()


def _items(path: Path, kind: str, handle: BinaryIO) -> Iterator[tuple[str, bytes | str]]:
    """(label, raw message) or (label, dead-letter reason) for each message in one open file, read
    one message at a time."""
    if kind == "mbox":
        for number, (raw, why) in enumerate(iter_mbox(handle, MAX_MESSAGE_BYTES), start=1):
            yield f"{path}#{number}", why or raw
        return
    size = os.fstat(handle.fileno()).st_size
    data = handle.read(MAX_MESSAGE_BYTES + 1) if size <= MAX_MESSAGE_BYTES else b""
    if size > MAX_MESSAGE_BYTES or len(data) > MAX_MESSAGE_BYTES:
        yield str(path), f"message: file over {MAX_MESSAGE_BYTES} bytes ({max(size, len(data))} bytes), not read"
    else:
        yield str(path), data


def run_email(
    paths: Sequence[Path | str],
    sink: Sink,
    state: ConnectorState,
    *,
    acl_from_participants: bool = False,
    batch_size: int = 256,
    guard: PathGuard | None = None,
) -> EmailReport:
    """Ingest .eml files, mbox files, maildir folders, or folders holding any of them. Only paths
    the guard admits are read (default: under the paths given, never the data folder); a link that
    leads elsewhere is a dead letter."""
    report = EmailReport(connector=CONNECTOR)
    guard = guard or PathGuard.around(paths, [state.root.parent])
    done: dict[str, str] = state.values.setdefault("files", {})
    docs: list[DocumentIn] = []
    prints: dict[str, str] = {}
    letters: list[DeadLetter] = []
    seen: set[str] = set()
    held = [0]  # characters of text in `docs`

    def flush() -> None:
        # Fingerprints are saved only after the sink has made the documents durable.
        if docs:
            sink(list(docs))
            report.documents += len(docs)
            docs.clear()
        held[0] = 0
        done.update(prints)
        prints.clear()
        state.record_dead_letters(letters)
        report.dead_letters.extend(letters)
        letters.clear()
        state.save()

    with reporting(report):
        folders: set[Path] = set()
        for given in map(Path, paths):
            if not given.exists():
                letters.append(DeadLetter(CONNECTOR, str(given), "path: does not exist"))
                continue
            if why := guard.refusal(given):
                letters.append(DeadLetter(CONNECTOR, str(given), why))
                continue
            for file, kind in _inputs(given, True, guard, folders):
                if kind.startswith("!"):
                    letters.append(DeadLetter(CONNECTOR, str(file), kind[1:]))
                    continue
                if kind.startswith("?"):
                    report.skip(_skipped_why(file, hidden=kind == "?."))
                    continue
                key = str(file.resolve())
                if key in seen:
                    continue
                seen.add(key)
                try:
                    handle = guard.open(file)
                except PathRefused as exc:
                    letters.append(DeadLetter(CONNECTOR, str(file), exc.reason))
                    continue
                except OSError as exc:
                    letters.append(DeadLetter(CONNECTOR, str(file), f"file: unreadable ({exc.strerror})"))
                    continue
                with handle:
                    try:
                        digest = _digest(handle)
                        handle.seek(0)
                    except OSError as exc:
                        letters.append(DeadLetter(CONNECTOR, str(file), f"file: unreadable ({exc.strerror})"))
                        continue
                    if done.get(key) == digest:
                        report.unchanged += 1
                        continue
                    items = _items(file, kind, handle)
                    while True:
                        try:
                            label, item = next(items)
                        except StopIteration:
                            break
                        except Exception as exc:  # a file the splitter chokes on costs the rest of that file
                            log.exception("email: cannot split %s", file)
                            label, item = str(file), f"file: cannot be read as mail ({type(exc).__name__}: {exc})"
                            items = iter(())
                        report.items_seen += 1
                        if isinstance(item, str):
                            item = DeadLetter(CONNECTOR, label, item)
                        else:
                            item = parse_item(item, label, CONNECTOR, acl_from_participants=acl_from_participants)
                        before = len(docs)
                        report.route(label, item, docs, letters)  # the message and its attachments
                        held[0] += sum(len(doc.text) for doc in docs[before:])
                        if len(docs) >= batch_size or held[0] >= BATCH_CHARS:
                            flush()
                prints[key] = digest
        flush()
    log.info(
        "email: %d documents, %d messages read, %d files unchanged, %d undated, %d dead letters",
        report.documents, report.items_seen, report.unchanged, report.undated, len(report.dead_letters),
    )
    return report

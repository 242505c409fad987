"""Email files: .eml files, mbox files and maildir folders (or folders holding any of them),
parsed by `email.parse_email`, one message one document. A file whose bytes have not changed
since the last run is skipped; a message that cannot be read becomes a dead letter.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from email import policy
from email.errors import CloseBoundaryNotFoundDefect
from email.parser import BytesParser
from pathlib import Path

from schemas.documents import DocumentIn
from services.connectors.base import ConnectorState, DeadLetter, Sink
from services.connectors.email import CONNECTOR, EmailReport, parse_item

log = logging.getLogger(__name__)

_PARSER = BytesParser(policy=policy.compat32)
# A file is a single message when its first line is a header and a well-known header follows.
_HEADER_LINE = re.compile(rb"^[\x21-\x39\x3b-\x7e]+:")
_KNOWN_HEADERS = re.compile(rb"^(?:from|to|date|subject|message-id|received|return-path):", re.I | re.M)


@dataclass(frozen=True)
class MboxSplit:
    messages: list[bytes]  # complete messages, From_ line removed and >From unescaped
    broken_tail: bytes | None = None  # the cut-off last message, if any
    tail_problem: str | None = None


def _tail_problem(raw: bytes, data: bytes) -> str | None:
    if not data.endswith(b"\n"):
        return "file ends in the middle of a line"
    if b"\n\n" not in raw.replace(b"\r\n", b"\n"):
        return "headers cut off (no blank line before the body)"
    if b"multipart/" in raw[:65536].lower():
        for part in _PARSER.parsebytes(raw).walk():
            if any(isinstance(d, CloseBoundaryNotFoundDefect) for d in part.defects):
                return "closing MIME boundary missing"
    return None


def split_mbox(data: bytes) -> MboxSplit:
    """Split an mbox file; the last message is checked for truncation."""
    starts = [m.start() for m in re.finditer(rb"^From ", data, re.M)]
    messages = []
    for begin, end in zip(starts, starts[1:] + [len(data)], strict=True):
        chunk = data[begin:end]
        chunk = chunk[chunk.find(b"\n") + 1:] if b"\n" in chunk else b""
        chunk = re.sub(rb"^>(>*From )", rb"\1", chunk, flags=re.M)
        messages.append(chunk)
    if messages:
        problem = _tail_problem(messages[-1], data)
        if problem:
            return MboxSplit(messages[:-1], messages[-1], problem)
    return MboxSplit(messages)


def _is_maildir(path: Path) -> bool:
    return (path / "cur").is_dir() and (path / "new").is_dir()


def _sniff(path: Path) -> str | None:
    """'mbox', 'message' or None (not mail) from the first bytes of a file."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(4096)
    except OSError:
        return "message"  # let the reader report why it cannot be read
    if head.startswith(b"From "):
        return "mbox"
    if path.suffix.lower() == ".eml":
        return "message"
    block = head.replace(b"\r\n", b"\n").split(b"\n\n", 1)[0]
    lines = block.split(b"\n")
    if _HEADER_LINE.match(lines[0]) and _KNOWN_HEADERS.search(block):
        return "message"
    return None


def _inputs(path: Path, explicit: bool) -> Iterator[tuple[Path, str]]:
    if path.is_file():
        kind = _sniff(path)
        if kind or explicit:  # a file named by the caller is read even if it does not look like mail
            yield path, kind or "message"
        return
    if not path.is_dir():
        return
    try:
        children = sorted(path.iterdir())
        if _is_maildir(path):
            for box in ("new", "cur"):  # tmp holds messages still being delivered
                yield from ((f, "message") for f in sorted((path / box).iterdir()) if f.is_file())
            children = [c for c in children if c.name not in {"cur", "new", "tmp"}]
    except OSError as exc:
        yield path, f"!folder: unreadable ({exc.strerror})"
        return
    for child in children:
        if child.is_dir() and child.is_symlink():
            continue  # a linked folder can loop back on itself
        if child.is_dir() or (child.is_file() and not child.name.startswith(".")):
            yield from _inputs(child, explicit=False)


def _items(path: Path, kind: str, data: bytes) -> Iterator[tuple[str, bytes | str]]:
    """(label, raw message) or (label, dead-letter reason) for each message in one file."""
    if kind != "mbox":
        yield str(path), data
        return
    split = split_mbox(data)
    for number, raw in enumerate(split.messages, start=1):
        yield f"{path}#{number}", raw
    if split.broken_tail is not None:
        yield f"{path}#{len(split.messages) + 1}", f"mbox: last message truncated ({split.tail_problem})"


def run_email(
    paths: Sequence[Path | str],
    sink: Sink,
    state: ConnectorState,
    *,
    acl_from_participants: bool = False,
    batch_size: int = 256,
) -> EmailReport:
    """Ingest .eml files, mbox files, maildir folders, or folders holding any of them."""
    report = EmailReport(connector=CONNECTOR)
    done: dict[str, str] = state.values.setdefault("files", {})
    docs: list[DocumentIn] = []
    prints: dict[str, str] = {}
    letters: list[DeadLetter] = []
    seen: set[str] = set()

    def flush() -> None:
        # Fingerprints are saved only after the sink has made the documents durable.
        if docs:
            sink(list(docs))
            report.documents += len(docs)
            docs.clear()
        done.update(prints)
        prints.clear()
        state.record_dead_letters(letters)
        report.dead_letters.extend(letters)
        letters.clear()
        state.save()

    for given in map(Path, paths):
        if not given.exists():
            letters.append(DeadLetter(CONNECTOR, str(given), "path: does not exist"))
            continue
        for file, kind in _inputs(given, explicit=True):
            if kind.startswith("!"):
                letters.append(DeadLetter(CONNECTOR, str(file), kind[1:]))
                continue
            key = str(file.resolve())
            if key in seen:
                continue
            seen.add(key)
            try:
                data = file.read_bytes()
            except OSError as exc:
                letters.append(DeadLetter(CONNECTOR, str(file), f"file: unreadable ({exc.strerror})"))
                continue
            digest = hashlib.sha256(data).hexdigest()
            if done.get(key) == digest:
                report.unchanged += 1
                continue
            for label, item in _items(file, kind, data):
                report.items_seen += 1
                if isinstance(item, str):
                    item = DeadLetter(CONNECTOR, label, item)
                else:
                    item = parse_item(item, label, CONNECTOR, acl_from_participants=acl_from_participants)
                report.route(label, item, docs, letters)
                if len(docs) >= batch_size:
                    flush()
            prints[key] = digest
    flush()
    log.info(
        "email: %d documents, %d messages read, %d files unchanged, %d undated, %d dead letters",
        report.documents, report.items_seen, report.unchanged, report.undated, len(report.dead_letters),
    )
    return report

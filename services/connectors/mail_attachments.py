"""Attachments of a mail message as documents of their own, linked to the message.

Each attached MIME part of a type orgmem can read becomes a DocumentIn of source "email" whose
source id is `<message source id>#attachment/<n>/<file name>` (n counts the message's attached
parts in MIME order, so the id is the same on every run over the same bytes), whose `parent` is the
message's source id, and whose thread, author, date, participants and access list are the
message's. Its text starts with a line naming the file and the message's subject, so a search for
either finds it. What cannot be read is never the message's failure: an attachment over the size
cap, or whose extraction fails or runs out of time, is a failure naming the file (the run makes it
a dead letter); a type orgmem does not read (images, archives: a zip is never unpacked) is skipped
and counted by type. Pure but for the extractor, which runs Office and PDF files in a child process.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from email.message import Message
from pathlib import PurePosixPath

from pydantic import ValidationError

from schemas.documents import MAX_SOURCE_ID_CHARS, MAX_TEXT_CHARS, DocumentIn

# One attachment's decoded bytes: a larger one is a dead letter, read no further. Smaller than the
# per-message cap (mail_files.MAX_MESSAGE_BYTES), which bounds the encoded message as a whole.
MAX_ATTACHMENT_BYTES = 32 * 1024 * 1024
# The file name inside a source id: long enough to tell files apart, short enough that the id fits.
_NAME_IN_ID = 200
_ARCHIVES = {"application/zip", "application/x-zip-compressed", "application/x-7z-compressed",
             "application/x-rar-compressed", "application/vnd.rar", "application/gzip", "application/x-tar"}
_ARCHIVE_SUFFIXES = {".zip", ".7z", ".rar", ".gz", ".tgz", ".tar", ".bz2", ".xz"}
_BASE64_CHARS = re.compile(rb"[^A-Za-z0-9+/]")

# Text of a file from its bytes: (data, content type, file name) -> text, or raises to say why not.
Extract = Callable[[bytes, str, str], str]
# Which content types `Extract` reads (the Office and PDF types, by content type or file name).
Reads = Callable[[str, str], bool]


@dataclass(frozen=True)
class AttachedPart:
    """One attached part of a message, as the MIME walk found it (email._collect)."""

    index: int  # 1-based, among the message's attached parts in MIME order
    filename: str
    part: Message
    text_type: bool  # a type the mail reader decodes itself (text/*, JSON, XML, ...)


@dataclass
class Attachments:
    documents: list[DocumentIn] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (label suffix, reason)
    skipped: list[str] = field(default_factory=list)  # why, as the report counts it


def office_extractor() -> tuple[Extract | None, Reads | None]:
    """The Office and PDF extractor (services/connectors/extract.py), or (None, None) without it."""
    try:
        from services.connectors import extract as module
    except ImportError:
        return None, None
    return module.extract, module.reads


def attachment_id(message_id: str, index: int, filename: str) -> str:
    """The attachment's source id: the message's, the part's place and (the start of) its name."""
    prefix = f"{message_id}#attachment/{index}/"
    if len(prefix) > MAX_SOURCE_ID_CHARS - 16:  # a message id near the cap: its digest keeps n in the id
        prefix = f"sha256:{hashlib.sha256(message_id.encode()).hexdigest()}#attachment/{index}/"
    room = max(0, min(_NAME_IN_ID, MAX_SOURCE_ID_CHARS - len(prefix)))
    return (prefix + filename[:room])[:MAX_SOURCE_ID_CHARS]


def encoded_size_bound(part: Message) -> int:
    """An upper bound on the part's decoded size, from its encoded payload, without decoding it:
    base64 gives 3 bytes per 4 characters of its alphabet, other encodings at most 1 per byte."""
    payload = part.get_payload()
    if not isinstance(payload, str):
        return 0
    if (part.get("Content-Transfer-Encoding") or "").strip().lower() == "base64":
        raw = payload.encode("ascii", "surrogateescape")
        return (len(raw) - len(_BASE64_CHARS.findall(raw))) * 3 // 4
    return len(payload)


def _is_archive(content_type: str, filename: str) -> bool:
    return content_type in _ARCHIVES or PurePosixPath(filename.lower()).suffix in _ARCHIVE_SUFFIXES


def read_attachments(message: DocumentIn, subject: str, parts: Sequence[AttachedPart],
                     decode_text: Callable[[bytes, Message], str], extract: Extract | None,
                     reads: Reads | None) -> Attachments:
    """The documents of a message's attached parts, the ones that failed and the ones skipped.
    `message` is the message's document (its source id is the parent); `decode_text` turns a text
    part's bytes into text (charset, HTML); `extract`/`reads` read Office and PDF files (None: not
    available, such files are skipped)."""
    found = Attachments()
    if not message.source_id:
        return found
    for attached in parts:
        content_type, name = attached.part.get_content_type(), attached.filename
        label = f"#attachment/{attached.index}/{name}"
        office = reads is not None and extract is not None and reads(content_type, name)
        if _is_archive(content_type, name):
            found.skipped.append(f"attachment: {content_type} (archives are not unpacked)")
            continue
        if not attached.text_type and not office:
            found.skipped.append(f"attachment: {content_type} (no text extractor for this type)")
            continue
        if (bound := encoded_size_bound(attached.part)) > MAX_ATTACHMENT_BYTES:
            found.failures.append((label, f"attachment: over {MAX_ATTACHMENT_BYTES} bytes (about {bound}), not read"))
            continue
        data = attached.part.get_payload(decode=True) or b""
        if len(data) > MAX_ATTACHMENT_BYTES:  # an encoding the bound above does not know (uuencode)
            found.failures.append((label, f"attachment: over {MAX_ATTACHMENT_BYTES} bytes ({len(data)}), not read"))
            continue
        try:
            text = decode_text(data, attached.part) if attached.text_type else extract(data, content_type, name)
        except Exception as exc:  # a broken or hostile file: this attachment only
            found.failures.append((label, f"attachment: cannot extract text ({type(exc).__name__}: {exc})"[:2000]))
            continue
        text = text.replace("\x00", "").strip()
        if not text:
            found.skipped.append(f"attachment: no text ({content_type})")
            continue
        head = f"Attachment {name} of the message {subject!r}" if subject else f"Attachment {name}"
        text = f"{head}\n\n{text}"
        if len(text) > MAX_TEXT_CHARS:
            found.failures.append((label, f"attachment: text over {MAX_TEXT_CHARS} characters ({len(text)}), not ingested"))
            continue
        try:
            found.documents.append(DocumentIn(
                text=text, author=message.author, date=message.date, kind="doc", thread=message.thread,
                title=name[:4096], participants=message.participants, acl=message.acl, source=message.source,
                source_id=attachment_id(message.source_id, attached.index, name), parent=message.source_id,
            ))
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            found.failures.append((label, f"attachment: {problems}"))
    return found

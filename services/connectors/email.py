"""Email connector: one RFC 5322 message, one document.

Reading .eml files, mbox files and maildir folders is `mail_files.py`; the live IMAP
connector is `imap.py`. The stdlib `email` package splits the MIME tree (compat32) and this
module decodes headers, charsets and encoded words itself, so that malformed input degrades to a
warning instead of an exception; BeautifulSoup turns HTML bodies into text. `parse_email` is pure
and shared with the live IMAP connector (imap.py).
"""

from __future__ import annotations

import codecs
import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from email import policy
from email.errors import CloseBoundaryNotFoundDefect, StartBoundaryNotFoundDefect
from email.header import decode_header
from email.message import Message
from email.parser import BytesParser
from email.utils import getaddresses
from pathlib import Path

from pydantic import ValidationError

from schemas.documents import (
    MAX_NAME_CHARS,
    MAX_TAGS,
    MAX_TEXT_CHARS,
    MAX_VALUE_CHARS,
    DocumentIn,
)
from services.connectors.base import ConnectorReport, DeadLetter
from services.connectors.dates import parse_rfc2822
from services.connectors.extract import html_text
from services.connectors.mail_attachments import AttachedPart, office_extractor, read_attachments
from services.core.people import named_address
from services.errors import EmailParseError

log = logging.getLogger(__name__)

CONNECTOR = "email"
SOURCE = "email"
# compat32 hands back header text untouched; we decode it ourselves. The default policy's header
# objects are about ten times slower on large address lists and raise on some malformed values.
_PARSER = BytesParser(policy=policy.compat32)
_SUBJECT_PREFIX = re.compile(r"^\s*(?:(?:re|fw|fwd|aw|wg|sv|vs|tr)\s*(?:\[\d+\])?\s*:\s*)+", re.I)
_SUBJECT_LABEL = re.compile(r"^\s*\[([^\[\]]{1,64})\]\s*")
_MSG_ID = re.compile(r"<([^<>\s]+)>")
_TEXT_APPLICATIONS = {"json", "xml", "javascript", "x-sh", "x-yaml", "yaml", "csv", "x-csv", "sql"}
_TEXT_EXTENSIONS = {".txt", ".csv", ".md", ".json", ".xml", ".log", ".yaml", ".yml", ".ics"}


@dataclass(frozen=True)
class ParsedEmail:
    document: DocumentIn
    warnings: tuple[str, ...] = ()  # "Field: problem" notes; the document still goes in
    # Documents of its attachments (parent: this message), and the attachments that failed
    # ((label suffix, reason): dead letters) or were skipped (why, counted).
    attachments: tuple[DocumentIn, ...] = ()
    attachment_failures: tuple[tuple[str, str], ...] = ()
    attachment_skips: tuple[str, ...] = ()

    @property
    def undated(self) -> bool:
        return self.document.date is None


@dataclass
class EmailReport(ConnectorReport):
    undated: int = 0  # documents ingested with date=None (no or unparseable Date header)
    warnings: list[str] = field(default_factory=list)  # "<path>[#n]: Field: problem"

    def route(self, label: str, parsed: ParsedEmail | DeadLetter, docs: list, letters: list) -> None:
        """One parsed message to its place: a dead letter, or a document noted in this report."""
        if isinstance(parsed, DeadLetter):
            letters.append(parsed)
            return
        docs.append(parsed.document)
        docs.extend(parsed.attachments)
        letters.extend(DeadLetter(self.connector, label + suffix, why) for suffix, why in parsed.attachment_failures)
        for why in parsed.attachment_skips:
            self.skip(why)
        self.undated += parsed.undated
        self.warnings += [f"{label}: {w}" for w in parsed.warnings]


def _decode_bytes(data: bytes, charset: str | None) -> tuple[str, str | None]:
    """Decode text bytes; a bad or unknown charset falls back to UTF-8, then Windows-1252."""
    warning = None
    if charset:
        try:
            name = codecs.lookup(charset.strip().strip('"')).name
            if name == "iso8859-1":  # as browsers do: Latin-1 labels mostly hide Windows-1252 text
                return data.decode("cp1252", errors="replace"), None
            if name != "ascii":
                return data.decode(name, errors="replace"), None
        except (LookupError, ValueError):  # an unknown name, or a codec that is not a text encoding
            warning = f"unknown charset {charset!r}"
    try:
        return data.decode("utf-8"), warning
    except UnicodeDecodeError:
        # Mail labelled ASCII (or not labelled) but holding 8-bit bytes is nearly always Windows-1252.
        return data.decode("cp1252", errors="replace"), warning


def _clean(text: str) -> str:
    return " ".join(text.replace("\x00", "").split())


def _unescape_raw(raw: str) -> str:
    if not any("\udc80" <= ch <= "\udcff" for ch in raw):
        return raw
    return _decode_bytes(raw.encode("ascii", "surrogateescape"), None)[0]


def _decode_words(text: str) -> str:
    """Decode RFC 2047 encoded words; unknown charsets fall back, broken words stay as they came."""
    if "=?" not in text:
        return text
    try:
        # decode_header hands back unencoded runs as raw-unicode-escape bytes (charset None).
        return "".join(
            chunk if isinstance(chunk, str)
            else chunk.decode("raw-unicode-escape") if charset is None
            else _decode_bytes(chunk, charset)[0]
            for chunk, charset in decode_header(text)
        )
    except Exception:  # a malformed encoded word: keep the text as it came
        return text


def _raw_values(msg: Message, name: str) -> list[str]:
    return [value for key, value in msg.raw_items() if key.lower() == name.lower()]


def _header(msg: Message, name: str) -> str:
    """The decoded value of the first `name` header, or "" when absent."""
    raw = _raw_values(msg, name)
    return _clean(_decode_words(_unescape_raw(raw[0]))) if raw else ""


def _addresses(msg: Message, name: str) -> list[tuple[str, str]]:
    """(display name, lower-cased address) pairs from every `name` header."""
    pairs = getaddresses([_unescape_raw(v) for v in _raw_values(msg, name)])
    return [(_clean(_decode_words(n)), _clean(a).lower().strip("<>")) for n, a in pairs if _clean(a)]


def _format(pairs: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{name} <{addr}>" if name else addr for name, addr in pairs)


def _ids(value: str) -> list[str]:
    found = _MSG_ID.findall(value)
    return found or value.split()


def html_to_text(html: str) -> str:
    """Visible text of an HTML body, one line per block element: one walk of the parsed tree
    (services.connectors.extract.html_text), since editing the tree per tag was quadratic and a
    20,000-paragraph body took seconds."""
    return html_text(html).text


def normalise_subject(subject: str) -> tuple[str, list[str]]:
    """Subject without Re:/Fwd: prefixes and leading [labels], and those labels."""
    labels: list[str] = []
    previous = None
    while previous != subject:
        previous = subject
        subject = _SUBJECT_PREFIX.sub("", subject)
        label = _SUBJECT_LABEL.match(subject)
        if label:
            labels.append(label.group(1).strip().lower())
            subject = subject[label.end():]
    return _clean(subject), labels


@dataclass
class _Body:
    texts: list[str] = field(default_factory=list)
    attachments: list[tuple[str, str]] = field(default_factory=list)  # (name, text)
    binaries: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    attached: list[AttachedPart] = field(default_factory=list)  # every attached part, each a document


def _is_text(part: Message, filename: str) -> bool:
    maintype, subtype = part.get_content_maintype(), part.get_content_subtype()
    if maintype == "text":
        return True
    if maintype == "application" and (subtype in _TEXT_APPLICATIONS or subtype.endswith("+xml")):
        return True
    return subtype == "octet-stream" and Path(filename).suffix.lower() in _TEXT_EXTENSIONS


def _part_text(part: Message, body: _Body, payload: bytes | None = None) -> str:
    payload = (part.get_payload(decode=True) or b"") if payload is None else payload
    text, warning = _decode_bytes(payload, part.get_content_charset())
    if warning:
        body.warnings.append(f"Content-Type: {warning}, decoded as UTF-8/Windows-1252")
    return html_to_text(text) if part.get_content_subtype() == "html" else text.replace("\x00", "")


def _collect(part: Message, body: _Body) -> None:
    if part.is_multipart():
        children = [p for p in part.get_payload() if isinstance(p, Message)]
        if part.get_content_subtype() == "alternative" and children:
            # One rendering of the same content: plain text first, then HTML, else the first one.
            ranked = sorted(children, key=lambda p: {"text/plain": 0, "text/html": 1}.get(p.get_content_type(), 2))
            children = [ranked[0]]
        for child in children:
            _collect(child, body)
        return
    try:
        filename = _clean(_decode_words(_unescape_raw(part.get_filename() or "")))
    except Exception:  # a malformed filename parameter
        filename = ""
    attached = bool(filename) or part.get_content_disposition() == "attachment"
    if attached:
        body.attached.append(AttachedPart(len(body.attached) + 1, filename or "unnamed", part, _is_text(part, filename)))
    if not _is_text(part, filename):
        body.binaries.append(f"{filename or 'unnamed'} ({part.get_content_type()})")
    elif attached:
        body.attachments.append((filename or "unnamed", _part_text(part, body)))
    elif part.get_content_type() in {"text/plain", "text/html"} or not body.texts:
        body.texts.append(_part_text(part, body))
    else:
        body.attachments.append((f"inline {part.get_content_type()}", _part_text(part, body)))


def parse_email(raw: bytes, *, acl_from_participants: bool = False) -> ParsedEmail:
    """One RFC 5322 message (bytes) -> a DocumentIn. Raises EmailParseError naming the field."""
    if not raw.strip():
        raise EmailParseError("message: empty")
    msg = _PARSER.parsebytes(raw)
    if not list(msg.raw_items()):
        raise EmailParseError("headers: none found, not an RFC 5322 message")
    warnings: list[str] = []

    message_id = _ids(_header(msg, "Message-ID"))
    source_id = message_id[0] if message_id else "sha256:" + hashlib.sha256(raw).hexdigest()
    if not message_id:
        warnings.append("Message-ID: missing, source_id is the sha256 of the message")

    senders = [(n, a) for n, a in _addresses(msg, "From") if "@" in a]
    author = senders[0][1] if senders else _header(msg, "From")
    if not senders:
        warnings.append(f"From: no address in {author!r}" if author else "From: missing")

    date_text, date = _header(msg, "Date"), None
    if not date_text:
        warnings.append("Date: missing, ingested undated")
    else:
        try:
            # A date outside the API's window (year 0001, 9999 shifted past the end) raises
            # EmailParseError: the message is a dead letter rather than misdated.
            date = parse_rfc2822(date_text, "Date", EmailParseError)
        except (ValueError, TypeError, IndexError):
            warnings.append(f"Date: unparseable value {date_text[:80]!r}, ingested undated")
            date = None

    subject = _header(msg, "Subject")
    topic, labels = normalise_subject(subject)
    refs = _ids(_header(msg, "References"))
    reply_to = _ids(_header(msg, "In-Reply-To"))
    if refs or reply_to or message_id:
        thread = (refs or reply_to or message_id)[0]
    else:
        thread = f"subject:{topic.lower()}" if topic else None

    to, cc, bcc = (_addresses(msg, name) for name in ("To", "Cc", "Bcc"))
    participants = list(dict.fromkeys(addr for _, addr in to + cc))
    acl: list[str] = []
    if acl_from_participants:
        # The sender and blind-copied readers hold the message too, so they keep access.
        acl = list(dict.fromkeys(([author] if "@" in author else []) + participants + [a for _, a in bcc]))
    if senders and (named := named_address(*senders[0])):
        # The author stays the bare address (row ids, `authors` filters and erasures match it);
        # the From pair as written is kept among the participants so the people directory can
        # join this address to the display name that meetings and tickets use for the same human.
        participants.append(named)
    for name, values, limit in (("participants", participants, MAX_NAME_CHARS), ("acl", acl, MAX_VALUE_CHARS)):
        if long := [v for v in values if len(v) > limit]:
            warnings.append(f"{name}: {len(long)} addresses over {limit} characters left out")
            values[:] = [v for v in values if len(v) <= limit]
        if len(values) > MAX_TAGS:
            warnings.append(f"{name}: {len(values)} addresses, kept the first {MAX_TAGS}")
            values[MAX_TAGS:] = []

    body = _Body()
    _collect(msg, body)
    defects = [d for p in msg.walk() for d in p.defects]
    if any(isinstance(d, (CloseBoundaryNotFoundDefect, StartBoundaryNotFoundDefect)) for d in defects):
        warnings.append("Content-Type: multipart boundary missing, body may be incomplete")
    warnings += body.warnings

    head = [("From", _format(senders) or _header(msg, "From")), ("To", _format(to)), ("Cc", _format(cc)),
            ("Date", date_text), ("Subject", subject)]
    text = "\n".join(f"{k}: {v}" for k, v in head if v) + "\n\n" + "\n\n".join(t.strip() for t in body.texts)
    for name, content in body.attachments:
        block = f"\n\n--- attachment: {name} ---\n{content.strip()}"
        if len(text) + len(block) > MAX_TEXT_CHARS:
            warnings.append(f"attachment {name!r}: too long for the document, listed by name only")
            body.binaries.append(name)
        else:
            text += block
    if body.binaries:
        text += "\n\n" + "\n".join(f"[attachment: {name}]" for name in body.binaries)

    if len(text.strip()) > MAX_TEXT_CHARS:
        raise EmailParseError(f"text: over {MAX_TEXT_CHARS} characters ({len(text.strip())}), not ingested")
    tags = ([f"subject:{topic.lower()[:200]}"] if topic else []) + [f"label:{x}" for x in labels]
    try:
        document = DocumentIn(
            text=text.strip(), author=author[:MAX_NAME_CHARS], date=date, kind="email", thread=thread,
            title=subject or None, tags=tags[:MAX_TAGS], participants=participants, source=SOURCE,
            source_id=source_id, acl=acl,
        )
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise EmailParseError(problems) from None
    extract, reads = office_extractor()
    found = read_attachments(document, subject, body.attached, lambda data, part: _part_text(part, _Body(), data),
                             extract, reads)
    return ParsedEmail(document, tuple(warnings), tuple(found.documents), tuple(found.failures), tuple(found.skipped))


def parse_item(raw: bytes, label: str, connector: str, *, acl_from_participants: bool) -> ParsedEmail | DeadLetter:
    """parse_email for a run: a message that cannot be parsed becomes a dead letter at `label`."""
    try:
        return parse_email(raw, acl_from_participants=acl_from_participants)
    except EmailParseError as exc:
        return DeadLetter(connector, label, str(exc))
    except Exception as exc:  # the stdlib parser has odd failure modes; one message never stops a run
        return DeadLetter(connector, label, f"message: unparseable ({type(exc).__name__}: {exc})")

"""What the chat sources (Slack, Mattermost, Teams) share: a thread of messages becomes one whole
document, one `Version` of one item.

A thread is read as a meeting is: one document, every message in order with its author and time.
Its date is the thread's LAST message: a row's date is then never earlier than a word it holds, so
an `as_of` bound never lets a later reply through, and the version of a thread as it stood on a day
is the one dated on or before that day (each new reply makes a new, later-dated version, which the
runner marks as superseding the earlier one). Its author is the thread's starter.

`version` is a short hash of what makes the thread's text (each message's id, edit mark, text and
attachment names): the same export gives the same versions, an edit gives a new one. `parts` are
the message ids: a later version without one of them says that message was deleted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from pydantic import ValidationError

from schemas.documents import MAX_NAME_CHARS, MAX_TAGS, MAX_TEXT_CHARS, MAX_VALUE_CHARS, DocumentIn
from services.connectors.base import DeadLetter
from services.connectors.contract import MAX_MEMBER_BYTES, ExportTree, MemberRefused, Removed, Version
from services.connectors.dates import to_utc
from services.core.people import mention_tags, self_named

TITLE_CHARS = 120
VERSION_CHARS = 16


class ChatError(ValueError):
    """One message or file of a chat export that cannot be read; it becomes a dead letter."""


@dataclass(frozen=True)
class Message:
    id: str  # unique within its channel: a Slack ts, a Teams message id, a Mattermost post key
    author: str  # the display name shown in the text
    when: datetime  # UTC
    text: str
    edited: str = ""  # the source's edit mark (an edit's time): part of the version
    files: tuple[str, ...] = ()  # attachment names or titles, shown in the text
    author_id: str = ""
    mentions: tuple[str, ...] = ()  # the known users it @-mentions, by the names authors go by


@dataclass
class Thread:
    """A thread of one channel (or chat): the item `<channel>/<root>`."""

    channel: str  # the channel's id: the row's `thread`
    channel_name: str
    root: str
    messages: list[Message] = field(default_factory=list)
    readers: tuple[str, ...] = ()
    private: bool = False
    group: str = ""  # the source's id of the group the readers form (a private channel's id)
    deleted: int = 0  # messages the export marks deleted: none left means the thread is gone


def item_of(thread: Thread) -> str:
    return f"{thread.channel}/{thread.root}"


def message_line(message: Message) -> str:
    stamp = message.when.strftime("%Y-%m-%d %H:%M")
    body = message.text.strip()
    if message.files:
        names = "; ".join(message.files)
        body = f"{body}\n[attached: {names}]" if body else f"[attached: {names}]"
    mark = " (edited)" if message.edited else ""
    return f"[{stamp}] {message.author}{mark}: {body}"


def version_of(messages: Iterable[Message]) -> str:
    key = json.dumps([[m.id, m.edited, m.text, list(m.files)] for m in messages], ensure_ascii=False)
    return hashlib.sha256(key.encode()).hexdigest()[:VERSION_CHARS]


def _clip(value: str, cap: int) -> str:
    return value if len(value) <= cap else value[: cap - 1] + "…"


def thread_version(source: str, thread: Thread, where: str, dated_parts: bool = False) -> Version | DeadLetter:
    """The thread's one Version, or a dead letter when it has no message or cannot be a document
    (its text over the cap). `dated_parts`: give each message's date (`Version.part_dates`), for a
    source whose export may hold only some days of a thread (Slack's day files)."""
    # Chat users set their own names: never an address on the rows (services.core.people.self_named).
    messages = [replace(m, author=self_named(m.author), mentions=tuple(map(self_named, m.mentions)))
                for m in sorted(thread.messages, key=lambda m: (m.when, m.id))]
    if not messages:
        return DeadLetter(source, where, "a thread with no readable message")
    text = "\n".join(message_line(m) for m in messages)
    if len(text) > MAX_TEXT_CHARS:
        return DeadLetter(source, where, f"thread text of {len(text)} characters, over {MAX_TEXT_CHARS}; not read")
    posters = list(dict.fromkeys(_clip(m.author, MAX_NAME_CHARS) for m in messages))
    first_line = next((ln for ln in messages[0].text.splitlines() if ln.strip()), "") or "(attachment)"
    label = thread.channel_name or thread.channel
    mentioned = mention_tags(_clip(name, MAX_VALUE_CHARS - 8) for m in messages for name in m.mentions)
    tags = [f"channel:{_clip(label, MAX_VALUE_CHARS - 8)}",
            *(f"speaker:{_clip(p, MAX_VALUE_CHARS - 8)}" for p in posters), *mentioned][:MAX_TAGS]
    try:
        document = DocumentIn(
            text=text, author=posters[0], date=messages[-1].when, kind="chat",
            thread=_clip(thread.channel, 1024), title=_clip(f"{label}: {first_line.strip()}", TITLE_CHARS),
            tags=tags, participants=posters[:MAX_TAGS])
    except ValidationError as exc:
        return DeadLetter(source, where, f"not a document: {exc.errors()[0].get('msg', exc)}"[:500])
    return Version(item=item_of(thread), version=version_of(messages), document=document,
                   readers=tuple(dict.fromkeys(thread.readers)), private=thread.private,
                   group=thread.group if thread.private else "", parts=frozenset(m.id for m in messages),
                   part_dates={m.id: m.when.isoformat() for m in messages} if dated_parts else {})


def epoch_date(seconds: float, where: str) -> datetime:
    """A POSIX time in UTC inside the accepted window, or ChatError."""
    try:
        when = datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, OSError, ValueError):
        raise ChatError(f"{where}: {seconds!r} is not a representable time") from None
    return to_utc(when, where, ChatError)


def iso_date(value: object, where: str) -> datetime:
    """An ISO 8601 time ('2024-01-02T10:00:00.123Z', as Graph writes them) in UTC, or ChatError."""
    if not isinstance(value, str) or not value.strip():
        raise ChatError(f"{where}: missing or not a time")
    text = value.strip()
    # Graph writes up to 7 fractional digits; fromisoformat reads at most 6.
    head, dot, rest = text.partition(".")
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = head + "." + rest[: min(digits, 6)] + rest[digits:]
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ChatError(f"{where}: {value[:60]!r} is not an ISO 8601 time") from None
    return to_utc(when, where, ChatError)



def thread_found(source: str, thread: Thread, where: str) -> Version | Removed | DeadLetter:
    """The thread's Version; `Removed` when the export still lists it but every message of it is
    marked deleted (a tombstone, so its earlier versions go by the deletion policy)."""
    if not thread.messages and thread.deleted:
        return Removed(item_of(thread), f"every message deleted in {source}")
    return thread_version(source, thread, where)


def read_json(tree: ExportTree, name: str, limit: int = MAX_MEMBER_BYTES) -> object:
    """A member parsed as JSON, or ChatError saying why not (refused, not UTF-8, not JSON)."""
    try:
        data = tree.read(name, limit)
    except MemberRefused as exc:
        raise ChatError(exc.reason) from None
    try:
        return json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ChatError(f"not JSON: {str(exc)[:200]}") from None


class Letters:
    """One file's dead letters: the first `cap` named one by one, the rest summed in one letter,
    so a file of a million bad lines costs a handful of letters, not a million."""

    def __init__(self, source: str, where: str, cap: int = 20):
        self.source, self.where, self.cap, self.count = source, where, cap, 0

    def add(self, where: str, reason: str) -> list[DeadLetter]:
        self.count += 1
        return [DeadLetter(self.source, where, reason)] if self.count <= self.cap else []

    def rest(self) -> list[DeadLetter]:
        more = self.count - self.cap
        return [DeadLetter(self.source, self.where, f"{more} more not read")] if more > 0 else []

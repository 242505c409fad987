"""Slack workspace exports (the standard layout an administrator downloads), as a folder or a .zip.

The export holds `users.json`, `channels.json` (public channels), `groups.json` (private
channels), `mpims.json` (group DMs), `dms.json` (DMs), and one folder per conversation (a channel's
name; a DM's id) of day files (`2024-01-02.json`, a list of messages). Each thread is one
document (`services.connectors.sources.chat`): a message and its replies by `thread_ts`, read from
all of the channel's days first, so a reply a day or a month later still joins it; a message with
no replies is a thread of one. The item is `<channel id>/<thread ts>`; parts are message ts.

Permissions: public channels are the tenant's; private channels, group DMs and DMs are private,
readable by their `members` (the runner maps them to principals). A conversation folder that no
metadata file lists is not read (a dead letter): its privacy is unknown, and guessing "public"
would hand a private conversation to the whole tenant.

Deleted messages (`tombstone`, `message_deleted`) are not text and not parts, so their thread's
next version lacks them; a thread whose first message was deleted keeps its replies. Exports may
cover a date range (`dated_exports`) and each part is dated (`part_dates`): an export of later days
lacks the earlier threads and a thread's earlier replies without their reading as deleted. Join and
leave notices are left out (counted). Mentions `<@U123>` read as the user's name; an id no user
has stays as written and is counted (`counts["unknown_mentions"]`). Attached files are named in
the text; the export carries their links, not their bytes (`file_documents` is the hook).
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from services.connectors.base import DeadLetter
from services.connectors.contract import ExportTree, Found, MemberRefused
from services.connectors.sources.chat import ChatError, Message, Thread, epoch_date, thread_version

NAME = "slack"
META = ("users.json", "channels.json", "groups.json", "mpims.json", "dms.json")
PRIVATE_META = ("groups.json", "mpims.json", "dms.json")
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}\.json")
_TS = re.compile(r"(\d{1,13})(?:\.(\d{1,9}))?")
_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
NOT_TEXT = frozenset({"tombstone", "message_deleted"})
NOTICES = frozenset({"channel_join", "channel_leave", "group_join", "group_leave"})
LETTERS_PER_FILE = 20  # one file's bad messages named one by one; past this, one letter sums the rest
_MARKUP = re.compile(r"<([^<>\n]{1,1024})>")


@dataclass(frozen=True)
class Channel:
    id: str
    name: str
    private: bool
    members: tuple[str, ...] = ()


def _where(tree: ExportTree, name: str) -> str:
    return f"{tree.label}/{name}"


def _json(tree: ExportTree, name: str) -> Any:
    """A member parsed as JSON, or ChatError saying why not (refused, not UTF-8, not JSON)."""
    try:
        data = tree.read(name)
    except MemberRefused as exc:
        raise ChatError(exc.reason) from None
    try:
        return json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ChatError(f"not JSON: {str(exc)[:200]}") from None


def _ts(value: object, where: str) -> tuple[str, int, int]:
    """A Slack ts ('1700000000.000100') as (text, seconds, microseconds), or ChatError."""
    if not isinstance(value, str) or not (match := _TS.fullmatch(value)):
        raise ChatError(f"{where}: ts {str(value)[:40]!r} is not a Slack timestamp")
    return value, int(match.group(1)), int((match.group(2) or "0").ljust(6, "0")[:6])


def user_names(value: object) -> dict[str, str]:
    """users.json: id -> the name Slack shows (display name, else real name, else handle)."""
    if not isinstance(value, list):
        raise ChatError(f"expected a list of users, got {type(value).__name__}")
    names: dict[str, str] = {}
    for user in value:
        if not isinstance(user, dict) or not isinstance(user.get("id"), str):
            continue
        profile = user.get("profile") if isinstance(user.get("profile"), dict) else {}
        for candidate in (profile.get("display_name"), profile.get("real_name"), user.get("real_name"),
                          user.get("name")):
            if isinstance(candidate, str) and candidate.strip():
                names[user["id"]] = candidate.strip()
                break
    return names


def _channels(value: object, private: bool, is_dm: bool) -> Iterator[tuple[str, Channel]]:
    """(folder, channel) of one metadata file; a DM's folder is its id, a channel's its name."""
    if not isinstance(value, list):
        raise ChatError(f"expected a list of conversations, got {type(value).__name__}")
    for entry in value:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str) or not _ID.fullmatch(entry["id"]):
            continue
        name = entry.get("name") if isinstance(entry.get("name"), str) else ""
        raw = entry.get("members")
        members = tuple(m for m in raw if isinstance(m, str) and m)[:10_000] if isinstance(raw, list) else ()
        folder = entry["id"] if is_dm or not name else name
        yield folder, Channel(entry["id"], name or entry["id"], private, members)


class Mentions:
    """Slack's markup (`<@U1>`, `<#C1|name>`, `<!here>`, `<url|label>`) as plain text."""

    def __init__(self, users: Mapping[str, str], channels: Mapping[str, str], counts: Counter):
        self.users, self.channels, self.counts = users, channels, counts

    def _one(self, match: re.Match) -> str:
        inner = match.group(1)
        target, _, label = inner.partition("|")
        if target.startswith("@"):
            who = target[1:]
            if who in self.users:
                return f"@{self.users[who]}"
            self.counts["unknown_mentions"] += 1
            return f"@{who}"
        if target.startswith("#"):
            return f"#{self.channels.get(target[1:]) or label or target[1:]}"
        if target.startswith("!"):
            return label or f"@{target[1:].split('^')[0]}"
        return f"{label} ({target})" if label and label != target else target

    def named(self, text: str) -> tuple[str, ...]:
        """The known users `text` mentions, by name (an unknown id names no one)."""
        found = (match.group(1).partition("|")[0] for match in _MARKUP.finditer(text))
        return tuple(dict.fromkeys(self.users[t[1:]] for t in found if t.startswith("@") and t[1:] in self.users))

    def render(self, text: str) -> str:
        return html.unescape(_MARKUP.sub(self._one, text))


def _files(raw: object) -> tuple[str, ...]:
    if not isinstance(raw, list):
        return ()
    names = []
    for item in raw[:100]:
        if isinstance(item, dict):
            title, name = item.get("title"), item.get("name")
            parts = [p.strip() for p in (title, name) if isinstance(p, str) and p.strip()]
            if parts:
                names.append(parts[0] if len(set(parts)) == 1 else f"{parts[0]} ({parts[1]})")
    return tuple(names)


def parse_message(raw: object, where: str, users: Mapping[str, str], mentions: Mentions,
                  counts: Counter) -> tuple[str, Message] | None:
    """(thread ts, message) of one entry of a day file; None for what is not text (a deleted
    message, a join notice); ChatError for what cannot be read."""
    if not isinstance(raw, dict):
        raise ChatError(f"{where}: a message must be an object, got {type(raw).__name__}")
    subtype = raw.get("subtype")
    if subtype in NOT_TEXT or subtype in NOTICES:
        counts["deleted" if subtype in NOT_TEXT else "notices"] += 1
        return None
    ts, seconds, micros = _ts(raw.get("ts"), where)
    at = f"{where}#{ts}"
    when = epoch_date(seconds, f"{at} ts") + timedelta(microseconds=micros)
    root = raw.get("thread_ts")
    root = _ts(root, at)[0] if root not in (None, ts) else ts
    user = raw.get("user") if isinstance(raw.get("user"), str) else ""
    profile = raw.get("user_profile") if isinstance(raw.get("user_profile"), dict) else {}
    author = next((n.strip() for n in (users.get(user), profile.get("display_name"), profile.get("real_name"),
                                      raw.get("username"), user) if isinstance(n, str) and n.strip()), "unknown")
    text = raw.get("text", "")
    if not isinstance(text, str):
        raise ChatError(f"{at}: text must be a string, got {type(text).__name__}")
    edited = raw.get("edited")
    mark = edited.get("ts") if isinstance(edited, dict) and isinstance(edited.get("ts"), str) else ""
    files = _files(raw.get("files"))
    if not text.strip() and not files:
        counts["empty"] += 1
        return None
    return root, Message(id=ts, author=author, when=when, text=mentions.render(text), edited=mark[:40],
                         files=files, author_id=user, mentions=mentions.named(text))


def _base(names: list[str]) -> str:
    """The folder holding the metadata files: the export's root, or one folder down when the
    archive wraps everything in one top-level folder."""
    found = sorted((n.count("/"), n) for n in names if n.rsplit("/", 1)[-1] in META and n.count("/") <= 1)
    return found[0][1].rpartition("/")[0] + "/" if found and "/" in found[0][1] else ""


class SlackSource:
    name = NAME
    # An export may cover a date range (an administrator picks one): a thread, or a reply, missing
    # from it is judged deleted only inside the days it holds for the channel.
    dated_exports = True

    def __init__(self) -> None:
        self.counts: Counter = Counter()  # the last read's tally (see the module doc)

    def read(self, tree: ExportTree, options: Mapping[str, object] | None = None) -> Iterator[Found]:
        self.counts = Counter()
        names = tree.names()
        base = _base(names)
        users: dict[str, str] = {}
        channels: dict[str, Channel] = {}
        for meta in META:
            if base + meta not in names:
                continue
            try:
                value = _json(tree, base + meta)
                if meta == "users.json":
                    users = user_names(value)
                    continue
                for folder, channel in _channels(value, meta in PRIVATE_META, meta == "dms.json"):
                    # A folder listed twice keeps its private listing: never widen who reads it.
                    if folder not in channels or channel.private:
                        channels[folder] = channel
            except ChatError as exc:
                yield DeadLetter(NAME, _where(tree, base + meta), str(exc))
        mentions = Mentions(users, {c.id: c.name for c in channels.values()}, self.counts)
        days: dict[str, list[str]] = defaultdict(list)
        for name in names:
            if not name.startswith(base):
                continue
            folder, slash, leaf = name[len(base):].rpartition("/")
            if slash and "/" not in folder and _DAY.fullmatch(leaf):
                days[folder].append(name)
            elif name[len(base):] not in META:
                self.counts["other_files"] += 1
        for folder in sorted(days):
            channel = channels.get(folder)
            if channel is None:
                yield DeadLetter(NAME, _where(tree, base + folder), "a conversation folder that no "
                                 "channels/groups/mpims/dms.json lists: its members and privacy are unknown; not read")
                continue
            yield from self._channel(tree, channel, sorted(days[folder]), users, mentions)

    def _channel(self, tree: ExportTree, channel: Channel, files: list[str], users: Mapping[str, str],
                 mentions: Mentions) -> Iterator[Found]:
        threads: dict[str, Thread] = {}
        seen: set[str] = set()
        for name in files:
            where = _where(tree, name)
            try:
                value = _json(tree, name)
                if not isinstance(value, list):
                    raise ChatError(f"expected a list of messages, got {type(value).__name__}")
            except ChatError as exc:
                yield DeadLetter(NAME, where, str(exc))
                continue
            bad = 0
            for index, raw in enumerate(value):
                try:
                    found = parse_message(raw, f"{where}[{index}]", users, mentions, self.counts)
                except ChatError as exc:
                    bad += 1
                    if bad <= LETTERS_PER_FILE:
                        yield DeadLetter(NAME, f"{where}[{index}]", str(exc))
                    continue
                if found is None:
                    continue
                root, message = found
                if message.id in seen:  # the same message in two day files: read once
                    self.counts["repeated"] += 1
                    continue
                seen.add(message.id)
                thread = threads.setdefault(root, Thread(
                    channel.id, channel.name, root, readers=channel.members if channel.private else (),
                    private=channel.private, group=channel.id))
                thread.messages.append(message)
            if bad > LETTERS_PER_FILE:
                yield DeadLetter(NAME, where, f"{bad - LETTERS_PER_FILE} more messages not read")
        for root in sorted(threads, key=_ts_key):
            yield thread_version(NAME, threads[root], f"{_where(tree, channel.name)}#{root}", dated_parts=True)
            yield from self.file_documents(tree, channel, threads[root])

    def file_documents(self, tree: ExportTree, channel: Channel, thread: Thread) -> Iterator[Found]:
        """The documents of a thread's attached files. Slack's standard export carries files'
        links (url_private), not their bytes, so there is nothing to extract: it yields nothing.
        An export that does carry bytes, extracted by the document sources, plugs in here."""
        return iter(())


def _ts_key(ts: str) -> tuple[int, str]:
    whole, _, frac = ts.partition(".")
    return int(whole), frac.ljust(9, "0")

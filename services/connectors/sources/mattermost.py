"""Mattermost bulk exports (`mmctl export create`: a .zip holding a JSONL file and `data/` with the
attached files), as the .zip, its folder, or a folder holding the .jsonl file alone.

Every `*.jsonl` member is read, one JSON object a line, in the bulk-load format: `{"type":
"version"|"team"|"channel"|"user"|"post"|"direct_channel"|"direct_post", "<type>": {...}}`. The
lines read here, by their documented fields:

- `channel`: `team`, `name`, `display_name`, `type` ("O" open; "P" private; anything but "O" is
  read as private, never widened).
- `user`: `username`, `first_name`, `last_name`, `nickname`, and `teams[].channels[].name`: the
  channels the user is a member of (the format keeps memberships on the users, not the channels).
- `post`: `team`, `channel`, `user`, `message`, `create_at` and `edit_at` (epoch milliseconds),
  `type` (`system_*` notices are left out, counted), `props.attachments` (message attachments: their
  pretext, title and text are read), `attachments[].path` (files: named in the text by file name),
  `replies[]` (the same fields, no team or channel). `delete_at`, which some exporters write on a
  post or a reply, marks it deleted.
- `direct_post`: as a post, with `channel_members` (usernames) instead of team and channel.

A post and its replies are one document (`services.connectors.sources.chat`). The format carries
no post ids: a post is known by its channel, creation time and author, so the item is
`<team>:<channel>/<create_at>@<user>` (a direct channel's is `direct:<members, sorted>`) and its
parts are `<create_at>@<user>` of each message. The part before the first "/" is the channel: the
runner judges a thread gone by absence only inside channels this run read, so a channel archived
out of a later export (mmctl leaves archived channels out by default) deletes nothing. The same
post on two lines (an export appended to) is read once, the one with the later `edit_at`, else the
later line. A deleted message is neither text nor part, so its thread's next version lacks it; a
thread whose every message is deleted is a `Removed`.

Permissions: open channels are the tenant's; private channels are read by their members (from the
user lines), direct and group messages by `channel_members`; the channel's key is the `group`.
A post to a channel no channel line declares is not read (one dead letter per channel): its
privacy is unknown. A malformed line is one dead letter (the first 20 of a file named, the rest
summed); the rest of the file goes in. An author or a mentioned `@name` no user line has is kept
as written and counted (`counts["unknown_users"]`, `counts["unknown_mentions"]`).

The ExportTree reads a member whole, so one .jsonl may be up to MAX_JSONL_BYTES; a larger one is a
dead letter naming the cap.
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import PurePosixPath

from services.connectors.base import DeadLetter
from services.connectors.contract import ExportTree, Found, MemberRefused
from services.connectors.sources.chat import ChatError, Letters, Message, Thread, epoch_date, thread_found

NAME = "mattermost"
MAX_JSONL_BYTES = 512 * 1024 * 1024
MAX_LINE_BYTES = 4 * 1024 * 1024  # one post with its replies
MAX_MEMBERS = 100_000  # of one channel, from the user lines
MAX_DIRECT_MEMBERS = 8
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")  # team and channel names
_USER = re.compile(r"[A-Za-z0-9_.+-]{1,64}")  # usernames: no "/", ",", ":" or "@" (the ids use them)
_MENTION = re.compile(r"(?<![\w@.])@([A-Za-z0-9_.-]{1,64})")
EVERYONE = frozenset({"channel", "here", "all"})


@dataclass
class Channel:
    key: str
    label: str
    private: bool


@dataclass
class _Post:
    """A post and its replies as one line gave them, resolved against the users at the end."""

    channel: str
    root: str
    rank: tuple[int, int]  # (the root's edit_at, its line over all files): the larger wins a repeat
    where: str
    messages: list[Message] = field(default_factory=list)
    deleted: int = 0
    members: tuple[str, ...] = ()  # a direct channel's


def _text(value: object, where: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ChatError(f"{where}: {what} missing or not a string")
    return value.strip()


def _named(value: object, where: str, what: str, pattern: re.Pattern = _NAME) -> str:
    text = _text(value, where, what)
    if not pattern.fullmatch(text):
        raise ChatError(f"{where}: {what} {text[:40]!r} is not a Mattermost name")
    return text


def _ms(value: object, where: str, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ChatError(f"{where}: {what} {str(value)[:40]!r} is not a time in epoch milliseconds")
    return value


def _when(ms: int, where: str) -> datetime:
    return epoch_date(ms // 1000, where) + timedelta(milliseconds=ms % 1000)


def _files(raw: object) -> tuple[str, ...]:
    """Attached files by name (`attachments[].path`: the file's place in the export's data/)."""
    if not isinstance(raw, list):
        return ()
    names = []
    for item in raw[:100]:
        path = item.get("path") if isinstance(item, dict) else None
        if isinstance(path, str) and (name := PurePosixPath(path.replace("\\", "/")).name.strip()):
            names.append(name[:256])
    return tuple(names)


def _cards(props: object) -> str:
    """The text of message attachments (`props.attachments`: what integrations post)."""
    cards = props.get("attachments") if isinstance(props, dict) else None
    if not isinstance(cards, list):
        return ""
    lines = []
    for card in cards[:20]:
        if isinstance(card, dict):
            parts = [card.get(k) for k in ("pretext", "title", "text")]
            lines += [p.strip() for p in parts if isinstance(p, str) and p.strip()]
            if not any(isinstance(p, str) and p.strip() for p in parts) and isinstance(card.get("fallback"), str):
                lines.append(card["fallback"].strip())
    return "\n".join(line for line in lines if line)


def _message(raw: object, where: str, counts: Counter) -> tuple[str, Message | None, int, bool]:
    """(id, message, edit_at, deleted) of a post or reply; message None when it is deleted, a
    notice or empty; ChatError for what cannot be read."""
    if not isinstance(raw, dict):
        raise ChatError(f"{where}: expected an object, got {type(raw).__name__}")
    user = _named(raw.get("user"), where, "user", _USER)
    created = _ms(raw.get("create_at"), where, "create_at")
    mid = f"{created}@{user}"
    when = _when(created, f"{where} create_at")
    edit_at = raw.get("edit_at")
    edited = _ms(edit_at, where, "edit_at") if edit_at not in (None, 0) else 0
    if raw.get("delete_at") not in (None, 0):
        _ms(raw.get("delete_at"), where, "delete_at")
        counts["deleted"] += 1
        return mid, None, edited, True
    kind = raw.get("type")
    if isinstance(kind, str) and kind.startswith("system_"):
        counts["notices"] += 1
        return mid, None, edited, False
    text = raw.get("message", "")
    if not isinstance(text, str):
        raise ChatError(f"{where}: message must be a string, got {type(text).__name__}")
    cards = _cards(raw.get("props"))
    text = f"{text}\n{cards}".strip() if cards else text
    files = _files(raw.get("attachments"))
    if not text.strip() and not files:
        counts["empty"] += 1
        return mid, None, edited, False
    return mid, Message(id=mid, author=user, when=when, text=text, edited=str(edited) if edited else "",
                        files=files, author_id=user), edited, False


def _members(raw: object, where: str) -> tuple[str, ...]:
    # A direct message has 1 to 2 members, a group message up to 8: the sorted members are the
    # item's container, which a source id (at most 1024 characters) must hold.
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_DIRECT_MEMBERS:
        raise ChatError(f"{where}: channel_members must list the direct channel's 1 to {MAX_DIRECT_MEMBERS} usernames")
    return tuple(sorted({_named(m, where, "member", _USER) for m in raw}))


def _display(user: Mapping) -> str:
    full = " ".join(p.strip() for p in (user.get("first_name"), user.get("last_name"))
                    if isinstance(p, str) and p.strip())
    nickname = user.get("nickname") if isinstance(user.get("nickname"), str) else ""
    return full or nickname.strip() or user["username"]


class MattermostSource:
    name = NAME

    def __init__(self) -> None:
        self.counts: Counter = Counter()

    def read(self, tree: ExportTree, options: Mapping[str, object] | None = None) -> Iterator[Found]:
        self.counts = Counter()
        self.users: dict[str, str] = {}
        self.channels: dict[str, Channel] = {}
        self.order = 0  # lines read so far, over every file: a repeated post's later line wins
        self.members: dict[str, set[str]] = defaultdict(set)
        self.posts: dict[tuple[str, str], _Post] = {}
        files = [n for n in tree.names() if n.lower().endswith(".jsonl")]
        self.counts["other_files"] = len(tree.names()) - len(files)
        for name in files:
            yield from self._file(tree, name)
        yield from self._threads(tree)

    def _file(self, tree: ExportTree, name: str) -> Iterator[Found]:
        where = f"{tree.label}/{name}"
        try:
            data = tree.read(name, MAX_JSONL_BYTES)
        except MemberRefused as exc:
            yield DeadLetter(NAME, where, exc.reason)
            return
        letters = Letters(NAME, where)
        for number, line in enumerate(io.BytesIO(data), 1):
            if not line.strip():
                continue
            at = f"{where}:{number}"
            try:
                if len(line) > MAX_LINE_BYTES:
                    raise ChatError(f"{at}: a line of {len(line)} bytes, over {MAX_LINE_BYTES}")
                try:
                    obj = json.loads(line)
                except (UnicodeDecodeError, ValueError, RecursionError) as exc:
                    raise ChatError(f"{at}: not JSON: {str(exc)[:200]}") from None
                self.order += 1
                yield from self._line(obj, at, letters)
            except ChatError as exc:
                yield from letters.add(at, str(exc).removeprefix(f"{at}: "))
        yield from letters.rest()

    def _line(self, obj: object, at: str, letters: Letters) -> Iterator[Found]:
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            raise ChatError(f"{at}: expected an object with a 'type'")
        kind = obj["type"]
        if kind == "version":
            if obj.get("version") != 1:
                self.counts["unknown_version"] += 1
            return
        value = obj.get(kind)
        if kind not in ("team", "channel", "user", "post", "direct_channel", "direct_post"):
            self.counts["other_lines"] += 1
            return
        if not isinstance(value, dict):
            raise ChatError(f"{at}: '{kind}' must be an object")
        if kind == "team":
            _named(value.get("name"), at, "team name")  # checked only: channels name their team
        elif kind == "channel":
            key = f"{_named(value.get('team'), at, 'team')}:{_named(value.get('name'), at, 'channel name')}"
            label = value.get("display_name")
            private = value.get("type") != "O" or self.channels.get(key, Channel(key, "", False)).private
            self.channels[key] = Channel(key, label.strip() if isinstance(label, str) and label.strip()
                                         else key.split(":", 1)[1], private)
        elif kind == "user":
            self._user(value, at)
        elif kind == "direct_channel":
            self.counts["direct_channels"] += 1
        else:
            yield from self._post(kind, value, at, letters)

    def _user(self, value: dict, at: str) -> None:
        username = _named(value.get("username"), at, "username", _USER)
        self.users[username] = _display(value | {"username": username})
        teams = value.get("teams") if isinstance(value.get("teams"), list) else []
        for team in teams[:1000]:
            if not isinstance(team, dict) or not isinstance(team.get("name"), str):
                continue
            channels = team.get("channels") if isinstance(team.get("channels"), list) else []
            for channel in channels[:10_000]:
                if isinstance(channel, dict) and isinstance(channel.get("name"), str):
                    key = f"{team['name']}:{channel['name']}"
                    if len(self.members[key]) < MAX_MEMBERS:
                        self.members[key].add(username)

    def _post(self, kind: str, value: dict, at: str, letters: Letters) -> Iterator[Found]:
        members: tuple[str, ...] = ()
        if kind == "post":
            key = f"{_named(value.get('team'), at, 'team')}:{_named(value.get('channel'), at, 'channel')}"
        else:
            members = _members(value.get("channel_members"), at)
            key = "direct:" + ",".join(members)
        root, message, edited, deleted = _message(value, at, self.counts)
        post = _Post(key, root, (edited, self.order), at, members=members)
        # Each reply once: a reply listed twice keeps its later edit (else its later listing).
        replies: dict[str, tuple[tuple[int, int], Message | None, bool]] = {}
        raw_replies = value.get("replies")
        for index, raw in enumerate(raw_replies if isinstance(raw_replies, list) else []):
            try:
                mid, reply, reply_edited, gone = _message(raw, f"{at} replies[{index}]", self.counts)
            except ChatError as exc:
                yield from letters.add(f"{at} replies[{index}]", str(exc).removeprefix(f"{at} replies[{index}]: "))
                continue
            if mid == root or mid in replies:
                self.counts["repeated"] += 1
            if mid != root and (mid not in replies or replies[mid][0] <= (reply_edited, index)):
                replies[mid] = ((reply_edited, index), reply, gone)
        for _, reply, gone in [(None, message, deleted), *replies.values()]:
            if reply is not None:
                post.messages.append(reply)
            post.deleted += gone
        held = self.posts.get((key, root))
        if held is not None:
            self.counts["repeated"] += 1
            if held.rank > post.rank:
                return
        self.posts[(key, root)] = post

    def _channel(self, post: _Post) -> Channel | None:
        if post.members:
            label = "direct: " + ", ".join(self.users.get(m, m) for m in post.members)
            return Channel(post.channel, label, True)
        return self.channels.get(post.channel)

    def _threads(self, tree: ExportTree) -> Iterator[Found]:
        unknown: Counter = Counter()
        for (key, root) in sorted(self.posts):
            post = self.posts[(key, root)]
            if not post.messages and not post.deleted:
                continue  # notices or empty posts only: nothing to read, nothing deleted
            channel = self._channel(post)
            if channel is None:
                unknown[key] += 1
                continue
            readers = (post.members or tuple(sorted(self.members.get(key, ())))) if channel.private else ()
            messages = []
            for m in post.messages:
                if m.author_id not in self.users:
                    self.counts["unknown_users"] += 1
                named = [name.rstrip(".") for name in _MENTION.findall(m.text)]
                self.counts["unknown_mentions"] += sum(1 for n in named if n not in self.users and n not in EVERYONE)
                messages.append(replace(m, author=self.users.get(m.author_id, m.author_id),
                                        mentions=tuple(dict.fromkeys(self.users[n] for n in named if n in self.users))))
            thread = Thread(key, channel.label, root, messages, readers=readers, private=channel.private,
                            group=key, deleted=post.deleted)
            yield thread_found(NAME, thread, f"{post.where}#{root}")
        for key, count in sorted(unknown.items()):
            yield DeadLetter(NAME, f"{tree.label}#{key}", f"{count} posts to a channel no channel line declares: "
                             "its members and privacy are unknown; not read")

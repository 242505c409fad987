"""Microsoft Teams exports: the JSON Microsoft Graph gives for teams, channels, chats and their
messages, saved in one folder (or a .zip of it, optionally inside one top-level folder):

    users.json                                   optional: {"value": [user]} (id, displayName)
    teams/<team>/team.json                       optional: the team (id, displayName, visibility)
    teams/<team>/members.json                    the team's members: {"value": [conversationMember]}
    teams/<team>/channels/<channel>/channel.json the channel (id, displayName, membershipType)
    teams/<team>/channels/<channel>/members.json the channel's members (private and shared channels)
    teams/<team>/channels/<channel>/messages.json {"value": [chatMessage]}; more pages as
                                                 messages-2.json, messages-3.json, ...
    chats/<chat>/chat.json                       optional: the chat (id, topic, chatType)
    chats/<chat>/members.json                    the chat's members
    chats/<chat>/messages.json                   as a channel's

A page is what `GET .../messages` returns (`{"value": [...]}`, or a bare list). Replies are either
listed with `replyToId` (what `GET .../messages/{id}/replies` gives) or nested in their message's
`replies` (`$expand=replies`). Each chatMessage is read by its Graph fields: `id`, `replyToId`,
`messageType` (only "message" is text; system events are counted), `createdDateTime`,
`lastModifiedDateTime`, `lastEditedDateTime` (the edit mark), `deletedDateTime`, `from.user`
(`id`, `displayName`) or `from.application`, `subject`, `body` (`contentType` "html" through
BeautifulSoup: `<at>` mentions read as "@name", `<emoji>` as its alt text; or "text"),
`mentions[].mentioned.user`, and `attachments[]` (files named in the text by `name`; quoted
messages and unnamed cards left out).

Documents: in a channel, a message and its replies are one (`services.connectors.sources.chat`),
the item `teams:<team>:<channel>/<message id>`; a chat, which has no reply threads, is one
document a UTC day, `chats:<chat>/<YYYY-MM-DD>`. Folder names make the item ids (a ":" or "%" in
one is written %3A / %25), so keep them stable between exports (Graph ids are). Parts are message
ids; a deleted message (`deletedDateTime`) is neither text nor part, so its thread's next version
lacks it; a thread whose every message is deleted is a `Removed`. A message in two pages is read
once, the one modified last. Exports may cover a date range (`dated_exports`): a thread missing
from one is judged deleted only inside the dates the export holds for its channel or chat.

Permissions: a private or shared channel is read by its members, a chat by its members; a standard
channel by the team's members, or the whole tenant when team.json says `"visibility": "public"`.
Readers are the members' `userId` (Graph user ids, which the access map names); the channel's,
team's or chat's id is the `group`. A channel folder with neither channel.json nor members.json
is not read (a dead letter): its privacy is unknown. A private conversation whose members file is
missing is read by nobody but an unrestricted reader (counted, `counts["no_members"]`).
"""

from __future__ import annotations

import re
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from bs4 import BeautifulSoup, MarkupResemblesLocatorWarning
from bs4.element import CData, NavigableString, PreformattedString, Tag

from services.connectors.base import DeadLetter
from services.connectors.contract import ExportTree, Found
from services.connectors.sources.chat import ChatError, Letters, Message, Thread, iso_date, read_json, thread_found

NAME = "teams"
_PAGE = re.compile(r"messages(?:[-_.]?\d{1,6})?\.json")
_BLOCKS = frozenset({"p", "div", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "pre", "ul", "ol",
                     "table"})
_HIDDEN = frozenset({"script", "style", "head", "title", "attachment", "systemeventmessage"})
_NEWLINE = object()  # a block's end, on the walk's stack
NOT_FILES = frozenset({"messageReference", "forwardedMessageReference"})
MAX_MEMBERS = 100_000


@dataclass
class Conversation:
    """A channel or a chat: its files and, once read, who may read it."""

    container: str
    label: str
    files: dict[str, str] = field(default_factory=dict)  # leaf -> member name
    by_day: bool = False
    team: str = ""  # a channel's team folder
    folder: str = ""  # where it is in the export, for dead letters
    private: bool = True
    readers: tuple[str, ...] = ()
    group: str = ""


def _esc(part: str) -> str:
    return part.replace("%", "%25").replace(":", "%3A")


def _values(value: object, what: str) -> list:
    if isinstance(value, dict) and isinstance(value.get("value"), list):
        return value["value"]
    if isinstance(value, list):
        return value
    raise ChatError(f"expected {what}: an object with a 'value' list, or a list")


def _str(value: object) -> str:
    return value.strip() if isinstance(value, str) else ""


def html_text(content: str, mentions: Mapping[str, str]) -> str:
    """The visible text of a Teams HTML body, a line per block, mentions as "@name".

    The tree is walked once with a stack, never edited: BeautifulSoup's edits (insert_after,
    replace_with) walk a tag's descendants, so a body of 100,000 nested tags took minutes."""
    with warnings.catch_warnings():
        # A body that is one URL makes BeautifulSoup warn that it looks like a path: it is text.
        warnings.simplefilter("ignore", MarkupResemblesLocatorWarning)
        soup = BeautifulSoup(content, "html.parser")
    out: list[str] = []
    stack: list[object] = [soup]
    while stack:
        node = stack.pop()
        if node is _NEWLINE:
            if out and not out[-1].endswith("\n"):  # nested blocks end on one line break, not many
                out.append("\n")
        elif isinstance(node, NavigableString):
            if not isinstance(node, PreformattedString) or isinstance(node, CData):  # comments are not text
                out.append(str(node))
        elif isinstance(node, Tag) and node.name not in _HIDDEN:
            if node.name == "at":
                name = node.get_text(" ", strip=True) or mentions.get(str(node.get("id")), "")
                out.append(f"@{name.lstrip('@')}" if name else "")
            elif node.name == "emoji":
                out.append(str(node.get("alt") or ""))
            elif node.name == "img":
                alt = str(node.get("alt") or "").strip()
                out.append(f"[image: {alt}]" if alt else "[image]")
            elif node.name == "br":
                out.append("\n")
            else:
                if node.name in _BLOCKS:
                    stack.append(_NEWLINE)
                stack.extend(reversed(node.contents))
    lines = (" ".join(line.split()) for line in "".join(out).splitlines())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


class TeamsSource:
    name = NAME
    # Graph exports are often of a date range (a `$filter` on the times, a delta since the last
    # run): a thread absent from one is judged gone only inside the dates it holds for its channel.
    dated_exports = True

    def __init__(self) -> None:
        self.counts: Counter = Counter()

    def read(self, tree: ExportTree, options: Mapping[str, object] | None = None) -> Iterator[Found]:
        self.counts = Counter()
        self.names: dict[str, str] = {}  # Graph user id -> display name
        names = tree.names()
        base = _base(names)
        teams: dict[str, dict[str, str]] = defaultdict(dict)
        conversations: dict[str, Conversation] = {}
        for name in names:
            parts = name[len(base):].split("/") if name.startswith(base) else []
            folder = name.rsplit("/", 1)[0]
            if parts == ["users.json"]:
                yield from self._users(tree, name)
            elif len(parts) == 3 and parts[0] == "teams" and parts[2] in ("team.json", "members.json"):
                teams[parts[1]][parts[2]] = name
            elif len(parts) == 5 and parts[0] == "teams" and parts[2] == "channels" and _known(parts[4]):
                key = f"teams:{_esc(parts[1])}:{_esc(parts[3])}"
                found = conversations.setdefault(key, Conversation(key, parts[3], team=parts[1], folder=folder))
                found.files[parts[4]] = name
            elif len(parts) == 3 and parts[0] == "chats" and _known(parts[2]):
                key = f"chats:{_esc(parts[1])}"
                found = conversations.setdefault(key, Conversation(key, parts[1], by_day=True, folder=folder))
                found.files[parts[2]] = name
            else:
                self.counts["other_files"] += 1
        team_info: dict[str, tuple[bool, tuple[str, ...], str]] = {}
        for team in sorted(teams):
            team_info[team] = yield from self._team(tree, team, teams[team])
        # Every members file before any message: a name a message lacks is then found the same
        # way whatever order the conversations come in (the text, and so the version, is stable).
        readable = []
        for key in sorted(conversations):
            if (yield from self._access(tree, conversations[key], team_info)):
                readable.append(conversations[key])
        for conversation in readable:
            yield from self._messages(tree, conversation)

    # --- who may read -------------------------------------------------------------------------
    def _users(self, tree: ExportTree, name: str) -> Iterator[Found]:
        try:
            for user in _values(read_json(tree, name), "users"):
                if isinstance(user, dict) and _str(user.get("id")) and _str(user.get("displayName")):
                    self.names[_str(user["id"])] = _str(user["displayName"])
        except ChatError as exc:
            yield DeadLetter(NAME, f"{tree.label}/{name}", str(exc))

    def _members(self, tree: ExportTree, name: str | None) -> Iterator[Found]:
        """The members' user ids (their names noted); None when there is no members file."""
        if name is None:
            return None
        try:
            members = _values(read_json(tree, name), "members")
        except ChatError as exc:
            yield DeadLetter(NAME, f"{tree.label}/{name}", str(exc))
            return ()
        ids = []
        for member in members[:MAX_MEMBERS]:
            if isinstance(member, dict) and (uid := _str(member.get("userId")) or _str(member.get("id"))):
                ids.append(uid)
                if _str(member.get("displayName")):
                    self.names.setdefault(uid, _str(member["displayName"]))
        return tuple(sorted(set(ids)))

    def _meta(self, tree: ExportTree, name: str | None) -> Iterator[Found]:
        if name is None:
            return {}
        try:
            value = read_json(tree, name)
            if not isinstance(value, dict):
                raise ChatError(f"expected an object, got {type(value).__name__}")
            return value
        except ChatError as exc:
            yield DeadLetter(NAME, f"{tree.label}/{name}", str(exc))
            return None

    def _team(self, tree: ExportTree, team: str, files: dict[str, str]) -> Iterator[Found]:
        """(public, members, group id) of a team."""
        meta = yield from self._meta(tree, files.get("team.json"))
        members = yield from self._members(tree, files.get("members.json"))
        meta = meta or {}
        public = _str(meta.get("visibility")).lower() == "public"
        return public, members or (), _str(meta.get("id")) or f"teams:{_esc(team)}"

    def _access(self, tree: ExportTree, conversation: Conversation,
                teams: Mapping[str, tuple[bool, tuple[str, ...], str]]) -> Iterator[Found]:
        """Fill the conversation's readers; False when its privacy is unknown (not read)."""
        files = conversation.files
        meta_name = files.get("chat.json" if conversation.by_day else "channel.json")
        meta = yield from self._meta(tree, meta_name)
        members = yield from self._members(tree, files.get("members.json"))
        where = f"{tree.label}/{conversation.folder}"
        if meta is None or (not conversation.by_day and not meta_name and members is None):
            yield DeadLetter(NAME, where, "a channel with no readable channel.json or members.json: its "
                             "membership and privacy are unknown; not read")
            return False
        conversation.label = _str(meta.get("displayName")) or _str(meta.get("topic")) or conversation.label
        conversation.group = _str(meta.get("id")) or conversation.container
        kind = _str(meta.get("membershipType")).lower() if meta_name else ""
        if not conversation.by_day and kind == "standard":
            public, team_members, team_group = teams.get(conversation.team, (False, (), ""))
            conversation.private = not public
            conversation.readers = () if public else team_members
            conversation.group = team_group
            if conversation.private and not team_members:
                self.counts["no_members"] += 1
            return True
        if members is None:
            self.counts["no_members"] += 1
        conversation.readers = members or ()
        if conversation.by_day and not meta.get("topic") and conversation.readers:
            conversation.label = ", ".join(self.names.get(m, m) for m in conversation.readers[:8])
        return True

    # --- what was said ------------------------------------------------------------------------
    def _messages(self, tree: ExportTree, conversation: Conversation) -> Iterator[Found]:
        held: dict[str, tuple[tuple[str, int], str, Message | None, bool]] = {}
        order = 0
        pages = sorted((n for leaf, n in conversation.files.items() if _PAGE.fullmatch(leaf)), key=_page_key)
        for name in pages:
            where = f"{tree.label}/{name}"
            try:
                values = _values(read_json(tree, name), "a page of messages")
            except ChatError as exc:
                yield DeadLetter(NAME, where, str(exc))
                continue
            letters = Letters(NAME, where)
            for index, raw in _flatten(values):
                order += 1
                at = f"{where}[{index}]"
                try:
                    mid, root, message, deleted, modified = self._message(raw, at, conversation.by_day)
                except ChatError as exc:
                    yield from letters.add(at, str(exc))
                    continue
                if mid in held:
                    self.counts["repeated"] += 1
                    if held[mid][0] > (modified, order):
                        continue
                held[mid] = ((modified, order), root, message, deleted)
            yield from letters.rest()
        threads: dict[str, Thread] = {}
        for _, root, message, deleted in held.values():
            thread = threads.setdefault(root, Thread(
                conversation.container, conversation.label, root, readers=conversation.readers,
                private=conversation.private, group=conversation.group))
            if message is not None:
                thread.messages.append(message)
            thread.deleted += deleted
        for root in sorted(threads):
            if not threads[root].messages and not threads[root].deleted:
                continue  # system events or empty messages only: nothing to read, nothing deleted
            yield thread_found(NAME, threads[root], f"{tree.label}/{conversation.folder}#{root}")

    def _message(self, raw: object, at: str, by_day: bool) -> tuple[str, str, Message | None, bool, str]:
        """(id, thread root, message, deleted, modified) of one chatMessage; the message None for
        what is not text (deleted, a system event, empty)."""
        if not isinstance(raw, dict):
            raise ChatError(f"expected a chatMessage object, got {type(raw).__name__}")
        mid = _str(raw.get("id"))
        if not mid or len(mid) > 256 or "/" in mid:
            raise ChatError(f"id {str(raw.get('id'))[:40]!r} is not a message id")
        when = iso_date(raw.get("createdDateTime"), "createdDateTime")
        parent = _str(raw.get("replyToId"))
        root = when.strftime("%Y-%m-%d") if by_day else (parent if parent and "/" not in parent else mid)
        modified = _str(raw.get("lastModifiedDateTime"))[:40]
        if raw.get("deletedDateTime"):
            self.counts["deleted"] += 1
            return mid, root, None, True, modified
        if _str(raw.get("messageType")) not in ("", "message"):
            self.counts["notices"] += 1
            return mid, root, None, False, modified
        mentions, known = self._mentions(raw.get("mentions"))
        body = raw.get("body") if isinstance(raw.get("body"), dict) else {}
        content = body.get("content") or ""
        if not isinstance(content, str):
            raise ChatError(f"body.content must be a string, got {type(content).__name__}")
        text = html_text(content, mentions) if _str(body.get("contentType")).lower() == "html" else content.strip()
        subject = _str(raw.get("subject"))
        text = f"{subject}\n{text}".strip() if subject else text
        files = _files(raw.get("attachments"))
        if not text and not files:
            self.counts["empty"] += 1
            return mid, root, None, False, modified
        author, author_id = self._author(raw.get("from"))
        return mid, root, Message(id=mid, author=author, when=when, text=text,
                                  edited=_str(raw.get("lastEditedDateTime"))[:40], files=files,
                                  author_id=author_id, mentions=known), False, modified

    def _author(self, raw: object) -> tuple[str, str]:
        sender = raw if isinstance(raw, dict) else {}
        user = sender.get("user") if isinstance(sender.get("user"), dict) else {}
        uid = _str(user.get("id"))
        name = _str(user.get("displayName")) or self.names.get(uid, "")
        if uid and not name:
            self.counts["unknown_users"] += 1
        app = sender.get("application") if isinstance(sender.get("application"), dict) else {}
        return (name or uid or _str(app.get("displayName")) or "unknown")[:512], uid

    def _mentions(self, raw: object) -> tuple[dict[str, str], tuple[str, ...]]:
        """Mention id (the `<at id>` of the body) -> the name shown; and the names of the known
        users among them (a mention with only its own text names no one the export knows)."""
        found: dict[str, str] = {}
        known: dict[str, None] = {}
        for mention in raw[:100] if isinstance(raw, list) else []:
            if not isinstance(mention, dict):
                continue
            mentioned = mention.get("mentioned") if isinstance(mention.get("mentioned"), dict) else {}
            user = mentioned.get("user") if isinstance(mentioned.get("user"), dict) else {}
            uid = _str(user.get("id"))
            name = _str(user.get("displayName")) or self.names.get(uid, "") or _str(mention.get("mentionText"))
            if uid and not (_str(user.get("displayName")) or uid in self.names):
                self.counts["unknown_mentions"] += 1
            elif uid:
                known[name] = None
            found[str(mention.get("id"))] = name or uid
        return found, tuple(known)


def _files(raw: object) -> tuple[str, ...]:
    names = []
    for item in raw[:100] if isinstance(raw, list) else []:
        if isinstance(item, dict) and _str(item.get("contentType")) not in NOT_FILES and _str(item.get("name")):
            names.append(_str(item["name"])[:256])
    return tuple(names)


def _flatten(values: list) -> Iterator[tuple[str, object]]:
    """Each message of a page with its place, replies nested by `$expand=replies` after their
    message (their `replyToId` set to it when they lack one)."""
    for index, raw in enumerate(values):
        yield str(index), raw
        replies = raw.get("replies") if isinstance(raw, dict) else None
        if isinstance(replies, list) and isinstance(raw.get("id"), str):
            for sub, reply in enumerate(replies):
                if isinstance(reply, dict) and not reply.get("replyToId"):
                    reply = reply | {"replyToId": raw["id"]}
                yield f"{index}].replies[{sub}", reply


def _known(leaf: str) -> bool:
    return leaf in ("channel.json", "chat.json", "members.json") or bool(_PAGE.fullmatch(leaf))


def _page_key(name: str) -> tuple[int, str]:
    digits = re.findall(r"\d+", name.rsplit("/", 1)[-1])
    return (int(digits[-1]) if digits else 0), name


def _base(names: list[str]) -> str:
    """'' when teams/ and chats/ are at the root; else the one top-level folder that holds them."""
    tops = sorted({n.split("/", 2)[0] + "/" for n in names if n.count("/") >= 2 and n.split("/")[1] in ("teams", "chats")})
    if any(n.split("/", 1)[0] in ("teams", "chats") for n in names if "/" in n) or not tops:
        return ""
    return tops[0]

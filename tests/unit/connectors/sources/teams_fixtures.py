"""Microsoft Teams exports generated in the layout the Teams source reads (Graph's JSON shapes:
chatMessage, channel, team, chat, conversationMember), for the source tests; nothing is copied
from a real export."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

DANA, LEE, SAM = "u-dana-0001", "u-lee-0002", "u-sam-0003"
NAMES = {DANA: "Dana Lee", LEE: "Lee Park", SAM: "Sam Roe"}


def when(day: str, second: int = 0) -> str:
    """Graph's time on `day` at 10:00 UTC plus `second` seconds, with its 7 fractional digits."""
    start = datetime.fromisoformat(day).replace(hour=10, tzinfo=UTC) + timedelta(seconds=second)
    return start.strftime("%Y-%m-%dT%H:%M:%S.0000000Z")


def member(uid: str, name: str | None = None) -> dict:
    return {"@odata.type": "#microsoft.graph.aadUserConversationMember", "id": f"m-{uid}", "roles": [],
            "displayName": NAMES.get(uid) if name is None else name, "userId": uid,
            "email": f"{uid}@example.test"}


def members(*uids: str) -> dict:
    return {"value": [member(u) for u in uids]}


def msg(mid: str, uid: str | None, html: str, day: str, second: int = 0, *, reply_to: str | None = None,
        edited: int | None = None, deleted: bool = False, mentions: list[tuple[int, str, str]] = (),
        attachments: list[dict] | None = None, kind: str = "message", content_type: str = "html",
        name: str | None = None) -> dict:
    """One chatMessage. `mentions`: (at id, user id, display name) triples; `edited`: seconds
    after creation when it was edited."""
    created = when(day, second)
    out = {"id": mid, "replyToId": reply_to, "etag": mid, "messageType": kind, "createdDateTime": created,
           "lastModifiedDateTime": when(day, second + (edited or 0)),
           "lastEditedDateTime": when(day, second + edited) if edited else None,
           "deletedDateTime": when(day, second + 900) if deleted else None, "subject": None,
           "importance": "normal", "locale": "en-us",
           "from": None if uid is None else {"application": None, "device": None, "user": {
               "@odata.type": "#microsoft.graph.teamworkUserIdentity", "id": uid,
               "displayName": NAMES.get(uid, "") if name is None else name, "userIdentityType": "aadUser"}},
           "body": {"contentType": content_type, "content": "" if deleted else html},
           "attachments": attachments or [],
           "mentions": [{"id": i, "mentionText": n, "mentioned": {"user": {"id": u, "displayName": n}}}
                        for i, u, n in mentions],
           "reactions": []}
    return out


def file_attachment(name: str) -> dict:
    return {"id": f"att-{name}", "contentType": "reference", "name": name,
            "contentUrl": f"https://example.test/sites/acme/Shared Documents/{name}", "content": None}


def teams_export(channels: dict[tuple[str, str], dict], chats: dict[str, dict] | None = None, *,
                 visibility: str | None = "public", team_members: tuple[str, ...] | None = (DANA, LEE, SAM),
                 prefix: str = "") -> dict[str, bytes]:
    """The export's files. `channels`: {(team, channel): {"membershipType": t or None (no
    channel.json), "members": ids or None, "pages": [messages or bytes]}}; `chats`: {chat:
    {"members": ids or None, "topic": str or None, "pages": [...]}}. A page given as bytes is
    written as is (a malformed file)."""
    files: dict[str, bytes] = {}

    def put(name: str, value: object) -> None:
        files[prefix + name] = value if isinstance(value, bytes) else json.dumps(value, indent=1).encode()

    for team in sorted({t for t, _ in channels}):
        if visibility is not None:
            put(f"teams/{team}/team.json", {"id": f"team-{team}", "displayName": team.title(), "visibility": visibility})
        if team_members is not None:
            put(f"teams/{team}/members.json", members(*team_members))
    for (team, channel), spec in channels.items():
        folder = f"teams/{team}/channels/{channel}/"
        if spec.get("membershipType") is not None:
            put(folder + "channel.json", {"id": f"19:{channel}@thread.tacv2", "displayName": channel.title(),
                                          "membershipType": spec["membershipType"]})
        if spec.get("members") is not None:
            put(folder + "members.json", members(*spec["members"]))
        for number, page in enumerate(spec.get("pages", []), 1):
            put(folder + ("messages.json" if number == 1 else f"messages-{number}.json"),
                page if isinstance(page, bytes) else {"@odata.context": "x", "value": page})
    for chat, spec in (chats or {}).items():
        folder = f"chats/{chat}/"
        put(folder + "chat.json", {"id": f"19:{chat}@unq.gbl.spaces", "topic": spec.get("topic"),
                                   "chatType": "group" if spec.get("topic") else "oneOnOne"})
        if spec.get("members") is not None:
            put(folder + "members.json", members(*spec["members"]))
        for number, page in enumerate(spec.get("pages", []), 1):
            put(folder + ("messages.json" if number == 1 else f"messages-{number}.json"),
                page if isinstance(page, bytes) else {"value": page})
    return files

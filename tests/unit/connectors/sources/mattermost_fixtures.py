"""Mattermost bulk exports generated in the documented JSONL layout, for the source tests (nothing
is copied from a real export): one object a line, each `{"type": t, t: {...}}`."""

from __future__ import annotations

import json
from datetime import UTC, datetime

TEAM = {"name": "acme", "display_name": "Acme", "type": "O"}
CHANNELS = [{"team": "acme", "name": "town-square", "display_name": "Town Square", "type": "O"},
            {"team": "acme", "name": "secret-plans", "display_name": "Secret Plans", "type": "P"}]


def user(username: str, first: str = "", last: str = "", nickname: str = "",
         channels: tuple[str, ...] = ("town-square",)) -> dict:
    return {"username": username, "email": f"{username}@example.test", "first_name": first, "last_name": last,
            "nickname": nickname, "teams": [{"name": "acme", "roles": "team_user",
                                             "channels": [{"name": c, "roles": "channel_user"} for c in channels]}]}


USERS = [user("dana", "Dana", "Lee", channels=("town-square", "secret-plans")),
         user("lee", nickname="Lee P", channels=("town-square", "secret-plans")),
         user("sam")]


def ms(day: str, second: int = 0) -> int:
    """Epoch milliseconds on `day` (YYYY-MM-DD) at 10:00 UTC plus `second` seconds."""
    start = datetime.fromisoformat(day).replace(hour=10, tzinfo=UTC)
    return int(start.timestamp() * 1000) + second * 1000


def reply(who: str, text: str, at: int, *, edit_at: int | None = None, delete_at: int | None = None,
          files: list[str] | None = None, **fields) -> dict:
    """A reply (and the fields a post shares with it); `fields` are written as given (`type`)."""
    out: dict = {"user": who, "message": text, "create_at": at, **fields}
    if edit_at:
        out["edit_at"] = edit_at
    if delete_at:
        out["delete_at"] = delete_at
    if files:
        out["attachments"] = [{"path": f"data/{name}"} for name in files]
    return out


def post(channel: str, who: str, text: str, at: int, *, replies: list[dict] | None = None, team: str = "acme",
         **extra) -> dict:
    out = reply(who, text, at, **extra) | {"team": team, "channel": channel}
    if replies is not None:
        out["replies"] = replies
    return {"type": "post", "post": out}


def direct(members: list[str], who: str, text: str, at: int, **extra) -> dict:
    return {"type": "direct_post", "direct_post": reply(who, text, at, **extra) | {"channel_members": members}}


def mattermost_export(posts: list[dict | bytes], *, users=USERS, channels=CHANNELS,
                      name: str = "import.jsonl", prefix: str = "") -> dict[str, bytes]:
    """The export's files: the JSONL (version, team, channels, users, then `posts`; a bytes entry
    is written as the line it is, a malformed line) and one attached file under data/."""
    lines: list[dict | bytes] = [{"type": "version", "version": 1}, {"type": "team", "team": TEAM},
                                 *({"type": "channel", "channel": c} for c in channels),
                                 *({"type": "user", "user": u} for u in users), *posts]
    body = b"\n".join(line if isinstance(line, bytes) else json.dumps(line).encode() for line in lines) + b"\n"
    return {prefix + name: body, prefix + "data/q3-plan.pdf": b"%PDF-1.4 not read"}

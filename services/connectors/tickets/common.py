"""What every ticket format shares: the ticket model, date and body readers, and the documents a
ticket becomes."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime

from schemas.documents import MAX_TAGS, DocumentIn
from services.connectors.dates import parse_rfc2822, to_utc
from services.core.people import named_address
from services.core.scope import user_entries
from services.errors import TicketError

CONNECTOR = "tickets"
UNKNOWN = "unknown"


@dataclass
class Comment:
    body: str
    author: str = UNKNOWN
    date: datetime | None = None
    cid: str | None = None
    who: str | None = None  # address or login, for participants


@dataclass
class Ticket:
    source: str
    key: str
    summary: str
    description: str = ""
    author: str = UNKNOWN
    who: str | None = None
    date: datetime | None = None
    status: str | None = None
    priority: str | None = None
    assignee: str | None = None
    project: str | None = None
    labels: list[str] = field(default_factory=list)
    comments: list[Comment] = field(default_factory=list)
    assignee_who: str | None = None


def parse_when(value: object, where: str, fmt: str | None = None) -> datetime | None:
    """ISO 8601 (Jira's `+0000` included), RFC 2822, or `fmt` (strptime) -> UTC; naive means UTC.
    A date outside the API's window (years 1000 to 9000) or one that overflows in UTC is refused."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    text = str(value).strip()
    readers = [lambda t: datetime.strptime(t, fmt)] if fmt else []
    readers += [datetime.fromisoformat, lambda t: parse_rfc2822(t, where, TicketError)]
    when = None
    for read in readers:
        try:
            when = read(text)
        except TicketError:
            raise
        except (TypeError, ValueError, IndexError):
            continue
        if when is not None:
            break
    if when is None:
        expected = f"{fmt!r}, ISO 8601 or RFC 2822" if fmt else "ISO 8601 or RFC 2822"
        raise TicketError(f"{where}: {text[:60]!r} is not a date ({expected})")
    return to_utc(when, where, TicketError)


_ADF_BLOCKS = {"paragraph", "heading", "blockquote", "codeBlock", "rule", "panel", "tableRow", "table",
               "mediaSingle", "expand", "nestedExpand", "decisionItem", "taskItem", "bulletList", "orderedList"}


def adf_to_text(node: object) -> str:
    """Flatten Atlassian Document Format to plain text: blocks on their own lines, list items as
    `- `, table cells joined by ` | `. Media carries no text and is dropped."""
    def walk(item: object) -> str:
        if isinstance(item, list):
            return "".join(walk(child) for child in item)
        if not isinstance(item, dict):
            return str(item) if isinstance(item, str) else ""
        kind, attrs = item.get("type"), item.get("attrs") or {}
        if kind == "text":
            return str(item.get("text", ""))
        if kind == "hardBreak":
            return "\n"
        if kind in ("mention", "emoji", "status", "date"):
            return str(attrs.get("text") or attrs.get("shortName") or attrs.get("timestamp") or "")
        if kind in ("inlineCard", "blockCard", "embedCard"):
            return str(attrs.get("url", ""))
        inner = item.get("content", [])
        if kind == "listItem":
            return "- " + walk(inner).strip() + "\n"
        if kind == "tableRow":
            return " | ".join(walk(cell).strip() for cell in inner) + "\n"
        text = walk(inner)
        return text.rstrip("\n") + "\n\n" if kind in _ADF_BLOCKS else text
    return re.sub(r"\n{3,}", "\n\n", walk(node)).strip()


def body_text(value: object) -> str:
    """Wiki text as is; ADF (a dict with a `type`) flattened; a JSON string holding ADF too."""
    if isinstance(value, str) and value.lstrip().startswith('{"type"'):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if isinstance(value, dict):
        return adf_to_text(value)
    return "" if value is None else str(value).strip()


def person(value: object) -> tuple[str | None, str | None]:
    """(display name, address or login) of a Jira/GitHub user object or a plain name."""
    if isinstance(value, dict):
        name = value.get("displayName") or value.get("name") or value.get("login")
        who = value.get("emailAddress") or value.get("login") or name
        return (str(name) if name else None), (str(who) if who else None)
    return (str(value).strip() or None, str(value).strip() or None) if value else (None, None)


def named(value: object) -> str | None:
    """A Jira `{"name": ...}` object (status, priority) or a plain string."""
    if isinstance(value, dict):
        value = value.get("name") or value.get("value")
    return str(value).strip() or None if value else None


def strings(value: object) -> list[str]:
    """Labels as a list, whether exported as a list or as one string."""
    items = value if isinstance(value, list) else [value] if value else []
    return [str(x.get("name") if isinstance(x, dict) else x).strip() for x in items if x]


def ticket_documents(ticket: Ticket, *, acl_from_participants: bool = False) -> list[DocumentIn]:
    """The description document, then one per non-empty comment (an empty comment says nothing and
    the write path would drop it anyway)."""
    facets = [("ticket", ticket.key), ("project", ticket.project), ("status", ticket.status),
              ("priority", ticket.priority), ("assignee", ticket.assignee), *(("label", x) for x in ticket.labels)]
    tags = [f"{name}:{value}" for name, value in facets if value]
    named = [(ticket.author, ticket.who), (ticket.assignee, ticket.assignee_who),
             *((c.author, c.who) for c in ticket.comments)]
    people = [who or name for name, who in named]
    # The schema caps list fields; a ticket past the cap keeps its first entries rather than failing.
    tags = tags[:MAX_TAGS]
    plain = list(dict.fromkeys(p for p in people if p and p != UNKNOWN))
    # Jira gives a user's display name and address together: "Name <address>" among the
    # participants tells the people directory they are one person (the rows are authored, and the
    # assignee tagged, by the name; the access list and the other participants are the addresses).
    pairs = [pair for name, who in named if name != UNKNOWN and who and "@" in who
             and (pair := named_address(name, who))]
    participants = list(dict.fromkeys(plain + pairs))[:MAX_TAGS]
    title = f"{ticket.key}: {ticket.summary}".strip()
    facts = [("Status", ticket.status), ("Priority", ticket.priority), ("Assignee", ticket.assignee),
             ("Labels", ", ".join(ticket.labels))]
    status_line = " · ".join(f"{name}: {value}" for name, value in facts if value)
    common = dict(kind="ticket", thread=ticket.key, title=title, tags=tags, participants=participants,
                  source=ticket.source, acl=user_entries(plain[:MAX_TAGS]) if acl_from_participants else [])
    text = "\n\n".join(part for part in (title, ticket.description, status_line) if part)
    docs = [DocumentIn(text=text, author=ticket.author, date=ticket.date, source_id=ticket.key, **common)]
    for n, comment in enumerate(ticket.comments, start=1):
        if comment.body.strip():
            docs.append(DocumentIn(text=comment.body, author=comment.author, date=comment.date,
                                   source_id=f"{ticket.key}#comment-{comment.cid or n}", **common))
    return docs

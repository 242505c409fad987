"""Ticket connector: Jira JSON, GitHub issues JSON and CSV become dated, attributed documents.

A ticket is a conversation of versions: its description and each comment are separate documents
with their own author and date, all in one thread (the ticket key). Status, priority, assignee and
labels are the export's snapshot and become tags on every document of the ticket.

Accepted JSON shapes (files .json or .jsonl, one issue per line):
- Jira REST: `{"issues": [...]}` (search result), one issue `{"key", "fields": {...}}`, or a list of
  issues. `fields.description` and comment bodies may be wiki text or ADF (API v3) JSON.
- Jira flattened (the public Apache sample): `{"issue_id", "title", "reporter", "status", ...,
  "comments": ["plain text", ...]}`.
- GitHub REST issues: one issue, a list, or `{"issues": [...], "comments": [...]}`; comments are
  either embedded per issue (`comments_data`, or a list under `comments`) or in that top-level
  `comments` list, matched to their issue by `issue_url`. The repo comes from `repository_url` /
  `html_url`, else the `repo` argument, else the file stem.
"""

from __future__ import annotations

import csv
import email.utils
import io
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from schemas.documents import MAX_TAGS, DocumentIn
from services.connectors.base import ConnectorReport, ConnectorState, DeadLetter, Sink
from services.connectors.files import Paths, run_files
from services.errors import OrgmemError

log = logging.getLogger(__name__)

CONNECTOR = "tickets"
BATCH = 500
UNKNOWN = "unknown"
TicketFormat = Literal["auto", "jira", "github"]


class TicketError(OrgmemError, ValueError):
    """One item cannot be read; the message names the field and the problem."""


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
    """ISO 8601 (Jira's `+0000` included), RFC 2822, or `fmt` (strptime) -> UTC; naive means UTC."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    text = str(value).strip()
    readers = [lambda t: datetime.strptime(t, fmt)] if fmt else []
    readers += [datetime.fromisoformat, email.utils.parsedate_to_datetime]
    when = None
    for read in readers:
        try:
            when = read(text)
        except (TypeError, ValueError):
            continue
        if when is not None:
            break
    if when is None:
        expected = f"{fmt!r}, ISO 8601 or RFC 2822" if fmt else "ISO 8601 or RFC 2822"
        raise TicketError(f"{where}: {text[:60]!r} is not a date ({expected})")
    return when.replace(tzinfo=timezone.utc) if when.tzinfo is None else when.astimezone(timezone.utc)


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


def _body(value: object) -> str:
    """Wiki text as is; ADF (a dict with a `type`) flattened; a JSON string holding ADF too."""
    if isinstance(value, str) and value.lstrip().startswith('{"type"'):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    if isinstance(value, dict):
        return adf_to_text(value)
    return "" if value is None else str(value).strip()


def _person(value: object) -> tuple[str | None, str | None]:
    """(display name, address or login) of a Jira/GitHub user object or a plain name."""
    if isinstance(value, dict):
        name = value.get("displayName") or value.get("name") or value.get("login")
        who = value.get("emailAddress") or value.get("login") or name
        return (str(name) if name else None), (str(who) if who else None)
    return (str(value).strip() or None, str(value).strip() or None) if value else (None, None)


def _named(value: object) -> str | None:
    """A Jira `{"name": ...}` object (status, priority) or a plain string."""
    if isinstance(value, dict):
        value = value.get("name") or value.get("value")
    return str(value).strip() or None if value else None


def _strings(value: object) -> list[str]:
    """Labels as a list, whether exported as a list or as one string."""
    items = value if isinstance(value, list) else [value] if value else []
    return [str(x.get("name") if isinstance(x, dict) else x).strip() for x in items if x]


def parse_jira_issue(issue: dict) -> Ticket:
    if "fields" in issue:
        return _jira_rest(issue)
    if "issue_id" in issue:
        return _jira_flat(issue)
    raise TicketError("not a Jira issue: expected 'key' and 'fields' (REST) or 'issue_id' (flattened)")


def _jira_rest(issue: dict) -> Ticket:
    key, fields = issue.get("key"), issue.get("fields")
    if not key or not isinstance(fields, dict):
        raise TicketError("key/fields: a Jira issue needs a 'key' and a 'fields' object")
    author, who = _person(fields.get("reporter") or fields.get("creator"))
    raw = fields.get("comment") or {}
    raw = raw.get("comments", []) if isinstance(raw, dict) else raw
    comments = []
    for i, c in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(c, dict):
            raise TicketError(f"fields.comment.comments[{i}]: expected an object")
        name, cwho = _person(c.get("author"))
        comments.append(Comment(_body(c.get("body")), name or UNKNOWN,
                                parse_when(c.get("created"), f"fields.comment.comments[{i}].created"),
                                str(c["id"]) if c.get("id") is not None else None, cwho))
    project = fields.get("project")
    assignee, assignee_who = _person(fields.get("assignee"))
    return Ticket("jira", str(key), str(fields.get("summary") or ""), _body(fields.get("description")),
                  author or UNKNOWN, who, parse_when(fields.get("created"), "fields.created"),
                  _named(fields.get("status")), _named(fields.get("priority")), assignee,
                  (project.get("key") if isinstance(project, dict) else None) or str(key).split("-")[0],
                  _strings(fields.get("labels")), comments, assignee_who)


def _jira_flat(issue: dict) -> Ticket:
    key = str(issue["issue_id"])
    created = parse_when(issue.get("created"), "created")
    # The flattened sample keeps comments as bare strings: no author, no date, no id. Each is still
    # its own document (KEY#comment-N), by "unknown", dated at the issue's last update - the latest
    # moment we know every comment existed - falling back to its creation.
    when = parse_when(issue.get("updated"), "updated") or created
    comments = []
    for i, c in enumerate(issue.get("comments") or []):
        if isinstance(c, dict):
            comments.append(Comment(_body(c.get("body")), _person(c.get("author"))[0] or UNKNOWN,
                                    parse_when(c.get("created"), f"comments[{i}].created") or when))
        else:
            comments.append(Comment(_body(c), UNKNOWN, when))
    author = _named(issue.get("reporter"))
    return Ticket("jira", key, str(issue.get("title") or issue.get("summary") or ""),
                  _body(issue.get("description")), author or UNKNOWN, author, created,
                  _named(issue.get("status")), _named(issue.get("priority")), _named(issue.get("assignee")),
                  str(issue.get("project") or key.split("-")[0]), _strings(issue.get("labels")),
                  comments)


_REPO_URL = re.compile(r"(?:api\.github\.com/repos/|github\.com/)([^/]+/[^/]+?)(?:/issues/\d+|/pull/\d+)?/?$")
_ISSUE_URL = re.compile(r"/repos/([^/]+/[^/]+)/issues/(\d+)$")


def _repo_of(issue: dict) -> str | None:
    for name in ("repository_url", "html_url"):
        match = _REPO_URL.search(str(issue.get(name) or ""))
        if match:
            return match.group(1)
    repository = issue.get("repository")
    return repository.get("full_name") if isinstance(repository, dict) else None


def parse_github_issue(issue: dict, repo: str | None = None, comments: Sequence[dict] = ()) -> Ticket:
    if issue.get("number") is None or "title" not in issue:
        raise TicketError("not a GitHub issue: expected 'number' and 'title'")
    repo = _repo_of(issue) or repo
    if not repo:
        raise TicketError("repository_url: cannot tell the repository of the issue")
    embedded = issue.get("comments_data")
    if embedded is None and isinstance(issue.get("comments"), list):
        embedded = issue["comments"]
    parsed = []
    for i, c in enumerate([*(embedded or []), *comments]):
        if not isinstance(c, dict):
            raise TicketError(f"comments[{i}]: expected an object")
        name, who = _person(c.get("user"))
        when = parse_when(c.get("created_at"), f"comments[{i}].created_at")
        parsed.append(Comment(_body(c.get("body")), name or UNKNOWN, when,
                              str(c["id"]) if c.get("id") is not None else None, who))
    author, who = _person(issue.get("user"))
    assignees = [_person(a)[0] for a in [issue.get("assignee"), *(issue.get("assignees") or [])] if a]
    return Ticket("github", f"{repo}#{issue['number']}", str(issue.get("title") or ""),
                  _body(issue.get("body")), author or UNKNOWN, who,
                  parse_when(issue.get("created_at"), "created_at"), _named(issue.get("state")), None,
                  assignees[0] if assignees else None, repo, _strings(issue.get("labels")), parsed)


def ticket_documents(ticket: Ticket, *, acl_from_participants: bool = False) -> list[DocumentIn]:
    """The description document, then one per non-empty comment (an empty comment says nothing and
    the write path would drop it anyway)."""
    facets = [("ticket", ticket.key), ("project", ticket.project), ("status", ticket.status),
              ("priority", ticket.priority), ("assignee", ticket.assignee), *(("label", x) for x in ticket.labels)]
    tags = [f"{name}:{value}" for name, value in facets if value]
    people = [ticket.who or ticket.author, ticket.assignee_who or ticket.assignee,
              *(c.who or c.author for c in ticket.comments)]
    # The schema caps list fields; a ticket past the cap keeps its first entries rather than failing.
    tags = tags[:MAX_TAGS]
    participants = list(dict.fromkeys(p for p in people if p and p != UNKNOWN))[:MAX_TAGS]
    title = f"{ticket.key}: {ticket.summary}".strip()
    facts = [("Status", ticket.status), ("Priority", ticket.priority), ("Assignee", ticket.assignee),
             ("Labels", ", ".join(ticket.labels))]
    status_line = " · ".join(f"{name}: {value}" for name, value in facts if value)
    common = dict(kind="ticket", thread=ticket.key, title=title, tags=tags, participants=participants,
                  source=ticket.source, acl=participants if acl_from_participants else [])
    text = "\n\n".join(part for part in (title, ticket.description, status_line) if part)
    docs = [DocumentIn(text=text, author=ticket.author, date=ticket.date, source_id=ticket.key, **common)]
    for n, comment in enumerate(ticket.comments, start=1):
        if comment.body.strip():
            docs.append(DocumentIn(text=comment.body, author=comment.author, date=comment.date,
                                   source_id=f"{ticket.key}#comment-{comment.cid or n}", **common))
    return docs


def _label(item: object, fallback: str) -> str:
    if isinstance(item, dict):
        key = item.get("key") or item.get("issue_id")
        if key or item.get("number") is not None:
            return str(key or f"#{item['number']}")
    return fallback


def _items(data: bytes, path: Path) -> tuple[list[tuple[str, object]], list[object]]:
    """([(label, JSON value or TicketError)] per issue, top-level GitHub comments)."""
    text = data.decode("utf-8-sig")
    if path.suffix.lower() == ".jsonl":
        items: list[tuple[str, object]] = []
        for n, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    items.append((f"line-{n}", json.loads(line)))
                except ValueError as exc:
                    items.append((f"line-{n}", TicketError(f"line {n} is not JSON: {exc}")))
        return items, []
    try:
        value = json.loads(text)
    except ValueError as exc:
        return [("", TicketError(f"not JSON: {exc}"))], []
    comments: list[object] = []
    if isinstance(value, dict) and isinstance(value.get("issues"), list):
        comments = value.get("comments") if isinstance(value.get("comments"), list) else []
        value = value["issues"]
    if isinstance(value, list):
        return [(f"item-{n}", item) for n, item in enumerate(value, start=1)], comments
    return [("", value)], comments


def parse_ticket_file(data: bytes, path: Path, *, format: TicketFormat = "auto", repo: str | None = None,
                      acl_from_participants: bool = False) -> tuple[list[DocumentIn], list[DeadLetter], int]:
    """Documents, dead letters (one per unreadable issue: `path#KEY`, `path#line-N` or `path#item-N`)
    and the number of issues read."""
    try:
        items, loose = _items(data, path)
    except UnicodeDecodeError as exc:
        return [], [DeadLetter(CONNECTOR, str(path), f"not UTF-8: {exc}")], 0
    extra: dict[str, list[dict]] = {}
    for c in loose:
        match = _ISSUE_URL.search(str(c.get("issue_url", ""))) if isinstance(c, dict) else None
        if match:
            extra.setdefault(f"{match.group(1)}#{match.group(2)}", []).append(c)
    docs: list[DocumentIn] = []
    letters: list[DeadLetter] = []
    for fallback, item in items:
        label = _label(item, fallback)
        try:
            if isinstance(item, TicketError):
                raise item
            if not isinstance(item, dict):
                raise TicketError(f"not an issue: expected a JSON object, got {type(item).__name__}")
            is_jira = "fields" in item or "issue_id" in item
            if format == "jira" or (format == "auto" and is_jira):
                ticket = parse_jira_issue(item)
            elif format == "github" or (format == "auto" and "number" in item and "title" in item):
                own = _repo_of(item) or repo or path.stem
                ticket = parse_github_issue(item, own, extra.get(f"{own}#{item.get('number')}", ()))
            else:
                raise TicketError("not an issue: expected Jira 'key'+'fields', flattened Jira 'issue_id', "
                                  "or GitHub 'number'+'title'")
            docs.extend(ticket_documents(ticket, acl_from_participants=acl_from_participants))
        except (TicketError, ValidationError) as exc:
            letters.append(DeadLetter(CONNECTOR, f"{path}#{label}" if label else str(path), str(exc)))
    return docs, letters, len(items)


@dataclass(frozen=True)
class CsvMapping:
    """Which header names hold each field. A name may repeat in the header (Jira's CSV export repeats
    `Labels` and `Comment`): every column of that name is read. A comment cell of the form
    `date;author;body` (Jira's export) gives its own date and author; any other cell is a body
    dated by its row and authored by "unknown"."""

    id: str
    title: str
    text: str
    author: str
    date: str
    status: str | None = None
    priority: str | None = None
    assignee: str | None = None
    labels: str | None = None
    comments: str | None = None
    date_format: str | None = None  # strptime format when dates are neither ISO 8601 nor RFC 2822
    label_separator: str = ","


def parse_csv(data: bytes, path: Path, mapping: CsvMapping, *,
              acl_from_participants: bool = False) -> tuple[list[DocumentIn], list[DeadLetter], int]:
    """Rows are numbered from 1 after the header; a bad row is dead-lettered as `path#row-N`."""
    try:
        rows = csv.reader(io.StringIO(data.decode("utf-8-sig"), newline=""))
        header = [h.strip() for h in next(rows, [])]
    except (UnicodeDecodeError, csv.Error) as exc:
        return [], [DeadLetter(CONNECTOR, str(path), f"cannot read the CSV header: {exc}")], 0
    columns = {name: [i for i, h in enumerate(header) if h == col]
               for name, col in asdict(mapping).items()
               if col and name not in ("date_format", "label_separator")}
    missing = [f"{name}={getattr(mapping, name)!r}" for name, idx in columns.items() if not idx]
    if missing:
        return [], [DeadLetter(CONNECTOR, str(path), f"mapped column not in the header: {', '.join(missing)}")], 0
    docs: list[DocumentIn] = []
    letters: list[DeadLetter] = []
    n = 0
    try:
        for n, row in enumerate(rows, start=1):
            if not any(cell.strip() for cell in row):
                continue
            cells = {name: [row[i].strip() for i in idx if i < len(row)] for name, idx in columns.items()}
            first = {name: (values[0] if values else "") for name, values in cells.items()}
            try:
                docs.extend(_csv_row(first, cells, mapping, path, acl_from_participants))
            except (TicketError, ValidationError) as exc:
                letters.append(DeadLetter(CONNECTOR, f"{path}#row-{n}", str(exc)))
    except csv.Error as exc:
        letters.append(DeadLetter(CONNECTOR, f"{path}#row-{n + 1}", f"CSV syntax: {exc}; later rows not read"))
    return docs, letters, n


def _csv_row(first: dict[str, str], cells: dict[str, list[str]], mapping: CsvMapping, path: Path,
             acl: bool) -> list[DocumentIn]:
    if not first["id"]:
        raise TicketError(f"column {mapping.id!r} (id) is empty")
    when = parse_when(first["date"], f"column {mapping.date!r}", mapping.date_format)
    comments = []
    for cell in cells.get("comments", []):
        if not cell:
            continue
        parts = cell.split(";", 2)
        try:
            stamp = parse_when(parts[0], "comment", mapping.date_format) if len(parts) == 3 else None
        except TicketError:
            stamp = None
        comments.append(Comment(parts[2].strip(), parts[1].strip() or UNKNOWN, stamp) if stamp
                        else Comment(cell, UNKNOWN, when))
    split = (x.strip() for cell in cells.get("labels", []) for x in cell.split(mapping.label_separator))
    labels = [x for x in split if x]
    ticket = Ticket(f"csv:{path.stem}", first["id"], first["title"], first["text"], first["author"] or UNKNOWN,
                    first["author"] or None, when, first.get("status") or None, first.get("priority") or None,
                    first.get("assignee") or None, None, labels, comments)
    return ticket_documents(ticket, acl_from_participants=acl)


def run_tickets(paths: Paths, sink: Sink, state: ConnectorState, *, format: TicketFormat = "auto",
                repo: str | None = None, acl_from_participants: bool = False) -> ConnectorReport:
    """Jira / GitHub JSON files, or folders searched recursively for .json and .jsonl."""
    if format not in ("auto", "jira", "github"):
        raise TicketError(f"format: {format!r} is not one of auto, jira, github")
    return run_files(CONNECTOR, paths, (".json", ".jsonl"),
                     lambda data, path: parse_ticket_file(data, path, format=format, repo=repo,
                                                          acl_from_participants=acl_from_participants),
                     sink, state, {"format": format, "repo": repo, "acl": acl_from_participants})


def run_csv(paths: Paths, mapping: CsvMapping, sink: Sink, state: ConnectorState, *,
            acl_from_participants: bool = False) -> ConnectorReport:
    """CSV files, or folders searched recursively for .csv; source = "csv:<file stem>"."""
    return run_files(CONNECTOR, paths, (".csv",),
                     lambda data, path: parse_csv(data, path, mapping,
                                                  acl_from_participants=acl_from_participants),
                     sink, state, {"mapping": asdict(mapping), "acl": acl_from_participants})

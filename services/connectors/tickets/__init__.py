"""Ticket connector: Jira JSON, GitHub issues JSON and CSV become dated, attributed documents.

A ticket is a conversation of versions: its description and each comment are separate documents
with their own author and date, all in one thread (the ticket key). Status, priority, assignee and
labels are the export's snapshot and become tags on every document of the ticket.

One module per format (`jira`, `github`, `csv`, which has its own `run_csv`) over `common` (the
ticket model and the documents it becomes). This module is the JSON entry point: files .json or
.jsonl (one issue per line) holding a Jira search result `{"issues": [...]}`, GitHub's
`{"issues": [...], "comments": [...]}`, one issue, or a list of issues, each told apart by its keys
(or forced by `format`). When a GitHub issue does not name its repo, the `repo` argument does, else
the file stem.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from schemas.documents import DocumentIn
from services.connectors.base import ConnectorReport, ConnectorState, DeadLetter, Sink
from services.connectors.files import Paths, run_files
from services.connectors.paths import PathGuard
from services.connectors.tickets.common import CONNECTOR, ticket_documents
from services.connectors.tickets.github import (
    comments_by_issue,
    is_github,
    parse_github_issue,
    repo_of,
)
from services.connectors.tickets.jira import is_jira, parse_jira_issue
from services.errors import TicketError

log = logging.getLogger(__name__)

TicketFormat = Literal["auto", "jira", "github"]


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
    extra = comments_by_issue(loose)
    docs: list[DocumentIn] = []
    letters: list[DeadLetter] = []
    for fallback, item in items:
        label = _label(item, fallback)
        try:
            if isinstance(item, TicketError):
                raise item
            if not isinstance(item, dict):
                raise TicketError(f"not an issue: expected a JSON object, got {type(item).__name__}")
            if format == "jira" or (format == "auto" and is_jira(item)):
                ticket = parse_jira_issue(item)
            elif format == "github" or (format == "auto" and is_github(item)):
                own = repo_of(item) or repo or path.stem
                ticket = parse_github_issue(item, own, extra.get(f"{own}#{item.get('number')}", ()))
            else:
                raise TicketError("not an issue: expected Jira 'key'+'fields', flattened Jira 'issue_id', "
                                  "or GitHub 'number'+'title'")
            docs.extend(ticket_documents(ticket, acl_from_participants=acl_from_participants))
        except (TicketError, ValidationError) as exc:
            letters.append(DeadLetter(CONNECTOR, f"{path}#{label}" if label else str(path), str(exc)))
        except Exception as exc:  # a parser bug costs this issue only
            log.exception("tickets: cannot read %s#%s", path, label)
            letters.append(DeadLetter(CONNECTOR, f"{path}#{label}" if label else str(path),
                                      f"cannot parse: {type(exc).__name__}: {exc}"))
    return docs, letters, len(items)


def run_tickets(paths: Paths, sink: Sink, state: ConnectorState, *, format: TicketFormat = "auto",
                repo: str | None = None, acl_from_participants: bool = False,
                guard: PathGuard | None = None) -> ConnectorReport:
    """Jira / GitHub JSON files, or folders searched recursively for .json and .jsonl."""
    if format not in ("auto", "jira", "github"):
        raise TicketError(f"format: {format!r} is not one of auto, jira, github")
    return run_files(CONNECTOR, paths, (".json", ".jsonl"),
                     lambda data, path: parse_ticket_file(data, path, format=format, repo=repo,
                                                          acl_from_participants=acl_from_participants),
                     sink, state, {"format": format, "repo": repo, "acl": acl_from_participants}, guard)

"""GitHub REST issues. Comments are embedded per issue (`comments_data`, or a list under `comments`)
or come from a top-level list matched by `issue_url`; the repo comes from `repository_url` /
`html_url`, else the caller's fallback."""

from __future__ import annotations

import re
from collections.abc import Sequence

from services.connectors.tickets.common import (
    UNKNOWN,
    Comment,
    Ticket,
    body_text,
    named,
    parse_when,
    person,
    strings,
)
from services.errors import TicketError

_REPO_URL = re.compile(r"(?:api\.github\.com/repos/|github\.com/)([^/]+/[^/]+?)(?:/issues/\d+|/pull/\d+)?/?$")
_ISSUE_URL = re.compile(r"/repos/([^/]+/[^/]+)/issues/(\d+)$")


def is_github(issue: dict) -> bool:
    return "number" in issue and "title" in issue


def repo_of(issue: dict) -> str | None:
    for name in ("repository_url", "html_url"):
        match = _REPO_URL.search(str(issue.get(name) or ""))
        if match:
            return match.group(1)
    repository = issue.get("repository")
    return repository.get("full_name") if isinstance(repository, dict) else None


def comments_by_issue(comments: Sequence[object]) -> dict[str, list[dict]]:
    """Top-level comments keyed `owner/repo#number` by their `issue_url`; others are dropped."""
    by_issue: dict[str, list[dict]] = {}
    for c in comments:
        match = _ISSUE_URL.search(str(c.get("issue_url", ""))) if isinstance(c, dict) else None
        if match:
            by_issue.setdefault(f"{match.group(1)}#{match.group(2)}", []).append(c)
    return by_issue


def parse_github_issue(issue: dict, repo: str | None = None, comments: Sequence[dict] = ()) -> Ticket:
    if issue.get("number") is None or "title" not in issue:
        raise TicketError("not a GitHub issue: expected 'number' and 'title'")
    repo = repo_of(issue) or repo
    if not repo:
        raise TicketError("repository_url: cannot tell the repository of the issue")
    embedded = issue.get("comments_data")
    if embedded is None and isinstance(issue.get("comments"), list):
        embedded = issue["comments"]
    parsed = []
    for i, c in enumerate([*(embedded or []), *comments]):
        if not isinstance(c, dict):
            raise TicketError(f"comments[{i}]: expected an object")
        name, who = person(c.get("user"))
        when = parse_when(c.get("created_at"), f"comments[{i}].created_at")
        parsed.append(Comment(body_text(c.get("body")), name or UNKNOWN, when,
                              str(c["id"]) if c.get("id") is not None else None, who))
    author, who = person(issue.get("user"))
    assignees = [person(a)[0] for a in [issue.get("assignee"), *(issue.get("assignees") or [])] if a]
    return Ticket("github", f"{repo}#{issue['number']}", str(issue.get("title") or ""),
                  body_text(issue.get("body")), author or UNKNOWN, who,
                  parse_when(issue.get("created_at"), "created_at"), named(issue.get("state")), None,
                  assignees[0] if assignees else None, repo, strings(issue.get("labels")), parsed)

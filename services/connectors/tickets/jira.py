"""Jira issues: REST (`{"key", "fields": {...}}`, wiki text or ADF bodies) and the flattened export
of the public Apache sample (`{"issue_id", "title", "reporter", ..., "comments": ["text", ...]}`)."""

from __future__ import annotations

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


def is_jira(issue: dict) -> bool:
    return "fields" in issue or "issue_id" in issue


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
    author, who = person(fields.get("reporter") or fields.get("creator"))
    raw = fields.get("comment") or {}
    raw = raw.get("comments", []) if isinstance(raw, dict) else raw
    comments = []
    for i, c in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(c, dict):
            raise TicketError(f"fields.comment.comments[{i}]: expected an object")
        name, cwho = person(c.get("author"))
        comments.append(Comment(body_text(c.get("body")), name or UNKNOWN,
                                parse_when(c.get("created"), f"fields.comment.comments[{i}].created"),
                                str(c["id"]) if c.get("id") is not None else None, cwho))
    project = fields.get("project")
    assignee, assignee_who = person(fields.get("assignee"))
    return Ticket("jira", str(key), str(fields.get("summary") or ""), body_text(fields.get("description")),
                  author or UNKNOWN, who, parse_when(fields.get("created"), "fields.created"),
                  named(fields.get("status")), named(fields.get("priority")), assignee,
                  (project.get("key") if isinstance(project, dict) else None) or str(key).split("-")[0],
                  strings(fields.get("labels")), comments, assignee_who)


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
            comments.append(Comment(body_text(c.get("body")), person(c.get("author"))[0] or UNKNOWN,
                                    parse_when(c.get("created"), f"comments[{i}].created") or when))
        else:
            comments.append(Comment(body_text(c), UNKNOWN, when))
    author = named(issue.get("reporter"))
    return Ticket("jira", key, str(issue.get("title") or issue.get("summary") or ""),
                  body_text(issue.get("description")), author or UNKNOWN, author, created,
                  named(issue.get("status")), named(issue.get("priority")), named(issue.get("assignee")),
                  str(issue.get("project") or key.split("-")[0]), strings(issue.get("labels")),
                  comments)

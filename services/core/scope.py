"""The scope S of a query (Mem++ Eq. 4, extended): which rows a leg may rank at all.

Every leg applies the same scope inside its index before it ranks, so all k slots go to
eligible rows and nothing the caller may not see can leak through counts or scores.
Adapters translate a Scope into their own filter language; `admits` is the reference
semantics that the contract tests hold every adapter to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from schemas.rows import Row

PUBLIC_ACL = "*"  # index token for "no access list: the whole tenant may read"
USER, GROUP = "user:", "group:"  # how an access-list entry names its kind explicitly


def reader_tokens_for(principal: str, groups: tuple[str, ...] | list[str] = ()) -> frozenset[str]:
    """The access-list entries a principal with these groups may read, lower-cased.

    Principals and groups are separate namespaces: an entry names a user as `user:<principal>`
    and a group as `group:<name>`. A bare entry (what documents and connectors have always
    written) names a user when it holds an "@" (an address) and a group otherwise. So a
    principal called "finance" matches `user:finance` only, never the group finance, and a
    group called "bob@x.com" matches `group:bob@x.com` only, never the user. A name that itself
    starts with "user:" or "group:" has no bare form, so it cannot pose as the other kind.
    """
    principal = principal.strip().lower()
    tokens = {USER + principal}
    if "@" in principal and not principal.startswith((USER, GROUP)):
        tokens.add(principal)
    for group in groups:
        group = group.strip().lower()
        tokens.add(GROUP + group)
        if "@" not in group and not group.startswith((USER, GROUP)):
            tokens.add(group)
    return frozenset(tokens)


def acl_entry(entry: str) -> str:
    """The explicit form of one access-list entry: `user:...` or `group:...` (see reader_tokens_for)."""
    entry = entry.strip().lower()
    if entry == PUBLIC_ACL or entry.startswith((USER, GROUP)):
        return entry
    return (USER if "@" in entry else GROUP) + entry


def user_entries(names) -> list[str]:
    """Access-list entries that name people (a meeting's attendees, a ticket's participants): a
    name without an "@" gets an explicit `user:`, so that it is not read as a group."""
    return [n if "@" in n or n.strip().lower().startswith((USER, GROUP)) else USER + n.strip()
            for n in names if n.strip()]


def acl_tokens(acl: list[str] | tuple[str, ...]) -> list[str]:
    """What an index stores for a row's access list."""
    tokens = sorted({entry.strip().lower() for entry in acl if entry.strip()})
    return tokens or [PUBLIC_ACL]


@dataclass(frozen=True)
class Scope:
    tenant: str
    # The access-list entries the caller may read (`reader_tokens_for` of its principal and
    # groups), lower-cased. None = unrestricted (system or admin jobs).
    readers: frozenset[str] | None = None
    as_of: datetime | None = None
    # Lower bound on event time (inclusive), as as_of is the upper: undated rows fail it. A query
    # filter such as kinds, not part of the caller's view (the version counts ignore it).
    since: datetime | None = None
    known_at: datetime | None = None
    kinds: frozenset[str] | None = None
    authors: frozenset[str] | None = None
    threads: frozenset[str] | None = None
    # Filled by the row store when known_at is set: rows ingested by known_at that were not
    # active at known_at (archived then). Legs then ignore the current state and exclude these.
    inactive_at_known: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        # A bound without a zone is UTC, as stored times are: comparing a naive bound with an
        # aware time would raise (a bare `"as_of": "2025-07-15"` answered 500).
        for name in ("as_of", "since", "known_at"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                object.__setattr__(self, name, value.replace(tzinfo=UTC))

    def reader_tokens(self) -> list[str] | None:
        if self.readers is None:
            return None
        return sorted({PUBLIC_ACL, *self.readers})


def admits(row: Row, scope: Scope) -> bool:
    """Reference semantics of the scope for one row in its current state."""
    if row.tenant != scope.tenant:
        return False
    tokens = scope.reader_tokens()
    if tokens is not None and not set(acl_tokens(row.acl)) & set(tokens):
        return False
    if scope.as_of is not None and (row.event_time is None or row.event_time > scope.as_of):
        return False
    if scope.since is not None and (row.event_time is None or row.event_time < scope.since):
        return False
    if scope.known_at is not None:
        if row.ingested_at > scope.known_at or row.row_id in scope.inactive_at_known:
            return False
    elif row.state != "active":
        return False
    if scope.kinds is not None and row.kind not in scope.kinds:
        return False
    if scope.authors is not None and row.author not in scope.authors:
        return False
    if scope.threads is not None and row.thread not in scope.threads:
        return False
    return True

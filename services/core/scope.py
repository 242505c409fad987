"""The scope S of a query (Mem++ Eq. 4, extended): which rows a leg may rank at all.

Every leg applies the same scope inside its index before it ranks, so all k slots go to
eligible rows and nothing the caller may not see can leak through counts or scores.
Adapters translate a Scope into their own filter language; `admits` is the reference
semantics that the contract tests hold every adapter to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from schemas.rows import Row

PUBLIC_ACL = "*"  # index token for "no access list: the whole tenant may read"


def acl_tokens(acl: list[str] | tuple[str, ...]) -> list[str]:
    """What an index stores for a row's access list."""
    tokens = sorted({entry.strip().lower() for entry in acl if entry.strip()})
    return tokens or [PUBLIC_ACL]


@dataclass(frozen=True)
class Scope:
    tenant: str
    # The caller's principal and groups, lower-cased. None = unrestricted (system or admin jobs).
    readers: frozenset[str] | None = None
    as_of: datetime | None = None
    known_at: datetime | None = None
    kinds: frozenset[str] | None = None
    authors: frozenset[str] | None = None
    threads: frozenset[str] | None = None
    # Filled by the row store when known_at is set: rows ingested by known_at that were not
    # active at known_at (archived then). Legs then ignore the current state and exclude these.
    inactive_at_known: frozenset[str] = field(default_factory=frozenset)

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

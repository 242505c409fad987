"""The access rule of maintenance: rows are judged together only when the same readers read them.

Maintenance never narrows who can read a fact and never moves text across access lists. Every
decision it takes about two or more rows (merge them into one, supersede one by another, archive
one as redundant beside another) and every reason a judge writes about them mixes what the rows
say. So consolidation forms groups, and MemRefine proposes pairs, only of rows whose effective
access lists are equal; a derived row then carries exactly its sources' shared list, a supersede
points to a row its readers can read, and a judge's reason lands only in the history of rows
whose readers could read everything it saw. Rows with different lists stay as they are.

Effective list (the semantics of `services.core.scope`): entries are compared stripped and
lower-cased; an empty list, or any list holding "*", is the whole tenant.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from schemas.rows import Row
from services.core.scope import PUBLIC_ACL, acl_tokens
from services.errors import IncompatibleAccess

AccessKey = frozenset[str]
PUBLIC: AccessKey = frozenset({PUBLIC_ACL})


def access_key(acl: Iterable[str]) -> AccessKey:
    """Who may read a row with this access list, as a comparable value."""
    tokens = frozenset(acl_tokens(list(acl)))
    return PUBLIC if PUBLIC_ACL in tokens else tokens


def row_access(row: Row) -> AccessKey:
    return access_key(row.acl)


def same_access(rows: Sequence[Row]) -> bool:
    """Whether every row has the same effective readers (public included)."""
    return len({row_access(row) for row in rows}) <= 1


def require_same_access(rows: Sequence[Row]) -> None:
    """Raise IncompatibleAccess unless the rows share one access list."""
    if not same_access(rows):
        lists = sorted({",".join(sorted(row_access(r))) for r in rows})
        raise IncompatibleAccess(
            f"rows {[r.row_id for r in rows]}: different access lists {lists}; maintenance never judges "
            "rows of different readers together"
        )


def shared_acl(rows: Sequence[Row]) -> list[str]:
    """The access list of a row written from `rows`: their one shared list, as the first row spells
    it (empty when it is the whole tenant). Raises IncompatibleAccess when the lists differ: an
    intersection would take the fact from readers of the wider rows, a union would show the
    narrower rows' text to readers who may not read it."""
    if not rows:
        raise ValueError("rows: no rows to take an access list from")
    require_same_access(rows)
    if row_access(rows[0]) == PUBLIC:
        return []
    return list(dict.fromkeys(entry.strip() for entry in rows[0].acl if entry.strip()))

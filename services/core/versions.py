"""Which version of its thread a row is, in the caller's view: its place among the thread's rows
in date order, the later version that supersedes it, and the rows a maintenance judge found to
contradict it. Pure: the fields of the rows of the threads come in, one `Version` per row goes out.

The rules (the API's `RowVersion` describes them to callers; tests/unit/core/test_versions.py holds them):

- The versions of a thread are the rows of that thread the caller's view holds: the tenant, the
  access list, `as_of` (undated rows fail it), `known_at` (rows ingested by then, in their state
  then), active rows otherwise. A row the view does not hold is neither counted nor named, so a
  count cannot tell that a hidden version exists. The query's own narrowing (kinds, authors,
  threads) does not apply: those choose what to rank, not which versions there are.
- Date order is the recency reserve's: event time, an undated row at its ingest time, ties by
  ingest position. A row without a thread is a thread of one.
- `superseded_by` is the next version in that order, `superseded_on` its event date.
- `contradicted_by` follows the maintenance pointer (`Row.superseded_by`, written when a
  consolidation judge labelled a group a conflict, possibly across threads) as far as the view
  holds each row on the way, so a hidden row is never passed through or named. Rows superseded
  that way stay active and remain versions of their thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from services.core.scope import Scope, acl_tokens


class VersionFields(NamedTuple):
    """What versions need of a row, with `state` and `superseded_by` as they were at the view's
    `known_at` when it has one (the row store's `versions_of` reads them so)."""

    row_id: str
    tenant: str
    thread: str | None
    event_time: datetime | None
    ingested_at: datetime
    ingest_position: int
    acl: tuple[str, ...]
    state: str
    superseded_by: str | None

    @property
    def order(self) -> tuple[datetime, int, str]:
        return (self.event_time or self.ingested_at, self.ingest_position, self.row_id)


@dataclass(frozen=True)
class Version:
    index: int  # 1 for the earliest version in the view
    count: int
    latest_row_id: str
    superseded_by: str | None
    superseded_on: datetime | None
    contradicted_by: tuple[str, ...]


def view_of(scope: Scope) -> Scope:
    """The scope whose rows count as versions: access and time, without the query's narrowing."""
    return Scope(tenant=scope.tenant, readers=scope.readers, as_of=scope.as_of, known_at=scope.known_at,
                 inactive_at_known=scope.inactive_at_known)


def in_view(fields: VersionFields, view: Scope, readable: Callable[[tuple[str, ...]], bool] | None = None) -> bool:
    """`services.core.scope.admits` over version fields (their state already as of known_at).
    `readable(acl)`: whether the view may read a list (`readable_lists`, shared over many rows)."""
    if fields.tenant != view.tenant or fields.state != "active" or fields.row_id in view.inactive_at_known:
        return False
    if view.readers is not None and not (readable or readable_lists(view))(fields.acl):
        return False
    if view.as_of is not None and (fields.event_time is None or fields.event_time > view.as_of):
        return False
    return view.known_at is None or fields.ingested_at <= view.known_at


def readable_lists(view: Scope) -> Callable[[tuple[str, ...]], bool]:
    """Whether the view may read an access list, each distinct list decided once."""
    tokens = frozenset(view.reader_tokens() or ())
    decided: dict[tuple[str, ...], bool] = {}

    def readable(acl: tuple[str, ...]) -> bool:
        if acl not in decided:
            decided[acl] = not tokens.isdisjoint(acl_tokens(acl))
        return decided[acl]

    return readable


def versions(row_ids: Sequence[str], fields: Iterable[VersionFields], scope: Scope) -> dict[str, Version]:
    """The version of each of `row_ids` that the view of `scope` holds (others are left out).

    `fields` holds every row of the rows' threads, and the rows their maintenance pointers name;
    rows outside the view may be among them (they are filtered here).

    A query's rows sit in long threads (a meeting of hundreds of turns), so this runs over
    thousands of fields per query: the view's test is inlined for the common view (no dates, no
    known_at), and each thread is sorted alone, on a plain key function."""
    view = view_of(scope)
    visible = {f.row_id: f for f in _visible(fields, view)}
    by_thread: dict[str, list[VersionFields]] = {}
    for f in visible.values():
        if f.thread:
            by_thread.setdefault(f.thread, []).append(f)
    threads: dict[str, list[VersionFields]] = {}
    place: dict[str, int] = {}  # row id -> its index in its thread's list
    out: dict[str, Version] = {}
    for row_id in row_ids:
        row = visible.get(row_id)
        if row is None:
            continue
        if not row.thread:
            thread, index = [row], 0
        else:
            thread = threads.get(row.thread)
            if thread is None:
                thread = threads[row.thread] = sorted(by_thread[row.thread], key=_order)
                place.update((f.row_id, i) for i, f in enumerate(thread))
            index = place[row_id]
        later = thread[index + 1] if index + 1 < len(thread) else None
        out[row_id] = Version(
            index=index + 1, count=len(thread), latest_row_id=thread[-1].row_id,
            superseded_by=later.row_id if later else None,
            superseded_on=later.event_time if later else None,
            contradicted_by=_contradictions(row, visible) if row.superseded_by else (),
        )
    return out


def _order(f: VersionFields) -> tuple[datetime, int, str]:
    return (f.event_time or f.ingested_at, f.ingest_position, f.row_id)  # VersionFields.order, one call fewer


def _visible(fields: Iterable[VersionFields], view: Scope) -> Iterable[VersionFields]:
    """The fields `in_view` admits; the same test, with the per-row calls taken out where the
    view has no dates."""
    if view.as_of is not None or view.known_at is not None:
        readable = readable_lists(view)
        return [f for f in fields if in_view(f, view, readable)]
    tenant, inactive = view.tenant, view.inactive_at_known
    candidates = [f for f in fields if f.state == "active" and f.tenant == tenant and f.row_id not in inactive]
    if view.readers is None:
        return candidates
    readable = readable_lists(view)
    lists = {f.acl for f in candidates}
    allowed = {acl for acl in lists if readable(acl)}
    return [f for f in candidates if f.acl in allowed]


def _contradictions(row: VersionFields, visible: dict[str, VersionFields]) -> tuple[str, ...]:
    chain: list[str] = []
    pointer = row.superseded_by
    while pointer in visible and pointer != row.row_id and pointer not in chain:
        chain.append(pointer)
        pointer = visible[pointer].superseded_by
    return tuple(chain)


def wanted(rows: Iterable) -> tuple[list[str], list[str]]:
    """What to read for the versions of `rows` (anything with `thread` and `superseded_by`): their
    threads, and the rows without one and the rows their pointers name."""
    threads, row_ids = set(), set()
    for row in rows:
        if row.thread:
            threads.add(row.thread)
        else:
            row_ids.add(row.row_id)
        if row.superseded_by:
            row_ids.add(row.superseded_by)
    return sorted(threads), sorted(row_ids)


def describe(version: Version) -> str | None:
    """The evidence line of a version; None where it says nothing (a sole, uncontradicted row)."""
    if version.count <= 1 and not version.contradicted_by:
        return None
    parts = [f"version {version.index} of {version.count}"]
    if version.superseded_by:
        on = f" on {version.superseded_on.date().isoformat()}" if version.superseded_on else " (undated)"
        parts.append(f"superseded by {version.superseded_by}{on}")
    elif version.count > 1:
        parts[0] += " (latest)"
    if version.contradicted_by:
        parts.append("contradicted by " + ", ".join(version.contradicted_by))
    return ", ".join(parts)

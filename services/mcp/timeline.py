"""How a thread's versions read to a model, and what changed between two dates. Pure: the rows and
histories come in already filtered to what the caller may read (the routes' use cases did that), so
nothing here can name a row the caller could not fetch itself.

The words are the API's (`schemas.api.RowVersion`): the versions of a thread are its active rows in
date order (event time, an undated row at its ingest time, ties by ingest position); a version is
superseded by the next one; a maintenance judge may mark a row contradicted by another (the log's
RowSuperseded, `Row.superseded_by`). An archived row is listed with its state but is no version.

A change falls in a window [since, until) by: an added row, its date; a version superseded by a
later one, the later one's date; a contradiction, the contradicting row's date (or, when that row is
undated or not the caller's to read, the time orgmem recorded it); an archive or a restore, the time
it was recorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from schemas.rows import Row, RowChange

# A thread can hold hundreds of long messages: each version's text is clipped, the whole row is a
# get_document call away.
VERSION_TEXT_CHARS = 2000


def when(row: Row) -> datetime:
    return row.event_time or row.ingested_at


def date_order(rows: Iterable[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (when(r), r.ingest_position, r.row_id))


def summary(row: Row) -> dict:
    return {"row_id": row.row_id, "date": row.event_time.isoformat() if row.event_time else None,
            "author": row.author, "kind": row.kind, "thread": row.thread, "title": row.title}


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def _clipped(text: str) -> dict:
    if len(text) <= VERSION_TEXT_CHARS:
        return {"text": text}
    return {"text": text[:VERSION_TEXT_CHARS], "text_truncated": True}


def _next_versions(rows: Iterable[Row]) -> dict[str, Row]:
    """Each active row's next version in its thread (a row without a thread has none)."""
    following: dict[str, Row] = {}
    last: dict[str, Row] = {}
    for row in date_order(r for r in rows if r.state == "active" and r.thread):
        if row.thread in last:
            following[last[row.thread].row_id] = row
        last[row.thread] = row
    return following


def versions(rows: Sequence[Row]) -> list[dict]:
    """Every row of one thread in date order: its version number among the active rows, the
    version that superseded it, and the contradictions a maintenance judge recorded."""
    ordered = date_order(rows)
    by_id = {r.row_id: r for r in ordered}
    following = _next_versions(ordered)
    active = [r for r in ordered if r.state == "active"]
    number = {r.row_id: i + 1 for i, r in enumerate(active)}
    contradicts: dict[str, list[str]] = {}
    for row in ordered:
        if row.superseded_by:
            contradicts.setdefault(row.superseded_by, []).append(row.row_id)
    out = []
    for row in ordered:
        later, judge = following.get(row.row_id), by_id.get(row.superseded_by or "")
        out.append({
            "version": number.get(row.row_id), "of": len(active), **summary(row), "state": row.state,
            "ingested_at": row.ingested_at.isoformat(), "latest": bool(active) and row is active[-1],
            "superseded_by": later.row_id if later else None,
            "superseded_by_author": later.author if later else None,
            "superseded_on": _iso(later.event_time) if later else None,
            "contradicted_by": row.superseded_by, "contradicted_by_author": judge.author if judge else None,
            "contradicts": contradicts.get(row.row_id, []),
            "derived_from": list(row.derived_from),
            **_clipped(row.text),
        })
    return out


def _in(moment: datetime, since: datetime, until: datetime) -> bool:
    return since <= moment < until


def changes(rows: Sequence[Row], histories: Mapping[str, list[RowChange]], readable: Mapping[str, Row],
            since: datetime, until: datetime) -> list[dict]:
    """The rows added, superseded, contradicted, archived or restored within [since, until), in
    time order. `readable` holds every row the caller may read that a contradiction names."""
    found: list[tuple[datetime, dict]] = []
    by_id = {row.row_id: row for row in rows}
    previous = {later.row_id: by_id[row_id] for row_id, later in _next_versions(rows).items()}
    for row in date_order(rows):
        earlier = previous.get(row.row_id)
        if _in(when(row), since, until):  # added, then what it superseded, at the same moment
            found.append((when(row), {"change": "added", "on": when(row).isoformat(), **summary(row),
                                      "supersedes": earlier.row_id if earlier else None}))
            if earlier is not None:
                found.append((when(row), {"change": "superseded", "on": when(row).isoformat(), **summary(earlier),
                                          "superseded_by": row.row_id, "superseded_by_author": row.author}))
        for step in histories.get(row.row_id, []):
            if step.change == "superseded":  # a maintenance judge's conflict label
                by = readable.get(step.superseded_by or "")
                on = by.event_time if by is not None and by.event_time else step.at
                if _in(on, since, until):
                    found.append((on, {"change": "contradicted", "on": on.isoformat(), **summary(row),
                                       "contradicted_by": step.superseded_by,
                                       "contradicted_by_author": by.author if by is not None else None,
                                       "recorded_at": step.at.isoformat(), "run_id": step.run_id, "reason": step.reason}))
            elif step.change in ("archived", "restored") and _in(step.at, since, until):
                found.append((step.at, {"change": step.change, "on": step.at.isoformat(), **summary(row),
                                        "run_id": step.run_id, "reason": step.reason}))
    return [change for _, change in sorted(found, key=lambda pair: pair[0])]

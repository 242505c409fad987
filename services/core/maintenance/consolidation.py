"""Consolidation (Mem++ Algorithm 2): group near-duplicate rows, let a judge label each group,
and turn the label into events. Pure: rows and a neighbour function come in, events go out.

The job that drives this reads the row store, backs `neighbours` with the vector index, asks
the judge, and appends what `plan_group` returns. A failed judge call leaves the group alone.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from schemas.documents import MAX_TAGS, MAX_VALUE_CHARS, DocumentIn
from schemas.events import Event, RowArchived, RowDerived, RowSuperseded
from schemas.rows import Row
from services.core.maintenance.access import require_same_access, row_access, shared_acl
from services.core.maintenance.judging import MERGED_MAX_TOKENS, GroupLabel, clip_tokens
from services.core.write_rules import derived_row_id

Neighbours = Callable[[str], list[tuple[str, float]]]
"""row id -> [(neighbour row id, cosine)], e.g. a vector-index search with the row's own vector."""

DEFAULT_TAU = 0.85
PROTECTED_TAG_WORDS = frozenset({"pinned", "confidential"})
AUTHOR_FIELD_MAX = 512  # DocumentIn.author's limit
_TAG_SEPARATORS = re.compile(r"[:=/]")


def is_protected(row: Row) -> bool:
    """Maintenance never touches a pinned or confidential row.

    The rule: a tag protects a row when, lower-cased and stripped, it is "pinned" or
    "confidential", or its last part after ':' '=' or '/' is ("label:pinned",
    "sensitivity=Confidential", "labels/pinned"). Confidential rows are also never sent to a
    judge, which may be a hosted model.
    """
    for tag in row.tags:
        last = _TAG_SEPARATORS.split(tag.strip().lower())[-1].strip()
        if last in PROTECTED_TAG_WORDS:
            return True
    return False


def is_candidate(row: Row) -> bool:
    """Current (active, not superseded) and not protected."""
    return row.state == "active" and row.superseded_by is None and not is_protected(row)


def ingest_order(row: Row) -> tuple[int, str]:
    return (row.ingest_position, row.row_id)


def group_rows(
    rows: Sequence[Row], neighbours: Neighbours, tau: float = DEFAULT_TAU, *,
    kept_apart: set[tuple[str, str]] | None = None,
) -> list[list[Row]]:
    """Greedy groups of two or more candidate rows, each within cosine >= tau of its first row.

    Rows are walked in ingest order; a row not yet grouped opens a group and takes every
    not-yet-grouped candidate neighbour of the same tenant and the same access list (see
    `access`) with cosine >= tau to it. Members follow the first row in ingest order, so the
    result does not depend on the order in which `neighbours` lists them. Tenants and access
    lists never mix: a neighbour outside the rows handed in (another tenant, a protected or
    superseded row) is ignored, and one with another list is left for a group of its own list
    (its pair with the first row is added to `kept_apart`, when given). A row with no such
    neighbour forms no group (nothing to judge).
    """
    by_id = {row.row_id: row for row in rows if is_candidate(row)}
    grouped: set[str] = set()
    groups: list[list[Row]] = []
    for first in sorted(by_id.values(), key=ingest_order):
        if first.row_id in grouped:
            continue
        grouped.add(first.row_id)
        access = row_access(first)
        members: dict[str, Row] = {}
        for other_id, cosine in neighbours(first.row_id):
            other = by_id.get(other_id)
            if other is None or other_id in grouped or other.tenant != first.tenant or cosine < tau:
                continue
            if row_access(other) != access:
                if kept_apart is not None:
                    kept_apart.add((first.row_id, other_id) if first.row_id <= other_id else (other_id, first.row_id))
                continue
            members[other_id] = other
        if members:
            grouped.update(members)
            groups.append([first, *sorted(members.values(), key=ingest_order)])
    return groups


def _single_tenant(rows: Sequence[Row]) -> str:
    tenants = sorted({row.tenant for row in rows})
    if len(tenants) != 1:
        raise ValueError(f"rows: expected one tenant, got {tenants}")
    return tenants[0]


def _recency(row: Row) -> tuple[bool, float, int, str]:
    # Undated rows sort before every dated one: they cannot claim to hold the fact now.
    when = row.event_time.timestamp() if row.event_time is not None else 0.0
    return (row.event_time is not None, when, row.ingest_position, row.row_id)


def latest_row(rows: Sequence[Row]) -> Row:
    """The row with the latest event date; ties and undated rows fall back to ingest order."""
    return max(rows, key=_recency)


def combined_acl(rows: Sequence[Row]) -> list[str]:
    """Access list of a row written from `rows`: their one shared list (`access.shared_acl`).

    Rows with different lists are never merged: an intersection would take the fact from the
    readers of the wider rows, a union would open the narrower rows' text. Raises
    IncompatibleAccess when the lists differ.
    """
    return shared_acl(rows)


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


def _authors_field(authors: list[str]) -> str:
    """Every author joined with ", "; past the field's limit the tail is counted, not dropped
    silently (each author is still a tag)."""
    joined = ", ".join(authors)
    if len(joined) <= AUTHOR_FIELD_MAX:
        return joined
    kept: list[str] = []
    for index, author in enumerate(authors):
        suffix = f", and {len(authors) - index - 1} more"
        if len(", ".join([*kept, author])) + len(suffix) > AUTHOR_FIELD_MAX:
            return ", ".join(kept) + f", and {len(authors) - len(kept)} more"
        kept.append(author)
    return ", ".join(kept)


def derive_document(rows: Sequence[Row], text: str, source: str, max_tokens: int = MERGED_MAX_TOKENS) -> DocumentIn:
    """The document of a row merged from `rows` (Mem++ Algorithm 2 line 11).

    text: clipped to `max_tokens` whitespace tokens; date: the earliest date in the group
    (None if no row is dated); author: every author joined with ", ", and each also as a tag
    "author:<a>"; kind, thread and title: the first row's; tags and participants: the union,
    in row order; acl: the sources' shared list (`combined_acl`; different lists are refused). Lists are cut to the document limits with the author
    tags kept first.
    """
    first = rows[0]
    dates = [row.event_time for row in rows if row.event_time is not None]
    authors = _unique([row.author.strip() for row in rows])
    author_tags = _unique([f"author:{author}" for author in authors])
    other_tags = [tag for tag in _unique([t for row in rows for t in row.tags]) if tag not in author_tags]
    return DocumentIn(
        text=clip_tokens(text, max_tokens),
        author=_authors_field(authors),
        date=min(dates) if dates else None,
        kind=first.kind,
        thread=first.thread,
        title=first.title,
        # A row stored before tags were capped may hold a longer one; the merged row leaves it out.
        tags=[t for t in author_tags + other_tags if len(t) <= MAX_VALUE_CHARS][:MAX_TAGS],
        participants=_unique([p for row in rows for p in row.participants])[:MAX_TAGS],
        acl=combined_acl(rows),
        source=source,
    )


def merge_events(
    rows: Sequence[Row], text: str, run_id: str, reason: str, source: str, max_tokens: int = MERGED_MAX_TOKENS
) -> list[Event]:
    """One RowDerived from `rows`, then a RowArchived for each of them (rows of one access list)."""
    tenant = _single_tenant(rows)
    sources = [row.row_id for row in rows]
    document = derive_document(rows, text, source, max_tokens)
    derived_id = derived_row_id(run_id, sources)
    events: list[Event] = [
        RowDerived(tenant=tenant, row_id=derived_id, document=document, sources=sources, run_id=run_id, reason=reason)
    ]
    events += [
        RowArchived(tenant=tenant, row_id=rid, run_id=run_id, reason=f"merged into {derived_id}: {reason}")
        for rid in sources
    ]
    return events


def plan_group(
    group: Sequence[Row],
    label: GroupLabel,
    merged_text: str | None,
    run_id: str,
    judge: str = "",
) -> list[Event]:
    """The events that carry out a group's label.

    conflict: every row but the latest-dated is superseded by it (all stay active);
    restatement: `merged_text` becomes one derived row and the originals are archived;
    distinct: nothing. Raises ValueError for a group of fewer than two rows, mixed tenants or
    a restatement without text, and IncompatibleAccess for a group of different access lists,
    whatever its label: a supersede would point readers at a row they cannot read, a merge would
    narrow or widen who reads the text, and the judge's reason may quote any of the rows.
    """
    if len(group) < 2:
        raise ValueError(f"group: needs two or more rows, got {len(group)}")
    tenant = _single_tenant(group)
    require_same_access(group)
    by = f" [{judge}]" if judge else ""
    if label.label == "distinct":
        return []
    if label.label == "conflict":
        current = latest_row(group)
        reason = f"consolidation conflict{by}: {label.reason}".rstrip(": ")
        return [
            RowSuperseded(tenant=tenant, row_id=row.row_id, superseded_by=current.row_id, run_id=run_id, reason=reason)
            for row in group
            if row.row_id != current.row_id
        ]
    if not (merged_text or "").strip():
        raise ValueError("merged_text: a restatement needs the merged text")
    reason = f"consolidation restatement{by}: {label.reason}".rstrip(": ")
    return merge_events(group, merged_text or "", run_id, reason, source="maintenance:consolidation")

"""The row an event anchor names ("before the reorg"): the earliest dated row of the caller's
scope whose title holds every word of the event. Titles, not texts: a mail that mentions the
reorg in passing does not date it, the announcement or the meeting about it does. No such row
reads no window, rather than a guess."""

from __future__ import annotations

from schemas.rows import Row
from services.core.scope import Scope
from services.core.text import content_terms
from services.core.time_anchor import EventAnchor, anchor_window
from services.core.time_window import TimeWindow

ANCHOR_CANDIDATES = 50  # best lexical hits of the event's words whose titles are read


def event_window(memory, scope: Scope, anchor: EventAnchor) -> tuple[TimeWindow, Row] | None:
    terms = content_terms(" ".join(anchor.terms))
    if not terms:
        return None
    wanted = set(terms)
    titled = [row for row in memory.rows_with_terms(scope, terms, ANCHOR_CANDIDATES)
              if row.event_time is not None and wanted <= set(content_terms(row.title or ""))]
    if not titled:
        return None
    first = min(titled, key=lambda row: (row.event_time, row.ingest_position))
    return anchor_window(anchor, first.event_time), first

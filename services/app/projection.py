"""The projection loop: log -> row store, lexical index, vector index.

Decisions (is this document a new row, a repeat, empty?) depend only on the row store and
the events before them, so a replay of the log makes exactly the same decisions. The row store
commits each batch with the position it reaches; the two indexes are written first and are
idempotent (upserts by row id), so a crash between the writes only means some events are
applied to the indexes twice, with no effect the second time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from schemas.events import (
    DocumentObserved,
    LoggedEvent,
    RowArchived,
    RowDerived,
    RowRestored,
    RowSuperseded,
)
from schemas.rows import Row, RowChange
from services.core.write_rules import author_scope, content_hash, is_empty
from services.errors import NotReady, OrgmemError
from services.ports import (
    Embedder,
    EventLog,
    LexicalIndex,
    RowMutation,
    RowStore,
    SkippedDocument,
    VectorIndex,
)

log = logging.getLogger(__name__)


def embedding_text(row: Row) -> str:
    return f"{row.title}\n{row.text}" if row.title else row.text


@dataclass
class BatchStats:
    events: int = 0
    rows_added: int = 0
    state_changes: int = 0
    skipped: int = 0
    seconds: float = 0.0


class _BatchPlan:
    """Rows touched by one batch, seen through the batch's own earlier decisions."""

    def __init__(self, rows: RowStore):
        self.rows = rows
        self.touched: dict[str, Row] = {}
        self.new_ids: list[str] = []
        self.mutations: list[RowMutation] = []
        self.skipped: list[SkippedDocument] = []
        self.text_keys: dict[tuple[str, str, str], str] = {}
        self.source_keys: dict[tuple[str, str, str], str] = {}

    def current(self, row_id: str) -> Row | None:
        return self.touched.get(row_id) or self.rows.get(row_id)

    def add(self, row: Row, change: RowChange, new: bool) -> None:
        self.touched[row.row_id] = row
        if new:
            self.new_ids.append(row.row_id)
            if row.source_id:
                self.source_keys[(row.tenant, row.source or "", row.source_id)] = row.row_id
        if row.state == "active":
            self.text_keys[(row.tenant, author_scope(row.author), content_hash(row.text))] = row.row_id
        self.mutations.append(RowMutation(row=row, change=change))

    def duplicate_of(self, tenant: str, row_id: str, doc) -> tuple[str, str] | None:
        if self.current(row_id) is not None:
            return "duplicate_source" if doc.source_id else "duplicate_text", row_id
        if doc.source_id:
            key = (tenant, doc.source or "", doc.source_id)
            found = self.source_keys.get(key) or self.rows.find_source(*key)
            if found:
                return "duplicate_source", found
        key = (tenant, author_scope(doc.author), content_hash(doc.text))
        found = self.text_keys.get(key)
        if found and self.touched[found].state != "active":
            found = None
        found = found or self.rows.find_active_text(*key)
        if found:
            return "duplicate_text", found
        return None


class Projector:
    def __init__(
        self,
        log_: EventLog,
        rows: RowStore,
        lexical: LexicalIndex,
        vectors: VectorIndex,
        embedder: Embedder,
        batch_size: int = 256,
    ):
        self.log, self.rows, self.lexical, self.vectors, self.embedder = log_, rows, lexical, vectors, embedder
        self.batch_size = batch_size
        self._applied = rows.applied_position()
        self._cond = threading.Condition()
        self._run_lock = threading.Lock()

    @property
    def applied(self) -> int:
        return self._applied

    def catch_up(self, until: int | None = None, progress=None) -> BatchStats:
        """Apply every event after the checkpoint (up to `until`), batch by batch."""
        total = BatchStats()
        with self._run_lock:
            self._applied = self.rows.applied_position()
            while until is None or self._applied < until:
                events = self.log.read(self._applied, self.batch_size)
                if not events:
                    break
                stats = self.apply(events)
                for field in ("events", "rows_added", "state_changes", "skipped"):
                    setattr(total, field, getattr(total, field) + getattr(stats, field))
                total.seconds += stats.seconds
                if progress is not None:
                    progress(self._applied, total)
        return total

    def apply(self, events: Sequence[LoggedEvent]) -> BatchStats:
        started = time.perf_counter()
        # Events at or below the row store's checkpoint are in every projection already (the
        # indexes are written before the row store commits), so delivering them again is a no-op.
        checkpoint = self.rows.applied_position()
        events = [e for e in events if e.position > checkpoint]
        if not events:
            return BatchStats(seconds=time.perf_counter() - started)
        plan = _BatchPlan(self.rows)
        for logged in events:
            self._plan_event(plan, logged)
        new_rows = [plan.touched[rid] for rid in dict.fromkeys(plan.new_ids)]
        changed = [row for rid, row in plan.touched.items() if rid not in set(plan.new_ids)]
        if new_rows:
            vectors = self.embedder.encode([embedding_text(r) for r in new_rows])
            self.vectors.upsert(new_rows, vectors)
        if changed:
            self.vectors.update_state(changed)
        if plan.touched:
            self.lexical.upsert(list(plan.touched.values()))
        position = events[-1].position
        self.rows.apply(plan.mutations, plan.skipped, position)
        with self._cond:
            self._applied = position
            self._cond.notify_all()
        return BatchStats(
            events=len(events), rows_added=len(new_rows), state_changes=len(changed),
            skipped=len(plan.skipped), seconds=time.perf_counter() - started,
        )

    def _plan_event(self, plan: _BatchPlan, logged: LoggedEvent) -> None:
        event, position, at = logged.event, logged.position, logged.appended_at
        if isinstance(event, (DocumentObserved, RowDerived)):
            doc = event.document
            if isinstance(event, DocumentObserved):
                if is_empty(doc):
                    plan.skipped.append(SkippedDocument(event.row_id, position, "empty"))
                    return
                duplicate = plan.duplicate_of(event.tenant, event.row_id, doc)
                if duplicate:
                    plan.skipped.append(SkippedDocument(event.row_id, position, duplicate[0], duplicate[1]))
                    return
            elif plan.current(event.row_id) is not None:
                return  # a derived row is written once
            row = Row(
                row_id=event.row_id, tenant=event.tenant, text=doc.text, author=doc.author,
                event_time=doc.date, kind=doc.kind, thread=doc.thread, title=doc.title, tags=doc.tags,
                participants=doc.participants, acl=doc.acl, source=doc.source, source_id=doc.source_id,
                ingest_position=position, ingested_at=at, state="active",
                derived_from=list(getattr(event, "sources", [])),
            )
            kind = "observed" if isinstance(event, DocumentObserved) else "derived"
            reason = getattr(event, "reason", "")
            plan.add(row, RowChange(position=position, at=at, change=kind, state="active",
                                    run_id=getattr(event, "run_id", None), reason=reason), new=True)
            return
        if isinstance(event, (RowSuperseded, RowArchived, RowRestored)):
            row = plan.current(event.row_id)
            if row is None or row.tenant != event.tenant:
                log.warning("event at %d names unknown row %s of tenant %s; ignored", position, event.row_id, event.tenant)
                return
            if isinstance(event, RowSuperseded):
                row, change = row.model_copy(update={"superseded_by": event.superseded_by}), "superseded"
            elif isinstance(event, RowArchived):
                row, change = row.model_copy(update={"state": "archived"}), "archived"
            else:
                row, change = row.model_copy(update={"state": "active", "superseded_by": None}), "restored"
            plan.add(row, RowChange(position=position, at=at, change=change, state=row.state,
                                    superseded_by=row.superseded_by, run_id=event.run_id, reason=event.reason),
                     new=False)

    def wait_for(self, position: int, timeout: float) -> bool:
        """Block until the projections have applied `position` (read-your-writes)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._applied < position:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True


class ProjectionFollower:
    """The projector's surface for a process that does not project (see the module doc)."""

    def __init__(self, event_log: EventLog, rows: RowStore, poll_s: float = 0.2, catch_up_timeout_s: float = 300.0):
        self.log, self.rows, self.poll_s, self.catch_up_timeout_s = event_log, rows, poll_s, catch_up_timeout_s
        self._applied = rows.applied_position()
        self._cond = threading.Condition()

    @property
    def applied(self) -> int:
        return self._applied

    def refresh(self) -> int:
        applied = self.rows.applied_position()
        with self._cond:
            self._applied = applied
            self._cond.notify_all()
        return applied

    def catch_up(self, until: int | None = None, progress=None) -> BatchStats:
        """Wait until the indexers have applied `until` (default: the log head now)."""
        started = time.monotonic()
        target = self.log.head() if until is None else until
        before = self.refresh()
        while self._applied < target:
            if time.monotonic() - started > self.catch_up_timeout_s:
                raise NotReady(f"indexers did not reach log position {target} within {self.catch_up_timeout_s:g} s "
                               f"(applied: {self._applied}); are `orgmem indexer` processes running?")
            time.sleep(self.poll_s)
            previous = self._applied
            if self.refresh() != previous and progress is not None:
                progress(self._applied, BatchStats(events=self._applied - before))
        return BatchStats(events=max(self._applied - before, 0), seconds=time.monotonic() - started)

    def wait_for(self, position: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self.refresh() >= position:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(self.poll_s, remaining))

    def apply(self, events):
        raise OrgmemError("this process does not project the log; the `orgmem indexer` processes do")

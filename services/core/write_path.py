"""The write path's decisions (Mem++ §3.2): what each logged event does to the rows.

A document becomes a row unless it is empty, repeats a known source, or repeats the text of an
active row in its author scope; a state step (superseded, archived, restored) rewrites a known
row; a derived row is written once. The decisions read only the rows stored before the batch
(through `WriteLookups`) and the batch's own earlier decisions, so a replay of the log decides
the same way. Pure: the projector does the I/O around `plan_batch`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from schemas.documents import DocumentIn
from schemas.events import (
    DocumentObserved,
    LoggedEvent,
    RowArchived,
    RowDerived,
    RowRestored,
    RowSuperseded,
)
from schemas.rows import Row, RowChange
from services.core.write_rules import author_scope, content_hash, is_empty, parent_row_id


def embedding_text(title: str | None, text: str) -> str:
    """What the encoder sees of a document: its title, then its text."""
    return f"{title}\n{text}" if title else text


@dataclass(frozen=True)
class RowMutation:
    """What a projected event does to the row store: a new row, or a state step of one."""

    row: Row
    change: RowChange


@dataclass(frozen=True)
class SkippedDocument:
    row_id: str
    position: int
    reason: str  # "empty" | "duplicate_text" | "duplicate_source" | "erased"
    duplicate_of: str | None = None
    # Whose document it was (stats count skips per tenant). Not compared: the row id already
    # determines the tenant (it is a hash over it).
    tenant: str | None = field(default=None, compare=False)


class WriteLookups(Protocol):
    """What the decisions read of the rows stored before a batch (a row store has these)."""

    def get(self, row_id: str) -> Row | None: ...

    def find_source(self, tenant: str, source: str, source_id: str) -> str | None: ...

    def find_active_text(self, tenant: str, author_scope: str, content_hash: str) -> str | None: ...


@dataclass
class WritePlan:
    """One batch's decisions, in log order."""

    mutations: list[RowMutation] = field(default_factory=list)
    skipped: list[SkippedDocument] = field(default_factory=list)
    touched: dict[str, Row] = field(default_factory=dict)  # every row the batch writes, as it leaves it
    new_ids: list[str] = field(default_factory=list)
    unknown: list[LoggedEvent] = field(default_factory=list)  # state steps naming no row of their tenant

    @property
    def new_rows(self) -> list[Row]:
        """Rows the batch creates (they need embeddings)."""
        return [self.touched[rid] for rid in dict.fromkeys(self.new_ids)]

    @property
    def changed_rows(self) -> list[Row]:
        """Rows stored before the batch whose state it changes."""
        new = set(self.new_ids)
        return [row for rid, row in self.touched.items() if rid not in new]


class _BatchView:
    """The stored rows seen through the batch's earlier decisions."""

    def __init__(self, rows: WriteLookups, plan: WritePlan):
        self.rows, self.plan = rows, plan
        self.text_keys: dict[tuple[str, str, str], str] = {}
        self.source_keys: dict[tuple[str, str, str], str] = {}

    def current(self, row_id: str) -> Row | None:
        return self.plan.touched.get(row_id) or self.rows.get(row_id)

    def add(self, row: Row, change: RowChange, new: bool) -> None:
        self.plan.touched[row.row_id] = row
        if new:
            self.plan.new_ids.append(row.row_id)
            if row.source_id:
                self.source_keys[(row.tenant, row.source or "", row.source_id)] = row.row_id
        if row.state == "active":
            self.text_keys[(row.tenant, author_scope(row.author), content_hash(row.text))] = row.row_id
        self.plan.mutations.append(RowMutation(row=row, change=change))

    def _inactive_now(self, row_id: str) -> bool:
        row = self.plan.touched.get(row_id)
        return row is not None and row.state != "active"

    def repeat_of(self, tenant: str, row_id: str, doc: DocumentIn) -> tuple[str, str] | None:
        """(reason, row id) of the row a document repeats, or None for a new row."""
        if self.current(row_id) is not None:
            return "duplicate_source" if doc.source_id else "duplicate_text", row_id
        if doc.source_id:
            key = (tenant, doc.source or "", doc.source_id)
            found = self.source_keys.get(key) or self.rows.find_source(*key)
            if found:
                return "duplicate_source", found
        key = (tenant, author_scope(doc.author), content_hash(doc.text))
        found = self.text_keys.get(key)
        if found and self._inactive_now(found):
            found = None
        found = found or self.rows.find_active_text(*key)
        # The store answers as of before the batch, whose earlier steps may have archived that
        # row; without this check the decision would depend on where a batch ends.
        if found and self._inactive_now(found):
            found = None
        if found:
            return "duplicate_text", found
        return None


def plan_batch(events: Sequence[LoggedEvent], rows: WriteLookups) -> WritePlan:
    """The decisions of one batch of logged events over the rows stored before it."""
    plan = WritePlan()
    view = _BatchView(rows, plan)
    for logged in events:
        _decide(view, logged)
    return plan


def _decide(view: _BatchView, logged: LoggedEvent) -> None:
    event, position, at = logged.event, logged.position, logged.appended_at
    if isinstance(event, (DocumentObserved, RowDerived)) and event.document is None:
        # Sealed under a destroyed key (services/app/sealing.py): erased, never a row again.
        if view.current(event.row_id) is None:
            view.plan.skipped.append(SkippedDocument(event.row_id, position, "erased", tenant=event.tenant))
        return
    if isinstance(event, DocumentObserved):
        doc = event.document
        if is_empty(doc):
            view.plan.skipped.append(SkippedDocument(event.row_id, position, "empty", tenant=event.tenant))
            return
        repeat = view.repeat_of(event.tenant, event.row_id, doc)
        if repeat:
            view.plan.skipped.append(SkippedDocument(event.row_id, position, *repeat, tenant=event.tenant))
            return
        view.add(new_row(logged), RowChange(position=position, at=at, change="observed", state="active"), new=True)
    elif isinstance(event, RowDerived):
        if view.current(event.row_id) is not None:
            return  # a derived row is written once
        view.add(new_row(logged), RowChange(position=position, at=at, change="derived", state="active",
                                            run_id=event.run_id, reason=event.reason), new=True)
    elif isinstance(event, (RowSuperseded, RowArchived, RowRestored)):
        row = view.current(event.row_id)
        if row is None or row.tenant != event.tenant:
            view.plan.unknown.append(logged)
            return
        row, change = state_step(row, event)
        view.add(row, RowChange(position=position, at=at, change=change, state=row.state,
                                superseded_by=row.superseded_by, run_id=event.run_id, reason=event.reason),
                 new=False)


def new_row(logged: LoggedEvent) -> Row:
    """The row a DocumentObserved or RowDerived event creates."""
    event = logged.event
    doc = event.document
    return Row(
        row_id=event.row_id, tenant=event.tenant, text=doc.text, author=doc.author,
        event_time=doc.date, kind=doc.kind, thread=doc.thread, title=doc.title, tags=doc.tags,
        participants=doc.participants, acl=doc.acl, source=doc.source, source_id=doc.source_id,
        parent=parent_row_id(event.tenant, doc), ingest_position=logged.position, ingested_at=logged.appended_at, state="active",
        derived_from=list(event.sources) if isinstance(event, RowDerived) else [],
    )


def state_step(row: Row, event: RowSuperseded | RowArchived | RowRestored) -> tuple[Row, str]:
    """The row after a state step, and the step's name in its history."""
    if isinstance(event, RowSuperseded):
        return row.model_copy(update={"superseded_by": event.superseded_by}), "superseded"
    if isinstance(event, RowArchived):
        return row.model_copy(update={"state": "archived"}), "archived"
    return row.model_copy(update={"state": "active", "superseded_by": None}), "restored"

"""Events of the log. Past tense, versioned, immutable once appended.

The log is the only source of truth: every projection is a fold over these events.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from schemas.documents import DocumentIn


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    version: int = 1
    tenant: str = Field(default="default", min_length=1, max_length=128)


class SealedDocument(BaseModel):
    """A document's fields, encrypted with AES-GCM under a key derived from every data key named
    here (the document's own, its text's, and one per person it names), so that destroying any
    one of them makes it unreadable (docs/erasure.md). Key ids are keyed hashes, never names."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    keys: list[str] = Field(min_length=1)
    nonce: str  # base64, 12 bytes
    ciphertext: str  # base64: the DocumentIn as JSON, with the GCM tag


class DocumentObserved(_Event):
    """A document reached orgmem. The projection decides whether it becomes a row.

    Version 2 carries `sealed` and no `document` in the log; read back, the document is opened
    again, or stays None when its keys were destroyed (the document was erased)."""

    type: Literal["document_observed"] = "document_observed"
    row_id: str
    document: DocumentIn | None = None
    sealed: SealedDocument | None = None


class RowSuperseded(_Event):
    """A later row holds the fact now; the older row stays active and retrievable."""

    type: Literal["row_superseded"] = "row_superseded"
    row_id: str
    superseded_by: str
    run_id: str | None = None
    reason: str = ""


class RowArchived(_Event):
    """The row leaves retrieval; its text stays readable by id."""

    type: Literal["row_archived"] = "row_archived"
    row_id: str
    run_id: str | None = None
    reason: str = ""


class RowDerived(_Event):
    """A maintenance run wrote a new row from existing ones (a merge)."""

    type: Literal["row_derived"] = "row_derived"
    row_id: str
    document: DocumentIn | None = None  # None once erased; `sealed` in the log, as DocumentObserved
    sealed: SealedDocument | None = None
    sources: list[str]
    run_id: str | None = None
    reason: str = ""


class RowRestored(_Event):
    """Undo of archive and supersession: the row is active and current again."""

    type: Literal["row_restored"] = "row_restored"
    row_id: str
    run_id: str | None = None
    reason: str = ""


class MaintenanceRunStarted(_Event):
    type: Literal["maintenance_run_started"] = "maintenance_run_started"
    run_id: str
    job: str
    params: dict = Field(default_factory=dict)
    judge: str = ""
    requested_by: str = ""
    runner: str = ""  # host:pid of the process that ran it (empty in logs written before it was recorded)


class MaintenanceRunFinished(_Event):
    type: Literal["maintenance_run_finished"] = "maintenance_run_finished"
    run_id: str
    status: Literal["finished", "failed", "reverted"]
    summary: dict = Field(default_factory=dict)


class AdminActionRecorded(_Event):
    """An audited administrative action (keys, rebuilds, reverts): who did what, when."""

    type: Literal["admin_action_recorded"] = "admin_action_recorded"
    action: str
    actor: str
    details: dict = Field(default_factory=dict)


class ErasureRecorded(_Event):
    """An administrator erased rows (docs/erasure.md): who, when (the append time), why, by what
    and which rows — never the erased content. A subject is named by a keyed hash of its name
    (HMAC under the tenant's key), so the log alone does not say whom it was about, while whoever
    holds the tenant's key can still check that a given person's erasure was carried out."""

    type: Literal["erasure_recorded"] = "erasure_recorded"
    erasure_id: str
    actor: str
    reason: str
    by: Literal["row", "source", "subject"]
    target: str  # the row id, the keyed hash of (source, source_id), or of the subject
    row_ids: list[str] = Field(default_factory=list)  # every row and skipped document erased
    derived_row_ids: list[str] = Field(default_factory=list)  # of those, rows derived from an erased row
    restored_row_ids: list[str] = Field(default_factory=list)  # sources of an erased derived row, active again
    rows: int = 0
    keys_destroyed: int = 0


Event = Annotated[
    DocumentObserved | RowSuperseded | RowArchived | RowDerived | RowRestored | MaintenanceRunStarted | MaintenanceRunFinished | AdminActionRecorded | ErasureRecorded,
    Field(discriminator="type"),
]

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)


def event_from_json(data: str | bytes) -> Event:
    return EVENT_ADAPTER.validate_json(data)


def event_to_json(event: Event) -> str:
    return event.model_dump_json()


class LoggedEvent(BaseModel):
    """An event with its place in the log: position (monotonic) and append (transaction) time."""

    model_config = ConfigDict(frozen=True)
    position: int
    appended_at: datetime
    event: Event

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


class DocumentObserved(_Event):
    """A document reached orgmem. The projection decides whether it becomes a row."""

    type: Literal["document_observed"] = "document_observed"
    row_id: str
    document: DocumentIn


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
    document: DocumentIn
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


Event = Annotated[
    DocumentObserved | RowSuperseded | RowArchived | RowDerived | RowRestored | MaintenanceRunStarted | MaintenanceRunFinished | AdminActionRecorded,
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

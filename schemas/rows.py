"""The row (Mem++ Eq. 2): one stored document, whole, with provenance and state."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.documents import DocumentKind

RowState = Literal["active", "archived"]


class Row(BaseModel):
    model_config = ConfigDict(frozen=True)

    row_id: str
    tenant: str
    text: str
    author: str = ""
    event_time: datetime | None = None
    kind: DocumentKind = "doc"
    thread: str | None = None
    title: str | None = None
    tags: list[str] = Field(default_factory=list)
    participants: list[str] = Field(default_factory=list)
    acl: list[str] = Field(default_factory=list)
    source: str | None = None
    source_id: str | None = None
    parent: str | None = Field(default=None, description="Row id of the document this one came inside "
                                                         "(a mail's or ticket's attachment), if any.")
    ingest_position: int
    ingested_at: datetime
    state: RowState = "active"
    superseded_by: str | None = None
    derived_from: list[str] = Field(default_factory=list)


class RowChange(BaseModel):
    """One step of a row's history, as the log recorded it."""

    model_config = ConfigDict(frozen=True)

    position: int
    at: datetime
    change: str
    state: RowState
    superseded_by: str | None = None
    run_id: str | None = None
    reason: str = ""

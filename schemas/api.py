"""Requests and responses of the HTTP API (v1)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.documents import DocumentIn, Name, Value
from schemas.rows import Row, RowChange


class IngestRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    documents: list[DocumentIn] = Field(min_length=1)


class IngestResponse(BaseModel):
    row_ids: list[str] = Field(description="One id per document, in order; a repeat names the row it repeats.")
    position: int = Field(description="Log position of the last event; pass it as `after` to read your writes.")


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    q: str = Field(min_length=1, max_length=4096)
    as_of: datetime | None = Field(default=None, description="Bound on event time; undated rows fail it.")
    known_at: datetime | None = Field(default=None, description="Bound on ingest (transaction) time.")
    k: int | None = Field(default=None, ge=1, description=(
        "Rows returned: the first k - reserve in the selector's order, then the recency reserve."))
    reserve: int | None = Field(default=None, ge=0, description=(
        "Slots of the k kept for the most recently dated matched rows (Mem++'s recency reserve; 3 "
        "unless the preset says otherwise). With k at or below it, every row comes from the reserve; "
        "0 returns k rows in the selector's order."))
    candidates: int | None = Field(default=None, ge=1, description="C: rows per leg.")
    selector: Literal["rrf", "pursuit", "coverage"] | None = None
    conjunctive: bool | None = None
    preset: str | None = None
    weights: dict[Literal["lex", "tag", "vec"], float] | None = None
    # Each value as long as the field it filters may be (a 9 KB filter value is refused).
    kinds: list[Value] | None = None
    authors: list[Name] | None = None
    threads: list[Value] | None = None
    after: int | None = Field(default=None, ge=0, description="Wait until the log position is indexed.")
    show_supersession: bool = False


class QueryHit(BaseModel):
    rank: int
    row_id: str
    reason: str = Field(description="fused, pursuit, reserve or reserve_fill")
    fused_score: float
    leg_ranks: dict[str, int]
    leg_scores: dict[str, float]
    date: datetime | None
    author: str
    kind: str
    thread: str | None
    title: str | None
    text: str
    superseded_by: str | None


class QueryResponse(BaseModel):
    rows: list[QueryHit]
    evidence: str
    matched: int
    leg_sizes: dict[str, int]
    timings_ms: dict[str, float] = Field(description=(
        "wall time of each read-path stage in ms; the lexical legs run beside the query embedding, "
        "so 'lexical' and 'rows_lexical' (the ranking fields of the lexical hits) overlap 'embed', and "
        "'lexical_wait' is the time they added after it; 'rows' reads the whole rows returned"))
    applied_position: int


class RowResponse(BaseModel):
    row: Row
    history: list[RowChange]


class ThreadResponse(BaseModel):
    thread: str
    rows: list[Row]


class StatsResponse(BaseModel):
    log_head: int
    applied_position: int
    rows: dict[str, int]

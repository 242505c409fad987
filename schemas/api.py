"""Requests and responses of the HTTP API (v1)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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
        "Slots of the k kept for the most recently dated matched rows (Mem++'s recency reserve; none "
        "in the default preset, 3 in paper-orgmembench). With k at or below it, every row comes from the reserve; "
        "0 returns k rows in the selector's order."))
    candidates: int | None = Field(default=None, ge=1, description="C: rows per leg.")
    selector: Literal["rrf", "pursuit", "coverage"] | None = None
    conjunctive: bool | None = Field(default=None, description=(
        "An alias of lexical_match: true is \"all\", false is \"any\"."))
    lexical_match: Literal["all", "any", "adaptive"] | None = Field(default=None, description=(
        "How many of the query's content terms a lexical hit must contain: all, any, or adaptive "
        "(all of one or two terms, then a share that falls with the query's length, at least 30%). "
        "Given as all or any, it holds for chat turns too unless lexical_turn_match is given."))
    lexical_turn_match: Literal["all", "any", "adaptive"] | None = Field(default=None, description=(
        "How a chat turn matches, where not as every other row: a turn seldom holds a share of a long "
        "question's terms, its session does (the default preset: any)."))
    preset: str | None = None
    weights: dict[Literal["lex", "tag", "vec", "people"], float] | None = Field(default=None, description=(
        "Leg weights over the preset's; `people` weighs the people rule's leg (people_rules)."))
    # Each value as long as the field it filters may be (a 9 KB filter value is refused).
    kinds: list[Value] | None = None
    authors: list[Name] | None = None
    people: list[Value] | None = Field(default=None, max_length=50, description=(
        "Person ids of GET /v1/people: narrows `authors` to these persons' aliases (docs/people.md)."))
    threads: list[Value] | None = None
    after: int | None = Field(default=None, ge=0, description="Wait until the log position is indexed.")
    show_supersession: bool = Field(default=False, description=(
        "Kept for compatibility, no longer needed: each row's line under its header in `evidence` "
        "says which version of its thread it is and what supersedes or contradicts it."))
    time_rules: bool = Field(default=False, description=(
        "Read a time phrase in `q` (in March 2025, last quarter, two weeks ago, since January) as a "
        "window on event date: rows dated before its start are left out and its end caps as_of, never "
        "widening it; undated rows fail it. The window applied is the response's `time_window` (docs/time.md)."))
    reference_time: datetime | None = Field(default=None, description=(
        "The \"now\" a relative phrase is read against (two weeks ago, last month); default: as_of if given, "
        "else the server's time. Only read with time_rules."))
    people_rules: bool = Field(default=False, description=(
        "Rank higher the rows written by the persons `q` names (an address, a display name, or a first name "
        "only one known person has) among the caller's people directory; the persons read are the "
        "response's `people_named` (docs/people.md)."))

    @field_validator("as_of", "known_at", "reference_time")
    @classmethod
    def _naive_is_utc(cls, value: datetime | None) -> datetime | None:
        # Only a missing zone is filled in: converting an offset could overflow at year 9999, and
        # comparisons with an aware bound are exact as they are.
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value

    @model_validator(mode="after")
    def _one_lexical_match(self) -> QueryRequest:
        alias = {True: "all", False: "any", None: None}[self.conjunctive]
        if alias and self.lexical_match and alias != self.lexical_match:
            raise ValueError(f"conjunctive: {self.conjunctive} contradicts lexical_match {self.lexical_match!r}; give one")
        return self


class RowVersion(BaseModel):
    """Which version of its thread a row is, counting only the rows the caller's view holds
    (tenant, access list, as_of, known_at; not the query's kinds/authors/threads): a version the
    caller may not see is neither counted nor named."""

    index: int = Field(ge=1, description=(
        "Place among the thread's versions in date order (event time; an undated row at its ingest "
        "time; ties by ingest position), 1 for the earliest. A row without a thread is 1 of 1."))
    count: int = Field(ge=1, description="Versions of the thread in the caller's view.")
    latest_row_id: str = Field(description="The thread's last version in the view (this row when it is the latest).")
    superseded_by: str | None = Field(description="The next version of the thread, if this one is not the latest.")
    superseded_on: datetime | None = Field(description="The event date of `superseded_by` (null when it is undated).")
    contradicted_by: list[str] = Field(description=(
        "Rows a maintenance judge found to contradict this one (consolidation's conflict label; "
        "they may be in other threads), the pointer followed while the view holds each row. A "
        "row contradicted so stays active and remains a version of its thread."))


class QueryHit(BaseModel):
    rank: int
    row_id: str
    reason: str = Field(description=(
        "fused, pursuit or coverage (the selector), reserve, reserve_fill, newer_version (a closer, later "
        "restatement of a row among the first ten, brought in from just past the selector's answer), or named "
        "(the question names the row's source id, such as a Message-ID or a ticket key)"))
    fused_score: float
    leg_ranks: dict[str, int]
    leg_scores: dict[str, float]
    date: datetime | None
    author: str
    kind: str
    thread: str | None
    title: str | None
    text: str
    superseded_by: str | None = Field(description=(
        "Kept for compatibility: the first of `version.contradicted_by`, null when there is none."))
    version: RowVersion | None = Field(default=None, description="This row's version of its thread.")
    parent: str | None = Field(default=None, description="Row id of the message or ticket this row came "
                                                         "inside (an attachment), else null.")


class TimeWindowApplied(BaseModel):
    start: datetime | None = Field(description="Rows dated before this are left out; null: no lower bound.")
    end: datetime | None = Field(description=(
        "Exclusive: rows dated at or after it are left out (with as_of, whichever is earlier); null: open."))
    phrase: str = Field(description="The words of the question the window was read from.")
    anchor_row_id: str | None = Field(default=None, description=(
        "For an event phrase (\"before the reorg\"): the row that dated it, the earliest dated row the "
        "caller may read whose title holds the event's words; null for a calendar phrase."))


class PersonNamed(BaseModel):
    person_id: str = Field(description="The person's id in GET /v1/people.")
    phrase: str = Field(description="The words of the question that named them.")


class QueryResponse(BaseModel):
    rows: list[QueryHit]
    evidence: str
    matched: int
    leg_sizes: dict[str, int]
    timings_ms: dict[str, float] = Field(description=(
        "wall time of each read-path stage in ms; the lexical legs run beside the query embedding and "
        "the vector leg, so 'lexical' and 'rows_lexical' (the ranking fields of the lexical hits) "
        "overlap 'embed' and 'vector', and 'lexical_wait' is the time they added after both; 'rows' "
        "reads the whole rows returned"))
    applied_position: int
    time_window: TimeWindowApplied | None = Field(default=None, description=(
        "The window read from the question under time_rules; null when time_rules is off or `q` names no time."))
    people_named: list[PersonNamed] | None = Field(default=None, description=(
        "The persons read from the question under people_rules (their rows were ranked higher); "
        "null when people_rules is off."))


class RowResponse(BaseModel):
    row: Row
    history: list[RowChange]
    version: RowVersion | None = Field(default=None, description=(
        "Its version of its thread among the active rows the caller may read; null for an archived row."))


class ThreadResponse(BaseModel):
    thread: str
    rows: list[Row] = Field(description="In date order (undated last); the thread's latest rows when `truncated`")
    truncated: bool = Field(default=False, description=(
        "Earlier rows of the thread that the caller may read were left out (ask with a smaller `limit` "
        "for fewer; a thread answer holds at most limits.max_thread_rows rows)"))
    versions: dict[str, RowVersion] = Field(default_factory=dict, description=(
        "Row id -> its version, for the active rows (an archived row is no version)."))


class StatsResponse(BaseModel):
    log_head: int
    applied_position: int
    rows: dict[str, int]

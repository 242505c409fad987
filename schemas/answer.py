"""Requests and responses of POST /v1/answer: an answer from the evidence a query retrieves."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from schemas.api import QueryRequest


class AnswerRequest(QueryRequest):
    """A query's request (its retrieval options and limits, whatever fields it gains): `q` is the
    question, and its rows are the only evidence the answer may use and cite."""


class Citation(BaseModel):
    row_id: str
    title: str | None = None
    date: datetime | None = None


class AnswerResponse(BaseModel):
    answer: str = Field(description="The model's answer, from the retrieved evidence only.")
    citations: list[Citation] = Field(description=(
        "The rows the answer cites, each one of the rows the query returned for this caller."))
    dropped_citations: list[str] = Field(description=(
        "What the model cited that is not a row of this caller's evidence (an invented id, or one it "
        "must not know); left out of `citations`."))
    flagged: bool = Field(description="True when any citation was dropped: read the answer with care.")
    missing: list[str] = Field(description="What the evidence does not cover, as the model says.")
    time_window: dict[str, Any] | None = Field(default=None, description=(
        "The query's time window, where its response has one."))
    evidence_rows: int = Field(description="How many rows the query returned (and the model was shown).")
    model: str | None = Field(default=None, description="The answering model; null when no model was asked "
                                                        "(no evidence).")
    applied_position: int

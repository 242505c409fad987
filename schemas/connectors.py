"""Request and response of the connector API (v1): POST /v1/connectors/{kind}."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class ConnectorRunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    paths: list[str] = Field(min_length=1, max_length=1000)
    acl_from_participants: bool = False
    date: str | None = Field(default=None, description="meetings: the date when a file carries none")
    format: Literal["auto", "jira", "github"] = "auto"


class ConnectorRunResponse(BaseModel):
    connector: str
    documents: int
    items_seen: int
    unchanged: int
    dead_letters: list[dict]
    log_position: int

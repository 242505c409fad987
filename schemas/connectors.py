"""Requests and responses of the connector API (v1): POST /v1/connectors/{kind} and
GET /v1/connectors/dead-letters."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MeetingFormat = Literal["vtt", "srt", "json", "transcript"]


class ConnectorRunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    paths: list[str] = Field(min_length=1, max_length=1000,
                             description="Files or folders under the caller's connector roots.")
    acl_from_participants: bool = False
    date: str | None = Field(default=None, description="meetings: the date when a file carries none")
    format: Literal["auto", "jira", "github"] = "auto"
    access_map: dict | None = Field(
        default=None, description='sources: {"users": {source id: principal}, "groups": {source id: group}}; '
                                  "a source id it does not name grants nobody")
    deletions: Literal["erase", "mark"] | None = Field(
        default=None, description="sources: what a deletion in the source does to its rows (default: the "
                                  "server's setting; erase for chat). Erasing needs an unrestricted admin key; "
                                  "a writer's run marks them removed instead")
    partial: bool = Field(default=False, description="sources: the export holds part of the source only, so "
                                                     "nothing it lacks counts as deleted")
    formats: list[MeetingFormat] | None = Field(
        default=None, min_length=1, max_length=4,
        description="meetings: the file formats to read (default vtt, srt, json); plain 'Speaker: text' "
                    ".txt transcripts only when 'transcript' is asked for")


class ConnectorRunResponse(BaseModel):
    connector: str
    documents: int
    items_seen: int
    unchanged: int
    dead_letters: list[dict] = Field(description="Items not read, each with its path and the reason "
                                                 "(a bad date, a link outside the connector roots, ...)")
    already_known: int = Field(default=0, description="Documents handed on whose source and source_id the "
                                                      "tenant already holds; the write path skips them")
    known_items: list[dict] = Field(default_factory=list,
                                    description="The first 1000 of those: source, source_id, row_id")
    stopped: str | None = Field(default=None, description="Why the run stopped before the end (503), "
                                                          "or null when it finished")
    log_position: int
    skipped: dict[str, int] = Field(default_factory=dict, description="Files not read for their format, type "
                                                                      "or place, by why and how to include them")
    superseded: int = Field(default=0, description="Versions that replaced an earlier version of their item")
    removed: list[dict] = Field(default_factory=list, description="Versions deleted in the source: source, "
                                                                  "source_id, reason, and what was done (erased, "
                                                                  "archived)")
    unmapped: int = Field(default=0, description="Source user or group ids the access map did not name "
                                                 "(their entries grant nobody)")
    notes: list[str] = Field(default_factory=list)


class DeadLetterView(BaseModel):
    connector: str
    path: str
    reason: str
    at: str = Field(description="When the item was refused (ISO 8601, UTC)")


class DeadLettersResponse(BaseModel):
    dead_letters: list[DeadLetterView] = Field(description="The caller's tenant's dead letters, newest first")
    total: int = Field(description="How many the tenant has; only the newest `limit` are listed")

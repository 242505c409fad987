"""Responses of the people directory (GET /v1/people, GET /v1/people/{id}; docs/people.md)."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

PEOPLE_MAX_LIMIT = 500


class PersonSummary(BaseModel):
    person_id: str = Field(description="Stable: derived from the primary address, or the mapped id.")
    display_name: str
    aliases: list[str] = Field(description="Every author, participant or mention string of this person in the caller's rows.")
    roles: dict[str, int] = Field(description=(
        "Rows by role in the caller's rows: author, recipient (a mail's To/Cc), attendee (a meeting's), "
        "assignee (a ticket's assignee tag), mentioned (@-mentioned in a chat thread), participant (any other)."))


class PeopleResponse(BaseModel):
    people: list[PersonSummary]
    next_offset: int | None = Field(description="Pass as `offset` for the next page; null on the last.")


class PersonRow(BaseModel):
    row_id: str
    date: datetime | None = None
    kind: str
    title: str | None = None
    thread: str | None = None


class PersonResponse(BaseModel):
    person: PersonSummary
    rows: dict[str, list[PersonRow]] = Field(description="The person's rows by role, newest first, "
                                                          "only rows the caller may read.")
    truncated: bool

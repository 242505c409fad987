"""A document as it enters orgmem, from a connector, the API or a JSONL file."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

DocumentKind = Literal["email", "ticket", "meeting", "doc", "chat"]
# Kinds whose rows are single turns of a conversation: a turn answers the one before it and is
# read with its session, not on its own (the lexical rule for turns, the version order).
TURN_KINDS = frozenset({"chat"})

# One document's text: a longer one is refused (connectors make it a dead letter naming the cap).
MAX_TEXT_CHARS = 1_000_000
MAX_TAGS = 200
# The author and each participant: a name or an address.
MAX_NAME_CHARS = 512
# Each tag and access-list entry: a name with a prefix ("author:<name>", "user:<name>").
MAX_VALUE_CHARS = 1024
# A source id, and a parent's (the source id of the document it came inside, in the same source).
MAX_SOURCE_ID_CHARS = 1024
Name = Annotated[str, StringConstraints(max_length=MAX_NAME_CHARS)]
Value = Annotated[str, StringConstraints(max_length=MAX_VALUE_CHARS)]
# The dates orgmem accepts, from the API and from every connector. Dates outside these years are
# typos or attacks, and some stores cannot round-trip them (3-digit years, overflow when shifting
# to UTC near year 1 or 9999).
DATE_MIN = datetime(1000, 1, 1, tzinfo=UTC)
DATE_MAX = datetime(9000, 1, 1, tzinfo=UTC)


class DocumentIn(BaseModel):
    """One whole, dated, attributed document. Field names match the JSONL ingest format."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(max_length=MAX_TEXT_CHARS, description="The whole document; stored as is.")
    author: str = Field(default="", max_length=MAX_NAME_CHARS)
    date: datetime | None = Field(default=None, description="Event time; undated documents fail every as-of bound.")
    kind: DocumentKind = "doc"
    thread: str | None = Field(default=None, max_length=1024)
    title: str | None = Field(default=None, max_length=4096)
    tags: list[Value] = Field(default_factory=list, max_length=MAX_TAGS)
    participants: list[Name] = Field(default_factory=list, max_length=MAX_TAGS)
    source: str | None = Field(default=None, max_length=256, description="Connector or system the document came from.")
    source_id: str | None = Field(default=None, max_length=MAX_SOURCE_ID_CHARS, description="Stable id within the source; re-ingesting it adds nothing.")
    parent: str | None = Field(default=None, min_length=1, max_length=MAX_SOURCE_ID_CHARS,
                               description="Source id (same source) of the document this one came inside: "
                                           "a mail's or a ticket's attachment names its message or ticket.")
    acl: list[Value] = Field(default_factory=list, max_length=MAX_TAGS, description="Principals and groups who may read it; empty = the whole tenant.")

    @field_validator("date")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise ValueError("date is out of the representable range once converted to UTC") from None

    @field_validator("tags", "participants", "acl")
    @classmethod
    def _clean_list(cls, values: list[str]) -> list[str]:
        seen: dict[str, None] = {}
        for value in values:
            value = value.strip()
            if value:
                seen.setdefault(value, None)
        return list(seen)

    @model_validator(mode="after")
    def _parent_in_source(self) -> DocumentIn:
        # The parent is found by (source, parent): without a source id of its own the document has
        # no place in that source, and a document cannot come inside itself.
        if self.parent is not None and not self.source_id:
            raise ValueError("parent: only with source_id")
        if self.parent is not None and self.parent == self.source_id:
            raise ValueError("parent: a document cannot be its own parent")
        return self

"""Erasure requests and results (`POST /v1/admin/erasures`, `orgmem erase`; docs/erasure.md)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class ErasureRequest(BaseModel):
    """Name exactly one of row_id, source_id (with source, or alone: every source) or subject."""

    model_config = ConfigDict(extra="forbid")

    row_id: str | None = Field(default=None, min_length=1, max_length=64)
    source_id: str | None = Field(default=None, min_length=1, max_length=1024)
    source: str | None = Field(default=None, min_length=1, max_length=256)
    subject: str | None = Field(default=None, min_length=1, max_length=512,
                                description="A person as documents name them (author, participant), case-insensitive.")
    reason: str = Field(min_length=1, max_length=2000, description="Kept in the audit log.")

    @model_validator(mode="after")
    def _one_target(self) -> ErasureRequest:
        named = [name for name in ("row_id", "source_id", "subject") if getattr(self, name)]
        if len(named) != 1:
            raise ValueError("name exactly one of row_id, source_id or subject")
        if self.source and not self.source_id:
            raise ValueError("source: only with source_id")
        if not self.reason.strip():
            raise ValueError("reason: must not be blank")
        return self


class ErasureResponse(BaseModel):
    erasure_id: str
    by: str
    rows: int
    row_ids: list[str] = Field(description="Every row and skipped document erased, derived rows included.")
    derived_row_ids: list[str] = Field(description="Rows derived by maintenance from an erased row, erased with it.")
    restored_row_ids: list[str] = Field(description="Rows an erased derived row had archived, active again.")
    keys_destroyed: int
    dead_letters_dropped: int
    position: int = Field(description="Log position of the ErasureRecorded event.")
    purged: bool = Field(description="Every projection has purged the rows (false: the indexers still will).")

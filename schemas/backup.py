"""Requests and responses of the backup and export admin API (v1)."""

from __future__ import annotations

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

# The longest a projector hold may last (services.app.backup.MAX_HOLD_S).
MAX_HOLD_S = 600


class HoldRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: int = Field(default=300, gt=0, le=MAX_HOLD_S,
                         description="The hold lapses by itself after this long, released or not.")


class HoldResponse(BaseModel):
    """The projector is held between two batches: the row store, the lexical index and the vector
    index all stand at `checkpoint` until the hold is released or lapses. Queries and ingests go on."""

    hold_id: str
    checkpoint: int
    log_head: int
    expires_at: AwareDatetime
    data_dir: str = Field(description="The data folder this server projects (a backup checks it copies that one).")


class HoldReleased(BaseModel):
    hold_id: str
    held_throughout: bool = Field(description="False when the hold had lapsed before this release: a copy taken "
                                              "under it may not be consistent.")

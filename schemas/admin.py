"""Requests and responses of the admin API (v1): API keys and maintenance runs of the caller's tenant."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

# The consolidation threshold when a request gives none; equal to
# services.core.maintenance.consolidation.DEFAULT_TAU (a unit test keeps the two the same).
DEFAULT_TAU = 0.85
# The longest a key may live, in seconds (services.core.keys.MAX_LIFETIME).
MAX_KEY_LIFETIME_S = 3650 * 86400


# --- keys -------------------------------------------------------------------------------------
class KeyCreateRequest(BaseModel):
    """A key never grants more than its creator holds: a creator that is not unrestricted can make
    only keys that are not unrestricted either, for its own principal and groups (403 otherwise)."""

    model_config = ConfigDict(extra="forbid")
    principal: str = Field(min_length=1, max_length=128)
    role: str = Field(pattern="^(reader|writer|admin)$")
    groups: list[str] = Field(default_factory=list, max_length=100)
    name: str = Field(default="", max_length=200)
    unrestricted: bool = Field(default=False, description="admin only: read every row of the tenant")
    expires_at: AwareDatetime | None = Field(default=None, description="The key stops verifying at this time.")
    expires_in_s: int | None = Field(default=None, gt=0, le=MAX_KEY_LIFETIME_S,
                                     description="The key stops verifying this many seconds after creation.")

    @model_validator(mode="after")
    def _one_expiry(self) -> KeyCreateRequest:
        if self.expires_at is not None and self.expires_in_s is not None:
            raise ValueError("expires_at, expires_in_s: give at most one")
        return self


class KeyInfo(BaseModel):
    key_id: str
    tenant: str
    principal: str
    groups: list[str]
    role: str
    unrestricted: bool
    name: str
    created_at: str
    created_by: str
    revoked_at: str | None
    revoked_by: str | None
    expires_at: str | None = Field(default=None, description="When the key stops verifying; null: never.")


class KeyCreateResponse(BaseModel):
    key: KeyInfo
    token: str = Field(description="The secret, shown this once; store it now.")


class KeyListResponse(BaseModel):
    keys: list[KeyInfo]


# --- maintenance ------------------------------------------------------------------------------
class ConsolidateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tau: float = Field(default=DEFAULT_TAU, gt=0.0, le=1.0, description="Cosine to a group's first row.")
    max_calls: int | None = Field(default=None, ge=0, description="At most this many groups judged.")


class RefineRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    budget_fraction: float | None = Field(default=None, gt=0.0, le=1.0,
                                          description="Target size as a fraction of the active size now.")
    budget_bytes: int | None = Field(default=None, ge=0, description="Target size in bytes (JSON of the rows).")
    max_calls: int | None = Field(default=None, ge=0, description="At most this many pairs judged.")
    min_similarity: float = Field(default=0.0, ge=-1.0, le=1.0, description="Pairs below are never proposed.")
    use_cache: bool = Field(default=True, description="Skip pairs an earlier run with this judge preserved.")

    @model_validator(mode="after")
    def _one_budget(self) -> RefineRequest:
        if (self.budget_fraction is None) == (self.budget_bytes is None):
            raise ValueError("budget_fraction, budget_bytes: give exactly one")
        return self


class RunAccepted(BaseModel):
    run_id: str
    job: str
    status: Literal["queued"] = "queued"
    reverts: str | None = None


class RunView(BaseModel):
    run_id: str
    job: str
    tenant: str
    status: Literal["queued", "running", "finished", "failed", "reverted"]
    params: dict[str, Any]
    judge: str
    requested_by: str
    runner: str = Field(default="", description="host:pid of the process that ran it.")
    started_at: str | None
    finished_at: str | None
    started_position: int | None
    finished_position: int | None
    summary: dict[str, Any]
    progress: dict[str, Any]
    events: int = Field(description="Decision events the run appended.")
    reverted_by: str | None


class RunsResponse(BaseModel):
    runs: list[RunView]


class RunDecision(BaseModel):
    """One decision event of a run; a derived row's text is read through GET /v1/rows/{id}, where
    the caller's access list applies."""

    change: Literal["superseded", "archived", "derived", "restored"]
    row_id: str
    superseded_by: str | None = None
    sources: list[str] = Field(default_factory=list, description="derived: the rows it was made from")
    reason: str = ""


class RunDecisionsResponse(BaseModel):
    run_id: str
    decisions: list[RunDecision] = Field(description="In log order, at most `limit` of them")
    total: int


# --- the audit trail --------------------------------------------------------------------------
AUDIT_MAX_LIMIT = 1000


class AuditEntry(BaseModel):
    """One audited act (docs/audit.md): who (`actor`), when (`at`, the log's append time), what
    (`action`, of `kind`) and its `details` as recorded (never secrets, never exported content)."""

    position: int = Field(description="Its place in the log.")
    at: AwareDatetime
    tenant: str = Field(description="The caller's tenant, or '*' for an act on the whole data folder "
                                    "(a backup, a restore, a rebuild), shown without its paths and counts.")
    kind: str = Field(description="The action's first word: key, export, backup, restore, erasure, maintenance, ...")
    action: str
    actor: str
    details: dict[str, Any]


class AuditResponse(BaseModel):
    entries: list[AuditEntry] = Field(description="Newest first.")
    more: bool = Field(description="Older entries matched and were left out by `limit`.")

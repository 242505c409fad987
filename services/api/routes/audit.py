"""`GET /v1/admin/audit`: the audit trail of the caller's tenant (docs/audit.md), for its admins.

The same records as `orgmem audit --json`, newest first: the tenant's own acts (key grants and
revocations, exports, projector holds, erasures, maintenance runs) and the acts on the whole
data folder (backups, restores, rebuilds: tenant '*'), which touch its data too, without their
paths and counts. Never another tenant's: the tenant is the key's, never a parameter.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool

from schemas.admin import AUDIT_MAX_LIMIT, AuditEntry, AuditResponse
from services.api.deps import Admin, State
from services.app.audit import AUDIT_KINDS, tenant_trail

router = APIRouter(tags=["admin"])
AuditKind = Literal[AUDIT_KINDS]  # an unknown kind is a 422, not an empty answer


@router.get("/v1/admin/audit", operation_id="list_audit", response_model=AuditResponse)
async def list_audit(s: State, caller: Admin,
                     limit: int = Query(100, ge=1, le=AUDIT_MAX_LIMIT, description="The newest this many."),
                     since: datetime | None = Query(None, description="Only acts at or after this time (UTC if no zone)."),
                     kind: list[AuditKind] = Query([], max_length=len(AUDIT_KINDS), description="Only these kinds (repeatable).")
                     ) -> AuditResponse:
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    # Reading the log is blocking I/O: off the event loop.
    entries, more = await run_in_threadpool(tenant_trail, s.memory.event_log, caller.tenant, since, limit, kind)
    return AuditResponse(entries=[AuditEntry(**e) for e in entries], more=more)

"""Key management over the API: an admin lists, creates and revokes the keys of their own tenant.

A key never grants more than its creator holds (`services.core.keys.grant_refusal`, 403), and it
is created together with its audit event or not at all (`services.app.audit.create_key_audited`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from schemas.admin import KeyCreateRequest, KeyCreateResponse, KeyInfo, KeyListResponse
from services.api.deps import Admin, Keys, State
from services.api.problems import ApiProblem
from services.app.audit import create_key_audited, revoke_key_audited
from services.core.keys import grant_refusal
from services.errors import KeyRequestError, NotFound

router = APIRouter(tags=["admin"])


@router.get("/v1/admin/keys", operation_id="list_keys", response_model=KeyListResponse)
def list_keys(caller: Admin, store: Keys) -> KeyListResponse:
    return KeyListResponse(keys=[KeyInfo(**k.public()) for k in store.list(tenant=caller.tenant)])


@router.post("/v1/admin/keys", operation_id="create_key", response_model=KeyCreateResponse, status_code=201)
async def create_key(body: KeyCreateRequest, s: State, caller: Admin, store: Keys) -> KeyCreateResponse:
    refusal = grant_refusal(caller, caller.tenant, body.principal, body.groups, body.role, body.unrestricted)
    if refusal:
        raise ApiProblem(403, "Forbidden", refusal, "forbidden")
    expires_at = body.expires_at
    if body.expires_in_s is not None:
        expires_at = datetime.now(UTC) + timedelta(seconds=body.expires_in_s)
    key, token = await run_in_threadpool(
        create_key_audited, store, s.memory.event_log, caller.tenant, body.principal, body.role, caller.name,
        groups=body.groups, name=body.name, unrestricted=body.unrestricted, expires_at=expires_at)
    return KeyCreateResponse(key=KeyInfo(**key.public()), token=token)


@router.delete("/v1/admin/keys/{key_id}", operation_id="revoke_key", response_model=KeyInfo)
def revoke_key(key_id: str, s: State, caller: Admin, store: Keys) -> KeyInfo:
    try:
        key, _ = revoke_key_audited(store, s.memory.event_log, key_id, caller.name, tenant=caller.tenant)
    except KeyRequestError as exc:  # the only one revoke raises: no such key in this tenant
        raise NotFound(str(exc)) from None
    return KeyInfo(**key.public())

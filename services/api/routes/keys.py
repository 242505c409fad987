"""Key management over the API: an admin lists, creates and revokes the keys of their own tenant."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from schemas.admin import KeyCreateRequest, KeyCreateResponse, KeyInfo, KeyListResponse
from services.api.deps import Admin, Keys, State
from services.app.audit import record_admin_action
from services.errors import KeyRequestError, NotFound

router = APIRouter(tags=["admin"])


@router.get("/v1/admin/keys", operation_id="list_keys", response_model=KeyListResponse)
def list_keys(caller: Admin, store: Keys) -> KeyListResponse:
    return KeyListResponse(keys=[KeyInfo(**k.public()) for k in store.list(tenant=caller.tenant)])


@router.post("/v1/admin/keys", operation_id="create_key", response_model=KeyCreateResponse, status_code=201)
async def create_key(body: KeyCreateRequest, s: State, caller: Admin, store: Keys) -> KeyCreateResponse:
    key, token = await run_in_threadpool(store.create, caller.tenant, body.principal, body.role, caller.name,
                                         body.groups, body.name, body.unrestricted)
    record_admin_action(s.memory.event_log, caller.tenant, "key.created", caller.name, key.audit_details())
    return KeyCreateResponse(key=KeyInfo(**key.public()), token=token)


@router.delete("/v1/admin/keys/{key_id}", operation_id="revoke_key", response_model=KeyInfo)
def revoke_key(key_id: str, s: State, caller: Admin, store: Keys) -> KeyInfo:
    try:
        key = store.revoke(key_id, caller.name, tenant=caller.tenant)
    except KeyRequestError as exc:  # the only one revoke raises: no such key in this tenant
        raise NotFound(str(exc)) from None
    record_admin_action(s.memory.event_log, caller.tenant, "key.revoked", caller.name,
                        {"key_id": key.key_id, "principal": key.principal, "role": key.role})
    return KeyInfo(**key.public())

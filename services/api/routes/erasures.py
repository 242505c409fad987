"""Erasure over the API (docs/erasure.md): an admin erases one row, one source item or one
subject's documents of their tenant, with a reason; the answer lists exactly what was erased."""

from __future__ import annotations

from dataclasses import asdict

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from schemas.erasure import ErasureRequest, ErasureResponse
from services.api.deps import Admin, State
from services.app.erasure import erase

router = APIRouter(tags=["admin"])


@router.post("/v1/admin/erasures", operation_id="erase", response_model=ErasureResponse, status_code=201)
async def create_erasure(body: ErasureRequest, s: State, caller: Admin) -> ErasureResponse:
    result = await run_in_threadpool(
        erase, s.memory, caller.tenant, actor=caller.name, reason=body.reason, row_id=body.row_id,
        source_id=body.source_id, source=body.source, subject=body.subject, data_dir=s.settings.data_dir)
    return ErasureResponse(rows=len(result.row_ids), **asdict(result))

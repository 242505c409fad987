"""Backup and export admin routes.

`POST /v1/admin/projection-holds` holds this server's projector between two batches, so that
`orgmem backup --server` can copy the projections at one checkpoint while queries and ingests go
on; `DELETE .../{hold_id}` lets it go on and says whether the hold lasted (a hold lapses by itself).
The copy is made by the CLI, as the data folder's owner on this host: the API hands out no files.
`GET /v1/admin/export` streams the caller's tenant as JSONL, rows the caller may read only (audited).
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from schemas.backup import HoldReleased, HoldRequest, HoldResponse
from services.api.deps import Admin, State
from services.api.problems import ApiProblem
from services.app.export import audited_jsonl_chunks

router = APIRouter(prefix="/v1/admin", tags=["admin"])


def _holds(s):
    holds = getattr(s.parts, "holds", None)
    if holds is None:
        raise ApiProblem(409, "No projector here", "this server does not project its data folder (cluster "
                         "profile): back up Kafka and the stores with their own tools (docs/backup.md)", "conflict")
    return holds


@router.post("/projection-holds", operation_id="hold_projector", response_model=HoldResponse, status_code=201)
async def hold_projector(body: HoldRequest, s: State, caller: Admin) -> HoldResponse:
    hold = await run_in_threadpool(_holds(s).hold, body.seconds, caller.name, caller.tenant)
    return HoldResponse(hold_id=hold.hold_id, checkpoint=hold.checkpoint, log_head=hold.log_head,
                        expires_at=hold.expires_at, data_dir=hold.data_dir)


@router.delete("/projection-holds/{hold_id}", operation_id="release_projector", response_model=HoldReleased)
def release_projector(hold_id: str, s: State, caller: Admin) -> HoldReleased:
    return HoldReleased(hold_id=hold_id, held_throughout=_holds(s).release(hold_id))


@router.get("/export", operation_id="export_rows", response_class=StreamingResponse,
            responses={200: {"content": {"application/x-ndjson": {}}, "description": "one row per line"}})
def export_rows(s: State, caller: Admin, format: Literal["jsonl"] = Query("jsonl")) -> StreamingResponse:
    file = f"{caller.tenant}.jsonl"  # audited before the first byte, and when the stream ends
    return StreamingResponse(audited_jsonl_chunks(s.memory, caller.tenant, caller.readers, caller.name, file),
                             media_type="application/x-ndjson",
                             headers={"Content-Disposition": f'attachment; filename="{file}"'})

"""POST /v1/connectors/{kind}: run a connector over files under the caller's connector roots.

The roots are the tenant's (`connector_tenant_roots`, else `connector_roots`, else
`<data_dir>/inbox/<tenant>`); the data folder is never readable. A path named outside them is
refused (400); a link met inside them that leads out is a dead letter of the report. A run that
started always answers with its report: 200 when it finished, 503 with the report (`stopped` set)
when the log refused a batch part-way; what it appended stays, and a rerun reads the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from schemas.connectors import ConnectorRunRequest, ConnectorRunResponse
from services.api.deps import State, Writer
from services.app.connectors import (
    KnownSources,
    check_under_roots,
    guard_for,
    run_connector,
)

router = APIRouter(tags=["connectors"])


@router.post("/v1/connectors/{kind}", operation_id="run_connector", response_model=ConnectorRunResponse,
             responses={503: {"model": ConnectorRunResponse, "description": "the run stopped part-way"}})
async def run(kind: Literal["email", "tickets", "meetings"], body: ConnectorRunRequest, s: State,
              caller: Writer) -> ConnectorRunResponse | JSONResponse:
    settings = s.settings
    guard = guard_for(settings, caller.tenant)
    paths = check_under_roots(body.paths, guard)
    options: dict = {"acl_from_participants": body.acl_from_participants}
    if kind == "meetings":
        options["date"] = body.date
        options["formats"] = body.formats
    if kind == "tickets":
        options["format"] = body.format
    memory = s.memory

    def stored(row_ids):
        return {r for r in row_ids if memory.stored_row(r) is not None}

    def run_it():
        # Known sources: the row store up to its checkpoint, the log after it (the indexer may lag).
        known = KnownSources(memory.event_log, caller.tenant, stored, after=memory.checkpoint())
        return run_connector(kind, paths, memory.event_log, Path(settings.data_dir), caller,
                             guard=guard, known=known, **options)

    report, position = await run_in_threadpool(run_it)
    s.indexer.wake()
    data = report.to_dict()
    answer = ConnectorRunResponse(
        connector=kind, documents=data["documents"], items_seen=data["items_seen"], unchanged=data["unchanged"],
        dead_letters=data["dead_letters"], already_known=data["already_known"], known_items=data["known_items"],
        stopped=data["stopped"], log_position=position)
    if answer.stopped:
        return JSONResponse(answer.model_dump(mode="json"), status_code=503)
    return answer

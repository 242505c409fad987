"""POST /v1/connectors/{kind}: run a connector over files under a configured connector root."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from fastapi import APIRouter
from fastapi.concurrency import run_in_threadpool

from schemas.connectors import ConnectorRunRequest, ConnectorRunResponse
from services.api.deps import State, Writer
from services.app.connectors import check_under_roots, run_connector

router = APIRouter(tags=["connectors"])


@router.post("/v1/connectors/{kind}", operation_id="run_connector", response_model=ConnectorRunResponse)
async def run(kind: Literal["email", "tickets", "meetings"], body: ConnectorRunRequest, s: State,
              caller: Writer) -> ConnectorRunResponse:
    settings = s.settings
    roots = settings.connector_roots or [Path(settings.data_dir) / "inbox"]
    paths = check_under_roots(body.paths, roots)
    options: dict = {"acl_from_participants": body.acl_from_participants}
    if kind == "meetings":
        options["date"] = body.date
    if kind == "tickets":
        options["format"] = body.format
    report, position = await run_in_threadpool(
        run_connector, kind, paths, s.memory.event_log, Path(settings.data_dir), caller, **options)
    s.indexer.wake()
    data = report.to_dict()
    return ConnectorRunResponse(connector=kind, documents=data["documents"], items_seen=data["items_seen"],
                                unchanged=data["unchanged"], dead_letters=data["dead_letters"], log_position=position)

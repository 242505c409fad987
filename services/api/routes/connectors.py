"""POST /v1/connectors/{kind}: run a connector over files under a configured connector root."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import BaseModel, ConfigDict, Field

from services.api.auth import require_role
from services.app.connectors import check_under_roots, run_connector
from services.core.caller import Caller

router = APIRouter(tags=["connectors"])
Writer = Annotated[Caller, Depends(require_role("writer"))]


class ConnectorRunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    paths: list[str] = Field(min_length=1, max_length=1000)
    acl_from_participants: bool = False
    date: str | None = Field(default=None, description="meetings: the date when a file carries none")
    format: Literal["auto", "jira", "github"] = "auto"


class ConnectorRunResponse(BaseModel):
    connector: str
    documents: int
    items_seen: int
    unchanged: int
    dead_letters: list[dict]
    log_position: int


@router.post("/v1/connectors/{kind}", operation_id="run_connector", response_model=ConnectorRunResponse)
async def run(kind: Literal["email", "tickets", "meetings"], body: ConnectorRunRequest, request: Request,
              caller: Writer) -> ConnectorRunResponse:
    state = request.app.state.orgmem
    settings = state.settings
    roots = settings.connector_roots or [Path(settings.data_dir) / "inbox"]
    paths = check_under_roots(body.paths, roots)
    options: dict = {"acl_from_participants": body.acl_from_participants}
    if kind == "meetings":
        options["date"] = body.date
    if kind == "tickets":
        options["format"] = body.format
    report, position = await run_in_threadpool(
        run_connector, kind, paths, state.memory.log, Path(settings.data_dir), caller, **options)
    state.indexer.wake()
    data = report.to_dict()
    return ConnectorRunResponse(connector=kind, documents=data["documents"], items_seen=data["items_seen"],
                                unchanged=data["unchanged"], dead_letters=data["dead_letters"], log_position=position)

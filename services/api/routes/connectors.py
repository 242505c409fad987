"""POST /v1/connectors/{kind}: run a connector over files under the caller's connector roots.

The roots are the tenant's (`connector_tenant_roots`, else `connector_roots`, else
`<data_dir>/inbox/<tenant>`); the data folder is never readable. A path named outside them is
refused (400); a link met inside them that leads out is a dead letter of the report. A run that
started always answers with its report: 200 when it finished, 503 with the report (`stopped` set)
when the log refused a batch part-way; what it appended stays, and a rerun reads the rest.

GET /v1/connectors/dead-letters: the items the caller's tenant's runs could not read (admin only;
what `orgmem connect dead-letters --tenant` shows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from fastapi import APIRouter, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from schemas.connectors import (
    ConnectorRunRequest,
    ConnectorRunResponse,
    DeadLettersResponse,
    DeadLetterView,
)
from services.api.deps import Admin, State, Writer
from services.api.problems import ApiProblem, invalid_request
from services.app.connectors import (
    KnownSources,
    check_under_roots,
    erase_removed,
    guard_for,
    run_connector,
)
from services.connectors.access import AccessMap
from services.connectors.base import dead_letter_records
from services.connectors.sources import SOURCES, default_policy
from services.errors import Invalid

router = APIRouter(tags=["connectors"])
# The file connectors and every contract source (Slack, Teams, ...), by name.
Kind = Literal[("email", "tickets", "meetings", *SOURCES)]


@router.get("/v1/connectors/dead-letters", operation_id="list_dead_letters", response_model=DeadLettersResponse)
def dead_letters(s: State, caller: Admin, limit: int = Query(default=200, ge=1, le=1000)) -> DeadLettersResponse:
    if caller.readers is not None:
        # A reason may quote the item it could not read, which no access list has vetted yet.
        raise ApiProblem(403, "Forbidden", "dead letters may quote any item of the tenant: this route needs an "
                         "unrestricted admin key", "forbidden")
    # Only the caller's tenant's: never the legacy lines that name no tenant (the operator's CLI shows those).
    letters = [letter for _, letter in dead_letter_records(Path(s.settings.data_dir), caller.tenant)]
    newest = letters[::-1][:limit]
    return DeadLettersResponse(dead_letters=[DeadLetterView(connector=d.connector, path=d.path, reason=d.reason, at=d.at)
                                             for d in newest], total=len(letters))


@router.post("/v1/connectors/{kind}", operation_id="run_connector", response_model=ConnectorRunResponse,
             responses={503: {"model": ConnectorRunResponse, "description": "the run stopped part-way"}})
async def run(kind: Kind, body: ConnectorRunRequest, s: State,
              caller: Writer) -> ConnectorRunResponse | JSONResponse:
    settings = s.settings
    guard = guard_for(settings, caller.tenant)
    paths = check_under_roots(body.paths, guard)
    options: dict = {"acl_from_participants": body.acl_from_participants}
    erasing = False
    if kind in SOURCES:
        policy = body.deletions or settings.connector_deletions.get(kind) or default_policy(kind)
        # Erasure destroys keys: only an unrestricted admin may (as POST /v1/admin/erasures); a
        # writer's run marks what the source deleted, reversibly, for an admin to erase.
        erasing = policy == "erase" and caller.role == "admin" and caller.readers is None
        try:  # named by its field, as a model error is: the map is the request's, not the server's
            access = AccessMap.from_dict(body.access_map, "access_map")
        except Invalid as exc:
            raise invalid_request(str(exc)) from None
        options |= {"access": access, "absence": not body.partial,
                    "deletions": "erase" if erasing else "mark"}
        options.pop("acl_from_participants")
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
        known = KnownSources(memory.event_log, caller.tenant, stored, after=memory.checkpoint(memory.lane_for(caller.tenant)))
        return run_connector(kind, paths, memory.event_log, Path(settings.data_dir), caller,
                             guard=guard, known=known, **options)

    report, position = await run_in_threadpool(run_it)
    s.indexer.wake()
    if erasing and any(r.get("applied") == "pending" for r in report.removed):
        await run_in_threadpool(erase_removed, memory, caller.tenant, report, caller.name, Path(settings.data_dir))
    elif kind in SOURCES and body.deletions == "erase" and not erasing and report.removed:
        report.notes.append("the removed versions were archived, not erased: erasing needs an unrestricted admin key")
    data = report.to_dict()
    answer = ConnectorRunResponse(
        connector=kind, documents=data["documents"], items_seen=data["items_seen"], unchanged=data["unchanged"],
        dead_letters=data["dead_letters"], already_known=data["already_known"], known_items=data["known_items"],
        stopped=data["stopped"], log_position=position, skipped=data["skipped"], superseded=len(data["superseded"]),
        removed=data["removed"], unmapped=data["unmapped"], notes=data["notes"])
    if answer.stopped:
        return JSONResponse(answer.model_dump(mode="json"), status_code=503)
    return answer

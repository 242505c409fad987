"""Admin routes for maintenance: start consolidation and MemRefine runs, list runs and the
decisions of one, revert one.

Runs execute on the profile's task runner (a thread of the embedded server, or the Celery
workers of the cluster); a POST answers at once with the run id and status "queued", and GET
shows status and progress while it runs. An admin acts on the tenant of their own credentials only.
"""

from __future__ import annotations

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse

from schemas.admin import (
    ConsolidateRequest,
    RefineRequest,
    RunAccepted,
    RunDecision,
    RunDecisionsResponse,
    RunsResponse,
    RunView,
)
from services.api.deps import Admin, Maintenance, Runner
from services.app.task_runner import make_budget

router = APIRouter(prefix="/v1/admin/maintenance", tags=["maintenance"])


def _accepted(run_id: str, job: str, reverts: str | None = None) -> JSONResponse:
    body = RunAccepted(run_id=run_id, job=job, reverts=reverts)
    return JSONResponse(body.model_dump(), status_code=202, headers={"Location": f"{router.prefix}/runs/{run_id}"})


@router.post("/consolidate", operation_id="start_consolidation", status_code=202, response_model=RunAccepted)
def start_consolidation(body: ConsolidateRequest, caller: Admin, tasks: Runner) -> JSONResponse:
    return _accepted(tasks.start("consolidate", caller.tenant, body.model_dump(), caller.name), "consolidate")


@router.post("/refine", operation_id="start_refine", status_code=202, response_model=RunAccepted)
def start_refine(body: RefineRequest, caller: Admin, tasks: Runner) -> JSONResponse:
    make_budget(body.budget_fraction, body.budget_bytes)  # a bad budget is refused now, not in the background
    return _accepted(tasks.start("refine", caller.tenant, body.model_dump(), caller.name), "refine")


@router.get("/runs", operation_id="list_maintenance_runs", response_model=RunsResponse)
def list_runs(caller: Admin, service: Maintenance) -> RunsResponse:
    return RunsResponse(runs=[RunView(**run.view()) for run in service.runs(caller.tenant)])


@router.get("/runs/{run_id}", operation_id="get_maintenance_run", response_model=RunView)
def get_run(run_id: str, caller: Admin, service: Maintenance) -> RunView:
    return RunView(**service.run(run_id, caller.tenant).view())


_CHANGES = {"row_superseded": "superseded", "row_archived": "archived", "row_derived": "derived",
            "row_restored": "restored"}


@router.get("/runs/{run_id}/decisions", operation_id="list_maintenance_run_decisions",
            response_model=RunDecisionsResponse)
def list_decisions(run_id: str, caller: Admin, service: Maintenance,
                   limit: int = Query(default=500, ge=1, le=5000)) -> RunDecisionsResponse:
    run = service.run(run_id, caller.tenant)  # 404 for another tenant's run
    decisions, total = [], 0
    for event in service.ledger.run_events(run):
        total += 1
        if len(decisions) < limit:
            decisions.append(RunDecision(change=_CHANGES[event.type], row_id=event.row_id,
                                         superseded_by=getattr(event, "superseded_by", None),
                                         sources=getattr(event, "sources", []), reason=event.reason))
    return RunDecisionsResponse(run_id=run_id, decisions=decisions, total=total)


@router.post("/runs/{run_id}/revert", operation_id="revert_maintenance_run", status_code=202, response_model=RunAccepted)
def revert_run(run_id: str, caller: Admin, service: Maintenance, tasks: Runner) -> JSONResponse:
    service.check_revertible(run_id, caller.tenant)  # 404/409 now, not in the background
    revert_id = tasks.start("revert", caller.tenant, {"reverts": run_id}, caller.name)
    return _accepted(revert_id, "revert", reverts=run_id)

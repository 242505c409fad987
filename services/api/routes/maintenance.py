"""Admin routes for maintenance: start consolidation and MemRefine runs, list runs, revert one.

Runs execute on the embedded server's in-process runner (one background thread); a POST answers
at once with the run id and status "queued", and GET shows status and progress while it runs.
An admin acts on the tenant of their own credentials only.
"""

from __future__ import annotations

import threading
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.api import problems
from services.api.auth import require_role
from services.app.maintenance import MaintenanceService, RunConflict
from services.core.caller import Caller
from services.core.maintenance.consolidation import DEFAULT_TAU
from workers.maintenance.jobs import InProcessRunner, judge_for, make_budget

router = APIRouter(prefix="/v1/admin/maintenance", tags=["maintenance"])
Admin = Annotated[Caller, Depends(require_role("admin"))]
_INIT = threading.Lock()


class ConsolidateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tau: float = Field(default=DEFAULT_TAU, gt=0.0, le=1.0, description="Cosine to a group's first row.")
    max_calls: int | None = Field(default=None, ge=0, description="At most this many groups judged.")


class RefineRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    budget_fraction: float | None = Field(default=None, gt=0.0, le=1.0,
                                          description="Target size as a fraction of the active size now.")
    budget_bytes: int | None = Field(default=None, ge=0, description="Target size in bytes (JSON of the rows).")
    max_calls: int | None = Field(default=None, ge=0, description="At most this many pairs judged.")
    min_similarity: float = Field(default=0.0, ge=-1.0, le=1.0, description="Pairs below are never proposed.")
    use_cache: bool = Field(default=True, description="Skip pairs an earlier run with this judge preserved.")

    @model_validator(mode="after")
    def _one_budget(self) -> RefineRequest:
        if (self.budget_fraction is None) == (self.budget_bytes is None):
            raise ValueError("budget_fraction, budget_bytes: give exactly one")
        return self


class RunAccepted(BaseModel):
    run_id: str
    job: str
    status: Literal["queued"] = "queued"
    reverts: str | None = None


class RunView(BaseModel):
    run_id: str
    job: str
    tenant: str
    status: Literal["queued", "running", "finished", "failed", "reverted"]
    params: dict[str, Any]
    judge: str
    requested_by: str
    started_at: str | None
    finished_at: str | None
    started_position: int | None
    finished_position: int | None
    summary: dict[str, Any]
    progress: dict[str, Any]
    events: int = Field(description="Decision events the run appended.")
    reverted_by: str | None


class RunsResponse(BaseModel):
    runs: list[RunView]


def runner(request: Request) -> InProcessRunner:
    """The app's maintenance runner, made on first use (the app object is not ours to extend)."""
    app_state = request.app.state
    with _INIT:
        found = getattr(app_state, "maintenance_runner", None)
        if found is None:
            core = app_state.orgmem
            service = MaintenanceService(core.memory, judge_for(core.settings), indexer=core.indexer)
            found = app_state.maintenance_runner = InProcessRunner(service)
    return found


Runner = Annotated[InProcessRunner, Depends(runner)]


def _accepted(run_id: str, job: str, reverts: str | None = None) -> JSONResponse:
    body = RunAccepted(run_id=run_id, job=job, reverts=reverts)
    return JSONResponse(body.model_dump(), status_code=202, headers={"Location": f"{router.prefix}/runs/{run_id}"})


@router.post("/consolidate", operation_id="start_consolidation", status_code=202, response_model=RunAccepted)
def start_consolidation(body: ConsolidateRequest, caller: Admin, tasks: Runner) -> JSONResponse:
    service, tenant = tasks.service, caller.tenant
    run_id = tasks.submit("consolidate", tenant, body.model_dump(), caller.name,
                          lambda rid, progress: service.consolidate(tenant, body.tau, run_id=rid, requested_by=caller.name,
                                                                    max_calls=body.max_calls, progress=progress))
    return _accepted(run_id, "consolidate")


@router.post("/refine", operation_id="start_refine", status_code=202, response_model=RunAccepted)
def start_refine(body: RefineRequest, caller: Admin, tasks: Runner) -> JSONResponse:
    service, tenant = tasks.service, caller.tenant
    budget = make_budget(body.budget_fraction, body.budget_bytes)
    run_id = tasks.submit("refine", tenant, body.model_dump(), caller.name,
                          lambda rid, progress: service.refine(tenant, budget, run_id=rid, requested_by=caller.name,
                                                               max_calls=body.max_calls, min_similarity=body.min_similarity,
                                                               use_cache=body.use_cache, progress=progress))
    return _accepted(run_id, "refine")


@router.get("/runs", operation_id="list_maintenance_runs", response_model=RunsResponse)
def list_runs(caller: Admin, tasks: Runner) -> RunsResponse:
    return RunsResponse(runs=[RunView(**run.view()) for run in tasks.service.runs(caller.tenant)])


@router.get("/runs/{run_id}", operation_id="get_maintenance_run", response_model=RunView)
def get_run(run_id: str, caller: Admin, tasks: Runner) -> RunView:
    return RunView(**tasks.service.run(run_id, caller.tenant).view())


@router.post("/runs/{run_id}/revert", operation_id="revert_maintenance_run", status_code=202, response_model=RunAccepted)
def revert_run(run_id: str, caller: Admin, tasks: Runner) -> JSONResponse:
    service = tasks.service
    try:
        service.check_revertible(run_id, caller.tenant)  # answer 404/409 now, not in the background
    except RunConflict as exc:
        return problems.problem(409, "Run cannot be reverted", str(exc), "conflict", run_id=run_id)
    revert_id = tasks.submit("revert", caller.tenant, {"reverts": run_id}, caller.name,
                             lambda rid, progress: service.revert(run_id, requested_by=caller.name, tenant=caller.tenant,
                                                                  revert_run_id=rid, progress=progress))
    return _accepted(revert_id, "revert", reverts=run_id)

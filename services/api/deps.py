"""The dependencies routes declare, as `Annotated` aliases: the server state, the caller and its
role, and the services the admin routes use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from services.api.auth import CurrentCaller, require_role
from services.api.problems import ApiProblem
from services.app.maintenance import MaintenanceService
from services.core.caller import Caller
from services.ports import KeyStore, TaskRunner

if TYPE_CHECKING:
    from services.api.app import AppState
else:  # app.py imports the routes, which import this module: FastAPI needs only the dependency
    AppState = object

__all__ = ["Admin", "CurrentCaller", "Keys", "Maintenance", "Runner", "State", "Writer", "state"]


def state(request: Request) -> AppState:
    return request.app.state.orgmem


def maintenance(request: Request) -> MaintenanceService:
    return request.app.state.orgmem.maintenance


def runner(request: Request) -> TaskRunner:
    return request.app.state.orgmem.runner


def keys(request: Request) -> KeyStore:
    store = request.app.state.orgmem.auth.keys
    if store is None:
        raise ApiProblem(503, "Keys unavailable", "this server has no key store", "dependency-unavailable")
    return store


State = Annotated[AppState, Depends(state)]
Writer = Annotated[Caller, Depends(require_role("writer"))]
Admin = Annotated[Caller, Depends(require_role("admin"))]
Maintenance = Annotated[MaintenanceService, Depends(maintenance)]
Runner = Annotated[TaskRunner, Depends(runner)]
Keys = Annotated[KeyStore, Depends(keys)]

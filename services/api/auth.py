"""Who is calling: the Caller of each request, and role checks for routes.

Until authentication is configured, every request is the embedded profile's single admin of the
default tenant. Routes depend only on `CurrentCaller` and `require_role`, so authentication can
change what stands behind them without touching a route.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request

from services.memory import Caller

ROLE_RANK = {"reader": 0, "writer": 1, "admin": 2}


def current_caller(request: Request) -> Caller:
    return Caller()


CurrentCaller = Annotated[Caller, Depends(current_caller)]


def require_role(role: str):
    """A dependency that admits callers with at least `role` (reader < writer < admin)."""

    def check(caller: CurrentCaller) -> Caller:
        if ROLE_RANK.get(caller.role, -1) < ROLE_RANK[role]:
            raise HTTPException(status_code=403, detail=f"this route needs the {role} role")
        return caller

    return check

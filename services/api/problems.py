"""RFC 9457 problem details for every error the API returns; never a stack trace."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.errors import BackendUnavailable, NotFound, NotReady, OrgmemError

log = logging.getLogger(__name__)

PROBLEM_TYPE = "https://orgmem.dev/problems/"


def problem(status: int, title: str, detail: str, kind: str, headers: dict | None = None, **extra) -> JSONResponse:
    body = {"type": PROBLEM_TYPE + kind, "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type="application/problem+json", headers=headers)


def _field_errors(exc: RequestValidationError) -> list[dict]:
    errors = []
    for error in exc.errors():
        location = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        errors.append({"field": location or "body", "problem": error.get("msg", "invalid")})
    return errors


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError):
        errors = _field_errors(exc)
        detail = "; ".join(f"{e['field']}: {e['problem']}" for e in errors[:10])
        return problem(422, "Invalid request", detail, "invalid-request", errors=errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException):
        return problem(exc.status_code, "Request failed", str(exc.detail), f"http-{exc.status_code}")

    @app.exception_handler(NotFound)
    async def _not_found(_: Request, exc: NotFound):
        return problem(404, "Not found", str(exc), "not-found")

    @app.exception_handler(NotReady)
    async def _not_ready(_: Request, exc: NotReady):
        return problem(503, "Not indexed yet", str(exc), "not-indexed", headers={"Retry-After": "1"}, retry_after_s=1)

    @app.exception_handler(BackendUnavailable)
    async def _unavailable(_: Request, exc: BackendUnavailable):
        return problem(503, "Dependency unavailable", str(exc), "dependency-unavailable", component=exc.component)

    @app.exception_handler(OrgmemError)
    async def _orgmem(_: Request, exc: OrgmemError):
        return problem(400, "Request cannot be served", str(exc), "bad-request")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return problem(500, "Internal error", "the server failed to handle this request; see its log", "internal")

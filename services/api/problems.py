"""RFC 9457 problem details for every error the API returns, from one table; never a stack trace.

Routes and dependencies raise; `ERRORS` says how each exception class answers, and one handler
(`answer`) renders it. The most specific class in an exception's MRO wins.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.errors import (
    AnswerFailed,
    AnswerNotConfigured,
    BackendUnavailable,
    Conflict,
    Gone,
    Invalid,
    KeyRequestError,
    NotFound,
    NotReady,
    OrgmemError,
    RunConflict,
    StorageFull,
    TooLarge,
)

log = logging.getLogger(__name__)

PROBLEM_TYPE = "https://orgmem.dev/problems/"


class ApiProblem(StarletteHTTPException):
    """An HTTP error with its own problem title, type and headers (WWW-Authenticate, Retry-After)."""

    def __init__(self, status: int, title: str, detail: str, kind: str, headers: dict[str, str] | None = None):
        super().__init__(status_code=status, detail=detail, headers=headers)
        self.title, self.kind = title, kind


def invalid_request(detail: str) -> ApiProblem:
    """A request that passed its model but not a server-side limit (422, like a model error)."""
    return ApiProblem(422, "Invalid request", detail, "invalid-request")


@dataclass(frozen=True)
class Rule:
    """How one exception class answers. `detail` and `extra` read the exception (and the request)."""

    status: int
    title: str
    kind: str
    headers: dict[str, str] = field(default_factory=dict)
    detail: Callable[[Exception], str] = str
    extra: Callable[[Exception, Request | None], dict] = lambda exc, request: {}


def _field_errors(exc: RequestValidationError) -> list[dict]:
    errors = []
    for error in exc.errors():
        location = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        errors.append({"field": location or "body", "problem": error.get("msg", "invalid")})
    return errors


def _validation_detail(exc: RequestValidationError) -> str:
    return "; ".join(f"{e['field']}: {e['problem']}" for e in _field_errors(exc)[:10])


def _path_run_id(_: Exception, request: Request | None) -> dict:
    # Only the revert route checks a run before queueing; its path names the run.
    run_id = request.path_params.get("run_id") if request is not None else None
    return {"run_id": run_id} if run_id else {}


BAD_REQUEST = Rule(400, "Request cannot be served", "bad-request")
INTERNAL = Rule(500, "Internal error", "internal", detail=lambda _: "the server failed to handle this request; see its log")

# The one map. A value is a Rule, or a function of the exception for classes that carry their own status.
ERRORS: dict[type[Exception], Rule | Callable[[Exception], Rule]] = {
    RequestValidationError: Rule(422, "Invalid request", "invalid-request", detail=_validation_detail,
                                 extra=lambda exc, _: {"errors": _field_errors(exc)}),
    ApiProblem: lambda exc: Rule(exc.status_code, exc.title, exc.kind, dict(exc.headers or {}),
                                 detail=lambda e: str(e.detail)),
    StarletteHTTPException: lambda exc: Rule(exc.status_code, "Request failed", f"http-{exc.status_code}",
                                             detail=lambda e: str(e.detail)),
    KeyRequestError: Rule(422, "Invalid request", "invalid-request"),  # a key request's fields, as a model error
    NotFound: Rule(404, "Not found", "not-found"),
    Gone: Rule(410, "Gone", "gone"),
    TooLarge: Rule(413, "Request too large", "too-large"),  # as the body-size guard answers
    RunConflict: Rule(409, "Run cannot be reverted", "conflict", extra=_path_run_id),
    Conflict: Rule(409, "Conflict", "conflict"),
    NotReady: Rule(503, "Not indexed yet", "not-indexed", {"Retry-After": "1"}, extra=lambda *_: {"retry_after_s": 1}),
    StorageFull: Rule(507, "Insufficient storage", "insufficient-storage", {"Retry-After": "30"},
                      extra=lambda exc, _: {"component": exc.component, "data_dir": exc.folder,
                                            "free_bytes": exc.free_bytes, "min_free_bytes": exc.floor_bytes}),
    BackendUnavailable: Rule(503, "Dependency unavailable", "dependency-unavailable",
                             extra=lambda exc, _: {"component": exc.component}),
    AnswerNotConfigured: Rule(501, "Not configured", "not-configured"),
    # The endpoint's failure, not the caller's: a gateway's statuses (504 when it did not answer in time).
    AnswerFailed: lambda exc: Rule(504 if exc.timed_out else 502, "Answer endpoint failed", "answer-failed"),
    Invalid: BAD_REQUEST,
    OrgmemError: BAD_REQUEST,  # storage failures are BackendUnavailable (503), translated by the adapters
}


def problem(status: int, title: str, detail: str, kind: str, headers: dict | None = None, **extra) -> JSONResponse:
    body = {"type": PROBLEM_TYPE + kind, "title": title, "status": status, "detail": detail, **extra}
    return JSONResponse(body, status_code=status, media_type="application/problem+json", headers=headers)


def rule_for(exc: Exception) -> Rule:
    for cls in type(exc).__mro__:
        entry = ERRORS.get(cls)
        if entry is not None:
            return entry if isinstance(entry, Rule) else entry(exc)
    return INTERNAL


def respond(exc: Exception, request: Request | None = None) -> JSONResponse:
    """The problem response of an exception; also for middleware, which runs outside the handlers."""
    rule = rule_for(exc)
    if rule is INTERNAL:
        method, path = (request.method, request.url.path) if request is not None else ("?", "?")
        log.error("unhandled error on %s %s", method, path, exc_info=exc)
    return problem(rule.status, rule.title, rule.detail(exc), rule.kind, headers=rule.headers or None,
                   **rule.extra(exc, request))


async def answer(request: Request, exc: Exception) -> JSONResponse:
    return respond(exc, request)


def install(app: FastAPI) -> None:
    for cls in (*ERRORS, Exception):  # Exception: Starlette's last resort, answered 500 from the same map
        app.add_exception_handler(cls, answer)

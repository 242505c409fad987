"""What the client raises: `OrgmemError`, and below it one class per status family and per status
a caller may want to handle on its own. An error from the server carries its RFC 9457 problem
details (`problem`: type, title, status, detail, the fields at fault); a call that got no answer
at all raises `ConnectionFailed`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
from pydantic import BaseModel, ConfigDict, ValidationError

if TYPE_CHECKING:
    from schemas.connectors import ConnectorRunResponse


class FieldProblem(BaseModel):
    field: str
    problem: str


class Problem(BaseModel):
    """RFC 9457 problem details as the server sends them; members beyond these (a `component`,
    `retry_after_s`, `run_id`) are kept and readable as attributes or in `model_extra`."""

    model_config = ConfigDict(extra="allow")

    type: str = "about:blank"
    title: str = ""
    status: int | None = None
    detail: str = ""
    errors: list[FieldProblem] = []


class OrgmemError(Exception):
    """Every failure of a call. `status` is None when no answer came."""

    status: int | None = None

    def __init__(self, message: str, problem: Problem | None = None, status: int | None = None,
                 retry_after_s: float | None = None):
        super().__init__(message)
        self.problem = problem or Problem(status=status, detail=message)
        self.status = status if status is not None else self.problem.status
        self.retry_after_s = retry_after_s  # what the server's Retry-After asked for, if it sent one

    @property
    def type(self) -> str:
        return self.problem.type

    @property
    def title(self) -> str:
        return self.problem.title

    @property
    def detail(self) -> str:
        return self.problem.detail

    @property
    def errors(self) -> list[FieldProblem]:
        return self.problem.errors

    @property
    def fields(self) -> list[str]:
        """The request fields the server named as wrong (422)."""
        return [error.field for error in self.problem.errors]


class ConnectionFailed(OrgmemError):
    """No answer: the connection was refused, broke or timed out (after any retries)."""


class ClientError(OrgmemError):
    """4xx: the request was refused; sending it again unchanged gives the same answer."""


class BadRequest(ClientError):
    status = 400


class Unauthorized(ClientError):
    status = 401


class Forbidden(ClientError):
    status = 403


class NotFound(ClientError):
    status = 404


class Conflict(ClientError):
    status = 409


class Gone(ClientError):
    """The row was erased (an administrator's erasure): it will not come back."""

    status = 410


class PayloadTooLarge(ClientError):
    status = 413


class InvalidRequest(ClientError):
    status = 422


class RateLimited(ClientError):
    status = 429


class ServerError(OrgmemError):
    """5xx: the server could not serve the request now."""


class Unavailable(ServerError):
    status = 503


class InsufficientStorage(ServerError):
    status = 507


class ConnectorStopped(Unavailable):
    """A connector run stopped part-way (503): `report` says what went in; a rerun reads the rest."""

    def __init__(self, report: ConnectorRunResponse):
        super().__init__(f"503 connector run stopped: {report.stopped}", status=503)
        self.report = report


BY_STATUS: dict[int, type[OrgmemError]] = {cls.status: cls for cls in (
    BadRequest, Unauthorized, Forbidden, NotFound, Conflict, Gone, PayloadTooLarge, InvalidRequest, RateLimited,
    Unavailable, InsufficientStorage)}


def problem_of(response: httpx.Response) -> Problem:
    """The problem details of an error answer; one that sent none (a proxy's page) gets a problem
    made of its status line and the start of its body."""
    try:
        return Problem.model_validate_json(response.content)
    except ValidationError:
        return Problem(status=response.status_code, title=response.reason_phrase, detail=response.text[:500])


def error_for(response: httpx.Response, retry_after_s: float | None = None) -> OrgmemError:
    status = response.status_code
    problem = problem_of(response)
    family = ServerError if status >= 500 else ClientError
    cls = BY_STATUS.get(status, family)
    title = problem.title or response.reason_phrase
    message = f"{status} {title}: {problem.detail}" if problem.detail else f"{status} {title}"
    return cls(message, problem, status, retry_after_s)

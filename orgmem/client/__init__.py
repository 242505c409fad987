"""A Python client for orgmem's HTTP API, blocking (`Client`) or asyncio (`AsyncClient`).

    from orgmem.client import Client

    with Client("http://127.0.0.1:8080", api_key="om_...") as client:
        written = client.ingest([{"text": "Remote work: 3 days a week.", "author": "maria", "date": "2025-06-16"}])
        answer = client.query("remote work policy", as_of="2025-07-01T00:00:00Z")  # sees the write above

Requests and answers are the pydantic models of `schemas`; the client imports nothing of the
server (`services`), only `schemas`, httpx and pydantic.
"""

from orgmem.client.aio import AsyncClient
from orgmem.client.errors import (
    BadRequest,
    ClientError,
    Conflict,
    ConnectionFailed,
    ConnectorStopped,
    FieldProblem,
    Forbidden,
    Gone,
    InsufficientStorage,
    InvalidRequest,
    NotFound,
    OrgmemError,
    PayloadTooLarge,
    Problem,
    RateLimited,
    ServerError,
    Unauthorized,
    Unavailable,
)
from orgmem.client.retry import NO_RETRIES, RetryPolicy
from orgmem.client.sync import Client

__all__ = [
    "NO_RETRIES", "AsyncClient", "BadRequest", "Client", "ClientError", "Conflict", "ConnectionFailed",
    "ConnectorStopped", "FieldProblem", "Forbidden", "Gone", "InsufficientStorage", "InvalidRequest", "NotFound",
    "OrgmemError", "PayloadTooLarge", "Problem", "RateLimited", "RetryPolicy", "ServerError", "Unauthorized",
    "Unavailable",
]

"""Every route of the HTTP API as data: a `Call` says how to send one request (method, path, body
model, query parameters), how to read its answer into a schemas model, whether it may be sent
again after a lost connection, and what log position a write reached. The sync and the async
client build their requests here and only send them differently."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel

from orgmem.client.errors import ConnectorStopped
from schemas.admin import (
    ConsolidateRequest,
    KeyCreateRequest,
    KeyCreateResponse,
    KeyInfo,
    KeyListResponse,
    RefineRequest,
    RunAccepted,
    RunDecisionsResponse,
    RunsResponse,
    RunView,
)
from schemas.api import (
    IngestRequest,
    IngestResponse,
    QueryRequest,
    QueryResponse,
    RowResponse,
    StatsResponse,
    ThreadResponse,
)
from schemas.backup import HoldReleased, HoldRequest, HoldResponse
from schemas.connectors import (
    ConnectorRunRequest,
    ConnectorRunResponse,
    DeadLettersResponse,
)
from schemas.documents import DocumentIn
from schemas.erasure import ErasureRequest, ErasureResponse
from schemas.rows import Row, RowChange

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
ConnectorKind = Literal["email", "tickets", "meetings"]
MAINTENANCE = "/v1/admin/maintenance"


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    body: BaseModel | None = None
    params: Mapping[str, Any] | None = None
    idempotent: bool = False  # sending it twice does what sending it once does: retried after a lost connection
    reads_writes: bool = False  # a query: waits for the client's last write unless the body sets `after`
    accept: frozenset[int] = frozenset()  # error statuses whose body is the answer, not a problem
    written: Callable[[T], int | None] | None = None  # the log position a write reached
    check: Callable[[T], None] | None = None  # raises for an accepted answer that reports a failure


def model(cls: type[M]) -> Callable[[httpx.Response], M]:
    return lambda response: cls.model_validate_json(response.content)


def _json(response: httpx.Response) -> dict[str, Any]:
    return response.json()


def _segment(value: str) -> str:
    return quote(value, safe="")


def _limit(limit: int | None) -> dict[str, int] | None:
    return {"limit": limit} if limit is not None else None


def _stopped(report: ConnectorRunResponse) -> None:
    if report.stopped:
        raise ConnectorStopped(report)


def health() -> Call[dict[str, Any]]:
    return Call("GET", "/healthz", _json, idempotent=True)


def ready() -> Call[dict[str, Any]]:
    # 503 is an answer here: the body says why the server is not ready (starting, lagging, ...).
    return Call("GET", "/readyz", _json, idempotent=True, accept=frozenset({503}))


def metrics() -> Call[str]:
    return Call("GET", "/metrics", lambda response: response.text, idempotent=True)


def stats() -> Call[StatsResponse]:
    return Call("GET", "/v1/stats", model(StatsResponse), idempotent=True)


def ingest(documents: Iterable[DocumentIn | Mapping[str, Any]]) -> Call[IngestResponse]:
    body = IngestRequest(documents=[d if isinstance(d, DocumentIn) else DocumentIn.model_validate(d)
                                    for d in documents])
    return Call("POST", "/v1/documents", model(IngestResponse), body, written=lambda r: r.position)


def query(q: str | QueryRequest, options: Mapping[str, Any]) -> Call[QueryResponse]:
    if isinstance(q, QueryRequest) and options:
        raise TypeError(f"query: give a QueryRequest or options, not both ({', '.join(options)})")
    body = q if isinstance(q, QueryRequest) else QueryRequest(q=q, **options)
    return Call("POST", "/v1/query", model(QueryResponse), body, idempotent=True, reads_writes=True)


def row(row_id: str) -> Call[RowResponse]:
    return Call("GET", f"/v1/rows/{_segment(row_id)}", model(RowResponse), idempotent=True)


def thread(thread_id: str, limit: int | None = None) -> Call[ThreadResponse]:
    # The route takes the rest of the path, so a thread id may hold '/'; everything else is escaped.
    return Call("GET", f"/v1/threads/{quote(thread_id, safe='/')}", model(ThreadResponse), params=_limit(limit),
                idempotent=True)


def run_connector(kind: ConnectorKind, paths: Iterable[str], options: Mapping[str, Any]) -> Call[ConnectorRunResponse]:
    body = ConnectorRunRequest(paths=list(paths), **options)
    return Call("POST", f"/v1/connectors/{_segment(kind)}", model(ConnectorRunResponse), body,
                accept=frozenset({503}), written=lambda r: r.log_position, check=_stopped)


def dead_letters(limit: int | None = None) -> Call[DeadLettersResponse]:
    return Call("GET", "/v1/connectors/dead-letters", model(DeadLettersResponse), params=_limit(limit),
                idempotent=True)


def list_keys() -> Call[KeyListResponse]:
    return Call("GET", "/v1/admin/keys", model(KeyListResponse), idempotent=True)


def create_key(principal: str, role: str, options: Mapping[str, Any]) -> Call[KeyCreateResponse]:
    body = KeyCreateRequest(principal=principal, role=role, **options)
    return Call("POST", "/v1/admin/keys", model(KeyCreateResponse), body)


def revoke_key(key_id: str) -> Call[KeyInfo]:
    return Call("DELETE", f"/v1/admin/keys/{_segment(key_id)}", model(KeyInfo))


def consolidate(options: Mapping[str, Any]) -> Call[RunAccepted]:
    return Call("POST", f"{MAINTENANCE}/consolidate", model(RunAccepted), ConsolidateRequest(**options))


def refine(options: Mapping[str, Any]) -> Call[RunAccepted]:
    return Call("POST", f"{MAINTENANCE}/refine", model(RunAccepted), RefineRequest(**options))


def runs() -> Call[RunsResponse]:
    return Call("GET", f"{MAINTENANCE}/runs", model(RunsResponse), idempotent=True)


def run(run_id: str) -> Call[RunView]:
    return Call("GET", f"{MAINTENANCE}/runs/{_segment(run_id)}", model(RunView), idempotent=True)


def run_decisions(run_id: str, limit: int | None = None) -> Call[RunDecisionsResponse]:
    return Call("GET", f"{MAINTENANCE}/runs/{_segment(run_id)}/decisions", model(RunDecisionsResponse),
                params=_limit(limit), idempotent=True)


def revert_run(run_id: str) -> Call[RunAccepted]:
    return Call("POST", f"{MAINTENANCE}/runs/{_segment(run_id)}/revert", model(RunAccepted))


def erase(reason: str, targets: Mapping[str, str | None]) -> Call[ErasureResponse]:
    body = ErasureRequest(reason=reason, **{name: value for name, value in targets.items() if value is not None})
    return Call("POST", "/v1/admin/erasures", model(ErasureResponse), body, written=lambda r: r.position)


def hold_projector(seconds: int | None = None) -> Call[HoldResponse]:
    body = HoldRequest() if seconds is None else HoldRequest(seconds=seconds)
    return Call("POST", "/v1/admin/projection-holds", model(HoldResponse), body)


def release_projector(hold_id: str) -> Call[HoldReleased]:
    return Call("DELETE", f"/v1/admin/projection-holds/{_segment(hold_id)}", model(HoldReleased))


def _export_records(response: httpx.Response) -> list[RowResponse]:
    records = []
    for line in response.text.splitlines():
        if line.strip():
            data = json.loads(line)
            history = [RowChange.model_validate(change) for change in data.pop("history", [])]
            records.append(RowResponse(row=Row.model_validate(data), history=history))
    return records


def export() -> Call[list[RowResponse]]:
    return Call("GET", "/v1/admin/export", _export_records, params={"format": "jsonl"}, idempotent=True)


@dataclass(frozen=True)
class Send:
    """One attempt of a call, ready for an httpx client's `request`."""

    method: str
    path: str
    json: Any = None
    params: Mapping[str, Any] | None = field(default=None)


@dataclass(frozen=True)
class Pause:
    """Wait this long before going on (a retry's backoff, a poll's interval)."""

    seconds: float

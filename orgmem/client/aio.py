"""The asyncio client: the same methods as `orgmem.client.Client`, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import httpx

from orgmem.client import calls
from orgmem.client.calls import ConnectorKind, Pause
from orgmem.client.retry import RetryPolicy
from orgmem.client.session import Flow, Session
from schemas.admin import (
    KeyCreateResponse,
    KeyInfo,
    KeyListResponse,
    RunAccepted,
    RunDecisionsResponse,
    RunsResponse,
    RunView,
)
from schemas.api import (
    IngestResponse,
    QueryRequest,
    QueryResponse,
    RowResponse,
    StatsResponse,
    ThreadResponse,
)
from schemas.backup import HoldReleased, HoldResponse
from schemas.connectors import ConnectorRunResponse, DeadLettersResponse
from schemas.documents import DocumentIn
from schemas.erasure import ErasureResponse

T = TypeVar("T")


class AsyncClient:
    """`async with AsyncClient("http://127.0.0.1:8080", api_key="om_...") as client:`. Queries
    wait for this client's last write (`read_your_writes`); 429 and 503 are retried by `retry`;
    failures raise `orgmem.client.OrgmemError`. `http_options` go to httpx.AsyncClient."""

    def __init__(self, base_url: str = "http://127.0.0.1:8080", api_key: str | None = None, *,
                 timeout: float = 60.0, retry: RetryPolicy | None = None, read_your_writes: bool = True,
                 **http_options: Any):
        self._session = Session(api_key, retry or RetryPolicy(), read_your_writes)
        self._http = httpx.AsyncClient(base_url=base_url, headers=self._session.headers, timeout=timeout, **http_options)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    @property
    def last_position(self) -> int | None:
        return self._session.last_position

    def forget_writes(self) -> None:
        """Stop waiting for the writes made so far."""
        self._session.forget()

    async def _run(self, flow: Flow[T]) -> T:
        try:
            step = next(flow)
            while True:
                if isinstance(step, Pause):
                    await asyncio.sleep(step.seconds)
                    step = flow.send(None)
                    continue
                try:
                    response = await self._http.request(step.method, step.path, json=step.json, params=step.params)
                except httpx.TransportError as exc:
                    step = flow.throw(exc)
                else:
                    step = flow.send(response)
        except StopIteration as done:
            return done.value

    async def _send(self, call: calls.Call[T]) -> T:
        return await self._run(self._session.exchange(call))

    # --- operations -----------------------------------------------------------------------------
    async def health(self) -> dict[str, Any]:
        return await self._send(calls.health())

    async def ready(self) -> dict[str, Any]:
        """The readiness report; a server that is not ready answers it too (`status` says why)."""
        return await self._send(calls.ready())

    async def metrics(self) -> str:
        return await self._send(calls.metrics())

    async def stats(self) -> StatsResponse:
        return await self._send(calls.stats())

    # --- memory -----------------------------------------------------------------------------------
    async def ingest(self, documents: Iterable[DocumentIn | Mapping[str, Any]]) -> IngestResponse:
        return await self._send(calls.ingest(documents))

    async def query(self, q: str | QueryRequest, **options: Any) -> QueryResponse:
        """`options` are QueryRequest's fields; `after=None` does not wait for this client's writes."""
        return await self._send(calls.query(q, options))

    async def row(self, row_id: str) -> RowResponse:
        return await self._send(calls.row(row_id))

    async def thread(self, thread_id: str, limit: int | None = None) -> ThreadResponse:
        """The thread's latest `limit` rows (the server's cap when None); `truncated` says if earlier ones exist."""
        return await self._send(calls.thread(thread_id, limit))

    # --- connectors -------------------------------------------------------------------------------
    async def run_connector(self, kind: ConnectorKind, paths: Iterable[str], **options: Any) -> ConnectorRunResponse:
        """Raises ConnectorStopped, with the report, when the run stopped part-way."""
        return await self._send(calls.run_connector(kind, paths, options))

    async def dead_letters(self, limit: int | None = None) -> DeadLettersResponse:
        return await self._send(calls.dead_letters(limit))

    # --- keys -------------------------------------------------------------------------------------
    async def list_keys(self) -> KeyListResponse:
        return await self._send(calls.list_keys())

    async def create_key(self, principal: str, role: str, **options: Any) -> KeyCreateResponse:
        return await self._send(calls.create_key(principal, role, options))

    async def revoke_key(self, key_id: str) -> KeyInfo:
        return await self._send(calls.revoke_key(key_id))

    # --- erasure, backup and export ---------------------------------------------------------------
    async def erase(self, reason: str, *, row_id: str | None = None, source_id: str | None = None,
                    source: str | None = None, subject: str | None = None) -> ErasureResponse:
        """Erase one row, one source item or one subject's documents (exactly one of them)."""
        return await self._send(calls.erase(reason, {"row_id": row_id, "source_id": source_id, "source": source,
                                                     "subject": subject}))

    async def hold_projector(self, seconds: int | None = None) -> HoldResponse:
        return await self._send(calls.hold_projector(seconds))

    async def release_projector(self, hold_id: str) -> HoldReleased:
        return await self._send(calls.release_projector(hold_id))

    async def export(self) -> list[RowResponse]:
        """Every row of the tenant that the caller may read, with its history, read whole into memory
        (`orgmem export` writes a large tenant to a file instead)."""
        return await self._send(calls.export())

    # --- maintenance ------------------------------------------------------------------------------
    async def consolidate(self, **options: Any) -> RunAccepted:
        return await self._send(calls.consolidate(options))

    async def refine(self, **options: Any) -> RunAccepted:
        return await self._send(calls.refine(options))

    async def runs(self) -> RunsResponse:
        return await self._send(calls.runs())

    async def run(self, run_id: str) -> RunView:
        return await self._send(calls.run(run_id))

    async def run_decisions(self, run_id: str, limit: int | None = None) -> RunDecisionsResponse:
        return await self._send(calls.run_decisions(run_id, limit))

    async def revert_run(self, run_id: str) -> RunAccepted:
        return await self._send(calls.revert_run(run_id))

    async def wait_for_run(self, run_id: str, timeout_s: float = 300.0, poll_s: float = 0.2) -> RunView:
        return await self._run(self._session.wait_for_run(run_id, timeout_s, poll_s))

"""The blocking client: every route of the HTTP API as a method that returns a schemas model."""

from __future__ import annotations

import time
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


class Client:
    """`Client("http://127.0.0.1:8080", api_key="om_...")`. Queries wait for this client's last
    write (`read_your_writes`); 429 and 503 are retried by `retry`; failures raise
    `orgmem.client.OrgmemError`. `http_options` go to httpx.Client (verify, proxy, transport, ...)."""

    def __init__(self, base_url: str = "http://127.0.0.1:8080", api_key: str | None = None, *,
                 timeout: float = 60.0, retry: RetryPolicy | None = None, read_your_writes: bool = True,
                 **http_options: Any):
        self._session = Session(api_key, retry or RetryPolicy(), read_your_writes)
        self._http = httpx.Client(base_url=base_url, headers=self._session.headers, timeout=timeout, **http_options)

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    @property
    def last_position(self) -> int | None:
        return self._session.last_position

    def forget_writes(self) -> None:
        """Stop waiting for the writes made so far."""
        self._session.forget()

    def _run(self, flow: Flow[T]) -> T:
        try:
            step = next(flow)
            while True:
                if isinstance(step, Pause):
                    time.sleep(step.seconds)
                    step = flow.send(None)
                    continue
                try:
                    response = self._http.request(step.method, step.path, json=step.json, params=step.params)
                except httpx.TransportError as exc:
                    step = flow.throw(exc)
                else:
                    step = flow.send(response)
        except StopIteration as done:
            return done.value

    def _send(self, call: calls.Call[T]) -> T:
        return self._run(self._session.exchange(call))

    # --- operations -----------------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        return self._send(calls.health())

    def ready(self) -> dict[str, Any]:
        """The readiness report; a server that is not ready answers it too (`status` says why)."""
        return self._send(calls.ready())

    def metrics(self) -> str:
        return self._send(calls.metrics())

    def stats(self) -> StatsResponse:
        return self._send(calls.stats())

    # --- memory -----------------------------------------------------------------------------------
    def ingest(self, documents: Iterable[DocumentIn | Mapping[str, Any]]) -> IngestResponse:
        return self._send(calls.ingest(documents))

    def query(self, q: str | QueryRequest, **options: Any) -> QueryResponse:
        """`options` are QueryRequest's fields; `after=None` does not wait for this client's writes."""
        return self._send(calls.query(q, options))

    def row(self, row_id: str) -> RowResponse:
        return self._send(calls.row(row_id))

    def thread(self, thread_id: str, limit: int | None = None) -> ThreadResponse:
        """The thread's latest `limit` rows (the server's cap when None); `truncated` says if earlier ones exist."""
        return self._send(calls.thread(thread_id, limit))

    # --- connectors -------------------------------------------------------------------------------
    def run_connector(self, kind: ConnectorKind, paths: Iterable[str], **options: Any) -> ConnectorRunResponse:
        """Raises ConnectorStopped, with the report, when the run stopped part-way."""
        return self._send(calls.run_connector(kind, paths, options))

    def dead_letters(self, limit: int | None = None) -> DeadLettersResponse:
        return self._send(calls.dead_letters(limit))

    # --- keys -------------------------------------------------------------------------------------
    def list_keys(self) -> KeyListResponse:
        return self._send(calls.list_keys())

    def create_key(self, principal: str, role: str, **options: Any) -> KeyCreateResponse:
        return self._send(calls.create_key(principal, role, options))

    def revoke_key(self, key_id: str) -> KeyInfo:
        return self._send(calls.revoke_key(key_id))

    # --- erasure, backup and export ---------------------------------------------------------------
    def erase(self, reason: str, *, row_id: str | None = None, source_id: str | None = None,
              source: str | None = None, subject: str | None = None) -> ErasureResponse:
        """Erase one row, one source item or one subject's documents (exactly one of them)."""
        return self._send(calls.erase(reason, {"row_id": row_id, "source_id": source_id, "source": source,
                                               "subject": subject}))

    def hold_projector(self, seconds: int | None = None) -> HoldResponse:
        return self._send(calls.hold_projector(seconds))

    def release_projector(self, hold_id: str) -> HoldReleased:
        return self._send(calls.release_projector(hold_id))

    def export(self) -> list[RowResponse]:
        """Every row of the tenant that the caller may read, with its history, read whole into memory
        (`orgmem export` writes a large tenant to a file instead)."""
        return self._send(calls.export())

    # --- maintenance ------------------------------------------------------------------------------
    def consolidate(self, **options: Any) -> RunAccepted:
        return self._send(calls.consolidate(options))

    def refine(self, **options: Any) -> RunAccepted:
        return self._send(calls.refine(options))

    def runs(self) -> RunsResponse:
        return self._send(calls.runs())

    def run(self, run_id: str) -> RunView:
        return self._send(calls.run(run_id))

    def run_decisions(self, run_id: str, limit: int | None = None) -> RunDecisionsResponse:
        return self._send(calls.run_decisions(run_id, limit))

    def revert_run(self, run_id: str) -> RunAccepted:
        return self._send(calls.revert_run(run_id))

    def wait_for_run(self, run_id: str, timeout_s: float = 300.0, poll_s: float = 0.2) -> RunView:
        return self._run(self._session.wait_for_run(run_id, timeout_s, poll_s))

"""The FastAPI application: thin routes over the Memory use cases."""

from __future__ import annotations

import importlib
import logging
import time
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from schemas.api import (
    IngestRequest, IngestResponse, QueryHit, QueryRequest, QueryResponse, RowResponse, StatsResponse, ThreadResponse,
)
from services.api import problems
from services.api.auth import CurrentCaller, require_role
from services.api.metrics import Metrics
from services.core.evidence import render_evidence
from services.memory import Caller, Memory
from services.settings import Settings
from workers.indexer.loop import IndexerThread

log = logging.getLogger(__name__)


class AppState:
    def __init__(self, settings: Settings, memory: Memory):
        self.settings, self.memory = settings, memory
        self.metrics = Metrics()
        self.indexer = IndexerThread(memory.projector, settings.indexer_poll_s)


def state(request: Request) -> AppState:
    return request.app.state.orgmem


State = Annotated[AppState, Depends(state)]
Writer = Annotated[Caller, Depends(require_role("writer"))]

# Modules that define an APIRouter named `router`, mounted as they are.
ROUTERS = ["services.api.connectors"]


def create_app(settings: Settings, memory: Memory, on_close=None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.orgmem.indexer.start()
        yield
        app.state.orgmem.indexer.stop()
        app.state.orgmem.indexer.join(timeout=30)
        if on_close:
            on_close()

    app = FastAPI(title="orgmem", version="0.1.0", lifespan=lifespan,
                  description="Event-sourced organizational memory: whole documents, as-of fused retrieval.")
    app.state.orgmem = AppState(settings, memory)
    problems.install(app)

    @app.middleware("http")
    async def _limits_and_metrics(request: Request, call_next):
        started = time.perf_counter()
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > settings.limits.max_body_bytes:
            response = problems.problem(413, "Request too large", f"body: {length} bytes exceeds the limit of "
                                        f"{settings.limits.max_body_bytes}", "too-large")
        else:
            response = await call_next(request)
        route = request.scope.get("route")
        name = getattr(route, "path", "unmatched")
        metrics = app.state.orgmem.metrics
        metrics.requests.labels(name, str(response.status_code)).inc()
        metrics.latency.labels(name).observe(time.perf_counter() - started)
        return response

    @app.get("/healthz", operation_id="health", tags=["ops"])
    def healthz() -> dict:
        return {"status": "ok"}

    @app.get("/readyz", operation_id="ready", tags=["ops"])
    def readyz(s: State, response: Response) -> dict:
        head, applied = s.memory.log.head(), s.memory.projector.applied
        ready = s.indexer.is_alive()
        response.status_code = 200 if ready else 503
        return {"status": "ready" if ready else "starting", "log_head": head, "applied_position": applied,
                "lag": head - applied}

    @app.get("/metrics", operation_id="metrics", tags=["ops"])
    def metrics(s: State) -> Response:
        m = s.metrics
        m.log_head.set(s.memory.log.head())
        m.applied.set(s.memory.projector.applied)
        m.indexer_errors.set(s.indexer.errors)
        for key, value in s.memory.rows.count().items():
            m.rows.labels(key).set(value)
        return Response(generate_latest(m.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post("/v1/documents", operation_id="ingest_documents", response_model=IngestResponse, tags=["memory"])
    async def ingest(body: IngestRequest, s: State, caller: Writer) -> IngestResponse:
        limit = s.settings.limits.max_batch_documents
        if len(body.documents) > limit:
            return problems.problem(413, "Batch too large", f"documents: {len(body.documents)} documents exceeds "
                                    f"the batch limit of {limit}", "too-large")
        result = await run_in_threadpool(s.memory.ingest, body.documents, caller)
        s.metrics.documents.inc(len(body.documents))
        s.indexer.wake()
        return IngestResponse(row_ids=result.row_ids, position=result.position)

    @app.post("/v1/query", operation_id="query", response_model=QueryResponse, tags=["memory"])
    async def query(body: QueryRequest, s: State, caller: CurrentCaller) -> QueryResponse:
        limits = s.settings.limits
        if (body.k or 0) > limits.max_k or (body.candidates or 0) > limits.max_candidates:
            return problems.problem(422, "Invalid request", f"k: at most {limits.max_k}; candidates: at most "
                                    f"{limits.max_candidates}", "invalid-request")
        config = s.memory.config_for(body.preset, k=body.k, candidates=body.candidates, selector=body.selector,
                                     conjunctive=body.conjunctive, weights=body.weights)
        scope = s.memory.scope_for(caller, as_of=body.as_of, known_at=body.known_at, kinds=body.kinds,
                                   authors=body.authors, threads=body.threads)
        result = await run_in_threadpool(s.memory.query, body.q, scope, config, body.after,
                                         limits.read_your_writes_timeout_s)
        rows = [sel.row for sel in result.selected]
        return QueryResponse(
            rows=[QueryHit(rank=sel.rank, row_id=sel.row.row_id, reason=sel.reason, fused_score=sel.fused_score,
                           leg_ranks=sel.leg_ranks, leg_scores=sel.leg_scores, date=sel.row.event_time,
                           author=sel.row.author, kind=sel.row.kind, thread=sel.row.thread, title=sel.row.title,
                           text=sel.row.text, superseded_by=sel.row.superseded_by) for sel in result.selected],
            evidence=render_evidence(rows, show_supersession=body.show_supersession),
            matched=result.matched, leg_sizes=result.leg_sizes, timings_ms=result.timings_ms,
            applied_position=s.memory.projector.applied,
        )

    @app.get("/v1/rows/{row_id}", operation_id="get_row", response_model=RowResponse, tags=["memory"])
    def get_row(row_id: str, s: State, caller: CurrentCaller) -> RowResponse:
        row, history = s.memory.row(row_id, caller)
        return RowResponse(row=row, history=history)

    @app.get("/v1/threads/{thread_id:path}", operation_id="get_thread", response_model=ThreadResponse, tags=["memory"])
    def get_thread(thread_id: str, s: State, caller: CurrentCaller) -> ThreadResponse:
        return ThreadResponse(thread=thread_id, rows=s.memory.thread(thread_id, caller))

    @app.get("/v1/stats", operation_id="stats", response_model=StatsResponse, tags=["ops"])
    def stats(s: State, caller: CurrentCaller) -> StatsResponse:
        return StatsResponse(**s.memory.stats(caller.tenant))

    for module in ROUTERS:
        app.include_router(importlib.import_module(module).router)
    return app

"""The FastAPI application: thin routes over the Memory use cases."""

from __future__ import annotations

import importlib
import logging
import math
import sys
import time
from contextlib import asynccontextmanager
from datetime import datetime, timezone
from typing import Annotated

from fastapi import Depends, FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.middleware.cors import CORSMiddleware
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from schemas.api import (
    IngestRequest,
    IngestResponse,
    QueryHit,
    QueryRequest,
    QueryResponse,
    RowResponse,
    StatsResponse,
    ThreadResponse,
)
from services.adapters.key_store.sqlite import KeyStore
from services.api import problems
from services.api.auth import (
    ApiProblem,
    Authenticator,
    CurrentCaller,
    admin_router,
    require_role,
)
from services.api.metrics import Metrics
from services.app.audit import record_admin_action
from services.app.indexer import IndexerThread
from services.app.memory import Memory
from services.core.caller import Caller
from services.core.evidence import render_evidence
from services.errors import OrgmemError
from services.settings import Settings

log = logging.getLogger(__name__)


class AppState:
    def __init__(self, settings: Settings, memory: Memory):
        self.settings, self.memory = settings, memory
        self.metrics = Metrics()
        self.indexer = IndexerThread(memory.projector, settings.indexer_poll_s)
        self.keys = KeyStore.for_settings(settings) if settings.auth.enabled else None
        self.auth = Authenticator(settings, self.keys)


def state(request: Request) -> AppState:
    return request.app.state.orgmem


State = Annotated[AppState, Depends(state)]
Writer = Annotated[Caller, Depends(require_role("writer"))]
Admin = Annotated[Caller, Depends(require_role("admin"))]

# Modules that define an APIRouter named `router`, mounted as they are.
ROUTERS = ["services.api.routes.connectors", "services.api.routes.maintenance"]


class BodyLimit:
    """Refuses request bodies over the limit, also when they come chunked without a length: the
    byte count is checked as the body streams in, before the application has parsed any of it."""

    def __init__(self, app, limits):
        self.app, self.limits = app, limits  # read per request, so a changed setting applies at once

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        received, limit = 0, self.limits.max_body_bytes

        async def limited():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise ApiProblem(413, "Request too large", f"body: more than {limit} bytes", "too-large")
            return message

        await self.app(scope, limited, send)


def bootstrap_admin_key(settings: Settings, state: AppState) -> None:
    """The embedded demo: with auth on and no key ever created, make one admin key and show it once
    on stderr (never through logging), recorded in the audit log like any other key."""
    keys = state.keys
    if keys is None or not settings.auth.bootstrap_admin_key or keys.list():
        return
    key, token = keys.create("default", "admin", "admin", "system:bootstrap", name="bootstrap", unrestricted=True)
    record_admin_action(state.memory.log, key.tenant, "key.created", "system:bootstrap",
                        key.audit_details())
    print(f"orgmem: no API key existed, so one admin key for tenant 'default' was created; it is shown only now:\n"
          f"  {token}\nsend it as 'Authorization: Bearer <key>'; create others with 'orgmem keys create'",
          file=sys.stderr, flush=True)


# Dates outside these years are refused at the door: they are typos or attacks, and some stores
# cannot round-trip them (3-digit years, overflow when shifting to UTC near year 1 or 9999).
DATE_MIN = datetime(1000, 1, 1, tzinfo=timezone.utc)
DATE_MAX = datetime(9000, 1, 1, tzinfo=timezone.utc)


def _date_problem(field: str, value: datetime | None) -> str | None:
    if value is None:
        return None
    try:
        in_range = DATE_MIN <= (value if value.tzinfo else value.replace(tzinfo=timezone.utc)) <= DATE_MAX
    except OverflowError:
        in_range = False
    return None if in_range else f"{field}: a date from year {DATE_MIN.year} to {DATE_MAX.year}"


def check_document_dates(body: IngestRequest) -> None:
    problems_ = [p for i, d in enumerate(body.documents) if (p := _date_problem(f"documents.{i}.date", d.date))]
    if problems_:
        raise ApiProblem(422, "Invalid request", "; ".join(problems_[:10]), "invalid-request")


def check_query_limits(body: QueryRequest, limits) -> None:
    problems_ = [p for p in (_date_problem("as_of", body.as_of), _date_problem("known_at", body.known_at)) if p]
    if (body.k or 0) > limits.max_k:
        problems_.append(f"k: at most {limits.max_k}")
    if (body.reserve or 0) > limits.max_k:
        problems_.append(f"reserve: at most {limits.max_k}")
    if (body.candidates or 0) > limits.max_candidates:
        problems_.append(f"candidates: at most {limits.max_candidates}")
    for name in ("kinds", "authors", "threads"):
        values = getattr(body, name)
        if values is not None and len(values) > limits.max_filter_values:
            problems_.append(f"{name}: at most {limits.max_filter_values} values")
    for leg, weight in (body.weights or {}).items():
        if not math.isfinite(weight) or not 0 <= weight <= 1000:
            problems_.append(f"weights.{leg}: a finite number from 0 to 1000")
    if problems_:
        raise ApiProblem(422, "Invalid request", "; ".join(problems_), "invalid-request")


def create_app(settings: Settings, memory: Memory, on_close=None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.orgmem.indexer.start()
        yield
        app.state.orgmem.indexer.stop()
        app.state.orgmem.indexer.join(timeout=30)
        if app.state.orgmem.keys is not None:
            app.state.orgmem.keys.close()
        if on_close:
            on_close()

    if "*" in settings.auth.cors_origins:
        raise OrgmemError("auth.cors_origins: '*' is refused; list the exact origins that may call the API")

    app = FastAPI(title="orgmem", version="0.1.0", lifespan=lifespan,
                  description="Event-sourced organizational memory: whole documents, as-of fused retrieval.")
    app.state.orgmem = AppState(settings, memory)
    bootstrap_admin_key(settings, app.state.orgmem)
    problems.install(app)

    @app.exception_handler(ApiProblem)
    async def _api_problem(_: Request, exc: ApiProblem):
        response = problems.problem(exc.status_code, exc.title, str(exc.detail), exc.kind)
        response.headers.update(exc.headers or {})
        return response

    app.add_middleware(BodyLimit, limits=settings.limits)

    @app.middleware("http")
    async def _limits_and_metrics(request: Request, call_next):
        started = time.perf_counter()
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > settings.limits.max_body_bytes:
            response = problems.problem(413, "Request too large", f"body: {length} bytes exceeds the limit of "
                                        f"{settings.limits.max_body_bytes}", "too-large")
        else:
            response = await call_next(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if request.url.path.startswith("/v1/"):  # answers carry private text: no caching anywhere
            response.headers.setdefault("Cache-Control", "no-store")
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
        check_document_dates(body)
        result = await run_in_threadpool(s.memory.ingest, body.documents, caller)
        s.metrics.documents.inc(len(body.documents))
        s.indexer.wake()
        return IngestResponse(row_ids=result.row_ids, position=result.position)

    @app.post("/v1/query", operation_id="query", response_model=QueryResponse, tags=["memory"])
    async def query(body: QueryRequest, s: State, caller: CurrentCaller) -> QueryResponse:
        limits = s.settings.limits
        check_query_limits(body, limits)
        if body.after is not None and body.after > (head := s.memory.log.head()):
            # No amount of waiting reaches a position nobody has written: a client error, not a 503.
            raise ApiProblem(422, "Invalid request", f"after: position {body.after} is past the log head {head}",
                             "invalid-request")
        config = s.memory.config_for(body.preset, k=body.k, reserve=body.reserve, candidates=body.candidates,
                                     selector=body.selector, conjunctive=body.conjunctive, weights=body.weights)
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
    def stats(s: State, caller: Admin) -> StatsResponse:  # counts cover rows past access lists
        return StatsResponse(**s.memory.stats(caller.tenant))

    app.include_router(admin_router)
    for module in ROUTERS:
        app.include_router(importlib.import_module(module).router)
    if settings.auth.cors_origins:  # outermost, so that preflight requests are answered before auth
        app.add_middleware(CORSMiddleware, allow_origins=settings.auth.cors_origins, allow_credentials=False,
                           allow_methods=["GET", "POST", "DELETE"], allow_headers=["Authorization", "Content-Type"])
    return app

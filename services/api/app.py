"""The FastAPI application: state, middleware, error handlers and the routers of services/api/routes."""

from __future__ import annotations

import gc
import sys
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from services.api import problems
from services.api.auth import Authenticator
from services.api.metrics import Metrics
from services.api.middleware import BodyLimit, LimitsAndMetrics
from services.api.routes import answer, audit, backups, connectors, console, erasures, keys, maintenance, ops, people
from services.api.routes import (
    memory as memory_routes,  # `memory` names the Memory below
)
from services.api.tracing import RequestSpans
from services.app.audit import create_key_audited
from services.app.memory import Memory
from services.bootstrap import server_parts
from services.errors import OrgmemError
from services.mcp import http as mcp_http
from services.settings import Settings


class AppState:
    def __init__(self, settings: Settings, memory: Memory):
        self.settings, self.memory = settings, memory
        self.metrics = Metrics()
        self.parts = server_parts(settings, memory)
        self.indexer, self.keys = self.parts.indexer, self.parts.keys
        self.maintenance, self.runner = self.parts.maintenance, self.parts.runner
        self.auth = Authenticator(settings, self.keys)


def bootstrap_admin_key(settings: Settings, state: AppState) -> None:
    """The embedded demo: with auth on and no key ever created, make one admin key and show it once
    on stderr (never through logging), recorded in the audit log like any other key."""
    keys = state.keys
    if keys is None or not settings.auth.bootstrap_admin_key or keys.list():
        return
    _, token = create_key_audited(keys, state.memory.event_log, "default", "admin", "admin", "system:bootstrap",
                                  name="bootstrap", unrestricted=True)
    print(f"orgmem: no API key existed, so one admin key for tenant 'default' was created; it is shown only now:\n"
          f"  {token}\nsend it as 'Authorization: Bearer <key>'; create others with 'orgmem keys create'",
          file=sys.stderr, flush=True)


def create_app(settings: Settings, memory: Memory, on_close=None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        state: AppState = app.state.orgmem
        state.indexer.start()
        # What start-up built (modules, the app, the models' and indexes' Python objects) lives as
        # long as the server: frozen, the collector's full passes stop walking it again and again
        # (~160k objects at 12k rows: ~50 ms per pass, a few passes per thousand queries; frozen
        # ~4 ms; docs/live-summary.md).
        gc.collect()
        gc.freeze()
        yield
        gc.unfreeze()  # what the server leaves behind may be collected again (tests start many apps)
        if (holds := getattr(state.parts, "holds", None)) is not None:  # a backup's hold must not keep
            holds.close()  # the indexer from stopping
        state.indexer.stop()
        state.indexer.join(timeout=30)
        state.parts.close()
        if on_close:
            on_close()

    if "*" in settings.auth.cors_origins:
        raise OrgmemError("auth.cors_origins: '*' is refused; list the exact origins that may call the API")

    app = FastAPI(title="orgmem", version="0.1.0", lifespan=lifespan,
                  description="Event-sourced organizational memory: whole documents, as-of fused retrieval.")
    app.state.orgmem = AppState(settings, memory)
    bootstrap_admin_key(settings, app.state.orgmem)
    problems.install(app)
    for module in (ops, memory_routes, answer, keys, connectors, maintenance, console, backups, erasures, audit, people):
        app.include_router(module.router)
    mcp_http.mount(app)  # MCP (Streamable HTTP) at /mcp, authenticated as the routes are
    # Starlette runs the last added outermost: CORS answers preflights before auth, then limits and metrics.
    app.add_middleware(BodyLimit, limits=settings.limits)
    app.add_middleware(LimitsAndMetrics, limits=settings.limits)
    if settings.auth.cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=settings.auth.cors_origins, allow_credentials=False,
                           allow_methods=["GET", "POST", "DELETE"], allow_headers=["Authorization", "Content-Type"])
    if app.state.orgmem.parts.tracer is not None:  # outermost: the request's span covers every layer
        app.add_middleware(RequestSpans, tracer=app.state.orgmem.parts.tracer)
    return app

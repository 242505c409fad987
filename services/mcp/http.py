"""MCP over Streamable HTTP at `/mcp`, inside the API process: the API's authentication, limits and
Caller in front of the SDK's session manager.

Each request to /mcp is authenticated as an API request is (`Authenticator`: API key or OIDC token,
failed-credential buckets, the per-caller rate limit and in-flight cap); a missing or bad credential
answers 401 as problem details before the SDK reads the body. The Caller rides in the ASGI scope,
where the tools read it from the request that carried the call. The server runs stateless with JSON
answers: every request stands alone (any API process can answer it, and no stream holds an
in-flight slot open), and nothing is kept between requests that a later credential could reuse.
"""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.routing import Match, Route

from services.api import problems
from services.api.problems import ApiProblem
from services.core.caller import Caller
from services.mcp.server import build_server
from services.mcp.tools import MemoryTools

PATH = "/mcp"
CALLER_KEY = "orgmem.caller"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def caller_from_request(ctx: Context) -> Caller:
    request = ctx.request_context.request
    caller = request.scope.get(CALLER_KEY) if request is not None else None
    if caller is None:  # only reachable if the route were mounted without the gate below
        raise ToolError("Unauthorized: no authenticated caller on this request")
    return caller


def _bearer(request: Request) -> str | None:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


class AuthenticatedMcp:
    """The ASGI endpoint at /mcp: the API's authentication and limits, then the SDK."""

    def __init__(self, manager: StreamableHTTPSessionManager):
        self.manager = manager

    async def __call__(self, scope, receive, send_) -> None:
        async def send(message) -> None:  # answers carry private text, as /v1/ ones do: no caching anywhere
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"cache-control"]
                message = {**message, "headers": [*kept, (b"cache-control", b"no-store")]}
            await send_(message)

        request = Request(scope, receive)
        authenticator = request.app.state.orgmem.auth
        if not authenticator.enabled:  # the embedded profile's single admin, as the API routes
            scope[CALLER_KEY] = Caller()
            return await self.manager.handle_request(scope, receive, send)
        try:
            caller, identity = await authenticator.authenticate(_bearer(request), authenticator.client_address(request))
            await run_in_threadpool(authenticator.admit, identity)
            authenticator.enter(identity)
        except ApiProblem as problem:
            return await problems.respond(problem, request)(scope, receive, send)
        scope[CALLER_KEY] = caller
        try:
            await self.manager.handle_request(scope, receive, send)
        finally:
            authenticator.in_flight.leave(identity)


class McpRoute(Route):
    """A route that names itself in the scope, as FastAPI's routes do, so that request metrics count
    /mcp under its path."""

    def matches(self, scope):
        match, child_scope = super().matches(scope)
        if match is not Match.NONE:
            child_scope["route"] = self
        return match, child_scope


def _transport_security(settings) -> TransportSecuritySettings:
    """With auth on, the bearer credential guards /mcp (a web page cannot attach it), so any Host
    may reach it, a reverse proxy's too. With auth off on a loopback address, Host and Origin
    must be local or a configured origin: a web page reached by DNS rebinding is refused."""
    if settings.auth.enabled or settings.host not in LOOPBACK:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", "127.0.0.1", "localhost", "[::1]"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*", *settings.auth.cors_origins],
    )


def mount(app: FastAPI) -> None:
    """Serve MCP at /mcp on the app, its session manager running for the app's lifespan."""
    state = app.state.orgmem
    server = build_server(MemoryTools(state), caller_from_request)
    # The SDK's own app is not mounted (its lifespan would not run inside FastAPI's); its session
    # manager is, behind the gate, and runs for the API's lifespan.
    server.streamable_http_app(streamable_http_path=PATH, json_response=True, stateless_http=True,
                               transport_security=_transport_security(state.settings),
                               max_request_body_size=state.settings.limits.max_body_bytes)
    manager = server.session_manager
    app.router.routes.append(McpRoute(PATH, AuthenticatedMcp(manager), methods=["GET", "POST", "DELETE"]))
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app_):
        async with manager.run(), inner(app_) as maybe_state:
            yield maybe_state

    app.router.lifespan_context = lifespan

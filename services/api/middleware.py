"""HTTP middleware: body size limits, security and caching headers, request metrics."""

from __future__ import annotations

import time

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request

from services.api import problems
from services.api.problems import ApiProblem


def too_large(detail: str) -> ApiProblem:
    return ApiProblem(413, "Request too large", detail, "too-large")


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
                    raise too_large(f"body: more than {limit} bytes")
            return message

        await self.app(scope, limited, send)


class LimitsAndMetrics(BaseHTTPMiddleware):
    """Refuses a declared body over the limit before reading it, sets no-sniff and no-store
    headers, and counts and times every request by route."""

    def __init__(self, app, limits):
        super().__init__(app)
        self.limits = limits

    async def dispatch(self, request: Request, call_next):
        started = time.perf_counter()
        length, limit = request.headers.get("content-length"), self.limits.max_body_bytes
        if length and length.isdigit() and int(length) > limit:
            # Outside the exception handlers here, so the problem is rendered from the map directly.
            response = problems.respond(too_large(f"body: {length} bytes exceeds the limit of {limit}"), request)
        else:
            response = await call_next(request)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if request.url.path.startswith("/v1/"):  # answers carry private text: no caching anywhere
            response.headers.setdefault("Cache-Control", "no-store")
        route = request.scope.get("route")
        name = getattr(route, "path", "unmatched")
        metrics = request.app.state.orgmem.metrics
        metrics.requests.labels(name, str(response.status_code)).inc()
        metrics.latency.labels(name).observe(time.perf_counter() - started)
        return response

"""A span per HTTP request, when tracing is on (the app adds this middleware only then).

The span is named by the route's template (`POST /v1/query`), never by the path, which can hold
a thread's name; it carries the method, the template, the status and the caller's tenant (set by
`services.api.auth.current_caller`), and nothing of the body. A W3C `traceparent` header from the
caller continues its trace; the query-stage spans of `services.app.retrieval` are its children.
"""

from __future__ import annotations

from services.app.tracing import span

_PROPAGATED = (b"traceparent", b"tracestate")


class RequestSpans:
    def __init__(self, app, tracer):
        from opentelemetry.trace import SpanKind, Status, StatusCode
        from opentelemetry.trace.propagation.tracecontext import (
            TraceContextTextMapPropagator,
        )

        self.app, self.tracer, self.kind = app, tracer, SpanKind.SERVER
        self.server_error = Status(StatusCode.ERROR)
        self.propagator = TraceContextTextMapPropagator()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        method = scope["method"]
        carrier = {name.decode("latin-1"): value.decode("latin-1")
                   for name, value in scope.get("headers", ()) if name in _PROPAGATED}
        status: int | None = None
        scope.setdefault("state", {})  # one dict for every layer's request.state, so the tenant set inside is seen here

        async def sending(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        with span(self.tracer, method, {"http.request.method": method}, kind=self.kind,
                  context=self.propagator.extract(carrier) if carrier else None) as current:
            try:
                await self.app(scope, receive, sending)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if route:
                    current.update_name(f"{method} {route}")
                    current.set_attribute("http.route", route)
                if status is not None:
                    current.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        current.set_status(self.server_error)
                tenant = scope.get("state", {}).get("tenant")
                if tenant:
                    current.set_attribute("orgmem.tenant", tenant)

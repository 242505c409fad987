"""HTTP middleware and server options: body size and time limits, security and caching headers,
request metrics, a deadline for request headers, and an access log that never shows credentials."""

from __future__ import annotations

import asyncio
import logging
import re
import time

from starlette.datastructures import Headers, MutableHeaders
from starlette.requests import Request

from services.api import problems
from services.api.problems import ApiProblem


def too_large(detail: str) -> ApiProblem:
    return ApiProblem(413, "Request too large", detail, "too-large")


def too_slow(detail: str) -> ApiProblem:
    return ApiProblem(408, "Request timeout", detail, "request-timeout", {"Connection": "close"})


class BodyLimit:
    """Refuses request bodies over the limit, also when they come chunked without a length: the
    byte count is checked as the body streams in, before the application has parsed any of it.
    A body must also arrive whole within limits.body_timeout_s of the request's start (a client
    that trickles a byte a minute would otherwise hold its request, and a worker, forever)."""

    def __init__(self, app, limits):
        self.app, self.limits = app, limits  # read per request, so a changed setting applies at once

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        received, limit, timeout = 0, self.limits.max_body_bytes, self.limits.body_timeout_s
        loop = asyncio.get_running_loop()
        deadline, done = loop.time() + timeout, False

        async def limited():
            nonlocal received, done
            if done:  # after the body, receive() only waits for a disconnect: no deadline
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise too_slow(f"body: not received within {timeout:g} s") from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise too_large(f"body: more than {limit} bytes")
                done = not message.get("more_body", False)
            else:
                done = True
            return message

        await self.app(scope, limited, send)


class LimitsAndMetrics:
    """Refuses a declared body over the limit before reading it, sets no-sniff and no-store
    headers, and counts and times every request by route (a request that fails counts as 500).

    Plain ASGI, not Starlette's BaseHTTPMiddleware: that one streams every response through a
    queue and a task group, 3-4 ms of the event loop per query answer (py-spy, 50 rows)."""

    def __init__(self, app, limits):
        self.app, self.limits = app, limits
        redact_access_log()  # whatever server runs the app, its access log shows no credentials

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status = time.perf_counter(), 500
        private = scope["path"].startswith("/v1/")  # answers carry private text: no caching anywhere

        async def send_with_headers(message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = MutableHeaders(scope=message)
                headers.setdefault("X-Content-Type-Options", "nosniff")
                if private:
                    headers.setdefault("Cache-Control", "no-store")
            await send(message)

        try:
            length, limit = Headers(scope=scope).get("content-length"), self.limits.max_body_bytes
            if length and length.isdigit() and int(length) > limit:
                # Outside the exception handlers here, so the problem is rendered from the map directly.
                response = problems.respond(too_large(f"body: {length} bytes exceeds the limit of {limit}"),
                                            Request(scope))
                await response(scope, receive, send_with_headers)
            else:
                await self.app(scope, receive, send_with_headers)
        finally:
            name = getattr(scope.get("route"), "path", "unmatched")  # the router sets it on the scope
            metrics = scope["app"].state.orgmem.metrics
            metrics.requests.labels(name, str(status)).inc()
            metrics.latency.labels(name).observe(time.perf_counter() - started)


# --- the access log: credentials never reach it ----------------------------------------------
_SECRET_PARAM = re.compile(r"(?i)([?&;](?:api[_-]?key|key|token|access[_-]?token|id[_-]?token|refresh[_-]?token|"
                           r"auth|authorization|bearer|password|secret|client[_-]?secret)=)[^&;#\s\"]*")
_API_KEY = re.compile(r"om_[0-9a-f]{12}_[A-Za-z0-9_-]+")


def redact(text: str) -> str:
    """A request line without credentials: secret query values and anything shaped like an API key."""
    return _API_KEY.sub("om_<redacted>", _SECRET_PARAM.sub(r"\1<redacted>", text))


class RedactCredentials(logging.Filter):
    """A key sent as `?key=...` (or anywhere in a path) is never written to the access log: the
    request line of each record is rewritten before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact(arg) if isinstance(arg, str) else arg for arg in record.args)
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        return True


def redact_access_log() -> None:
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, RedactCredentials) for f in logger.filters):
        logger.addFilter(RedactCredentials())


# --- the HTTP server: timeouts and limits ------------------------------------------------------
def header_timeout_protocol(timeout_s: float) -> type:
    """uvicorn's h11 protocol with a deadline for a request's headers, from the connection or the
    end of the previous response. uvicorn itself has none: a client sending a byte a minute keeps
    a connection (a slot of limits.max_connections) forever."""
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class HeaderDeadlineH11Protocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self._arm()  # waiting for (the rest of) the next request's headers
            else:
                self._disarm()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._header_timer is None:
                self._header_timer = self.loop.call_later(timeout_s, self._headers_overdue)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_overdue(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadlineH11Protocol


def server_options(settings) -> dict:
    """uvicorn's options for `orgmem serve` (and the tests that run the server as it does)."""
    limits = settings.limits
    redact_access_log()
    return {
        "host": settings.host, "port": settings.port, "log_level": settings.log_level.lower(),
        # Forwarded headers name the client only when a configured trusted proxy sent them; the app
        # decides that (auth.trusted_proxies), so uvicorn must not rewrite the peer address itself.
        "proxy_headers": False,
        "http": header_timeout_protocol(limits.header_timeout_s),
        "timeout_keep_alive": limits.keep_alive_timeout_s,
        "h11_max_incomplete_event_size": limits.max_header_bytes,
        "limit_concurrency": limits.max_connections or None,
    }

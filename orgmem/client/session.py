"""What the sync and the async client share, free of I/O: the headers, the remembered position
of the last write (read-your-writes), and each call as a generator that yields what to do next
(`Send` a request, `Pause`) and is sent the answer. The clients only carry those steps out, one
with httpx.Client and time.sleep, the other with httpx.AsyncClient and asyncio.sleep."""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from typing import Any, TypeVar

import httpx

from orgmem.client import calls
from orgmem.client.calls import Call, Pause, Send
from orgmem.client.errors import ConnectionFailed, OrgmemError, error_for
from orgmem.client.retry import RetryPolicy, parse_retry_after
from schemas.admin import RunView

T = TypeVar("T")
# A call or a sequence of calls: yields steps, is sent each Send's httpx.Response (a lost
# connection is thrown in as httpx.TransportError), returns the result.
Flow = Generator[Send | Pause, httpx.Response | None, T]

FINISHED = frozenset({"finished", "failed", "reverted"})
USER_AGENT = "orgmem-python-client"


class Session:
    def __init__(self, api_key: str | None, retry: RetryPolicy, read_your_writes: bool):
        self.retry, self.read_your_writes = retry, read_your_writes
        self.headers = {"User-Agent": USER_AGENT, "Accept": "application/json, application/problem+json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"
        self._position: int | None = None
        self._lock = threading.Lock()  # one sync client may be shared by threads

    @property
    def last_position(self) -> int | None:
        """The log position of this client's latest write, sent as `after` with its queries."""
        return self._position

    def remember(self, position: int | None) -> None:
        if position is None:
            return
        with self._lock:
            self._position = position if self._position is None else max(self._position, position)

    def forget(self) -> None:
        with self._lock:
            self._position = None

    def send_of(self, call: Call[Any]) -> Send:
        body = call.body.model_dump(mode="json", exclude_unset=True) if call.body is not None else None
        # Read-your-writes: a query that does not name `after` itself (None included) waits for the last write.
        if (call.reads_writes and self.read_your_writes and self._position is not None
                and "after" not in call.body.model_fields_set):
            body["after"] = self._position
        return Send(call.method, call.path, body, call.params)

    def exchange(self, call: Call[T]) -> Flow[T]:
        """One call, sent again on 429 and 503 (and after a lost connection when it is idempotent)
        within the retry policy's attempts and total time."""
        policy = self.retry
        send = self.send_of(call)
        deadline = time.monotonic() + policy.total_s
        attempt = 0
        while True:
            attempt += 1
            try:
                response = yield send
            except httpx.TransportError as exc:
                failure: OrgmemError = ConnectionFailed(f"{call.method} {call.path}: {type(exc).__name__}: {exc}")
                wait = policy.delay(attempt)
                if not call.idempotent or not self._may_retry(attempt, wait, deadline):
                    raise failure from exc
                yield Pause(wait)
                continue
            status = response.status_code
            if status < 400 or status in call.accept:
                return self._answer(call, response)
            retry_after = parse_retry_after(response.headers.get("Retry-After"))
            failure = error_for(response, retry_after)
            wait = policy.delay(attempt, retry_after)
            if status not in policy.statuses or not self._may_retry(attempt, wait, deadline):
                raise failure
            yield Pause(wait)

    def _may_retry(self, attempt: int, wait: float, deadline: float) -> bool:
        return attempt < self.retry.attempts and time.monotonic() + wait <= deadline

    def _answer(self, call: Call[T], response: httpx.Response) -> T:
        result = call.parse(response)
        if call.written is not None:
            self.remember(call.written(result))
        if call.check is not None:
            call.check(result)
        return result

    def wait_for_run(self, run_id: str, timeout_s: float, poll_s: float) -> Flow[RunView]:
        """Poll a maintenance run until it is finished, failed or reverted."""
        deadline = time.monotonic() + timeout_s
        while True:
            view = yield from self.exchange(calls.run(run_id))
            if view.status in FINISHED:
                return view
            if time.monotonic() + poll_s > deadline:
                raise OrgmemError(f"run {run_id}: still {view.status} after {timeout_s:g} s")
            yield Pause(poll_s)

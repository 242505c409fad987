"""One POST to a remote OpenAI-compatible endpoint (embeddings, chat completions), retried as
both adapters need: a timeout, a transport error, a 429 or a 5xx is sent again after an
exponential backoff that honours the server's Retry-After (capped); any other answer is the
caller's to read. The adapters turn that answer, and RetriesExhausted, into their own errors."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import httpx

log = logging.getLogger(__name__)

MAX_RETRY_AFTER_S = 30.0  # a server may make us wait, but not for ever


class RetriesExhausted(Exception):
    """Every attempt failed in a way worth retrying; `problem` says how the last one did."""

    def __init__(self, problem: str, attempts: int):
        super().__init__(f"{problem} after {attempts} attempts")
        self.problem, self.attempts = problem, attempts


def post_with_retries(client: httpx.Client, url: str, body: dict, *, max_retries: int, backoff_s: float,
                      timeout_s: float, label: str,
                      amend: Callable[[httpx.Response, dict], dict | None] | None = None) -> httpx.Response:
    """The first answer that is neither a 429 nor a 5xx, within `max_retries` retries. `amend` may
    answer a refusal (another 4xx) with a body to send instead at once, not counted as an attempt
    (a server without an optional feature); otherwise the refusal is returned. `label` names the
    caller in the log lines of the retries."""
    attempts = max_retries + 1
    attempt = 0
    problem = ""
    while attempt < attempts:
        wait = backoff_s * 2**attempt
        try:
            response = client.post(url, json=body)
        except httpx.TimeoutException:
            problem = f"timed out after {timeout_s:g} s"
        except httpx.TransportError as exc:
            problem = f"transport error ({type(exc).__name__})"
        else:
            status = response.status_code
            if status == 200:
                return response
            if status != 429 and status < 500:
                amended = amend(response, body) if amend is not None else None
                if amended is None:
                    return response
                body = amended
                continue
            problem = f"HTTP {status}"
            wait = max(wait, _retry_after_s(response))
        attempt += 1
        if attempt < attempts:
            log.warning("%s: %s; retry %d of %d in %.2f s", label, problem, attempt, max_retries, wait)
            time.sleep(wait)
    raise RetriesExhausted(problem, attempts)


def _retry_after_s(response: httpx.Response) -> float:
    """The answer's Retry-After in seconds, within 0 and MAX_RETRY_AFTER_S; 0 when absent or unreadable."""
    try:
        return min(max(float(response.headers.get("retry-after", 0)), 0.0), MAX_RETRY_AFTER_S)
    except ValueError:
        return 0.0

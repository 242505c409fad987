"""When to send a call again: exponential backoff with full jitter, never sooner than the
server's Retry-After, within a number of attempts and a total time."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


@dataclass(frozen=True)
class RetryPolicy:
    """`attempts` counts every send, the first included; `total_s` bounds the time from the first
    send to the last, waits included: a retry whose wait would pass it is not made, so a
    Retry-After longer than what is left raises at once instead of sleeping in vain. 429 and 503
    are retried for every call (the server refused before doing anything); a lost connection
    only for calls that are safe to repeat (reads and queries), since a write may have landed."""

    attempts: int = 4
    total_s: float = 60.0
    base_delay_s: float = 0.25
    max_delay_s: float = 8.0
    statuses: frozenset[int] = frozenset({429, 503})

    def delay(self, retry: int, retry_after_s: float | None = None, rng: random.Random | None = None) -> float:
        """The wait before retry number `retry` (1 for the first): a uniform draw up to the
        doubling ceiling, so that clients refused together do not come back together; at least
        what the server asked for."""
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** (retry - 1))
        jittered = (rng or random).uniform(0, ceiling)
        return jittered if retry_after_s is None else max(retry_after_s, jittered)


NO_RETRIES = RetryPolicy(attempts=1)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds from a Retry-After header: a number of seconds or an HTTP date; None if unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())

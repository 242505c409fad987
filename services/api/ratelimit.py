"""Per-caller rate limits with the `limits` library (memory storage in one process, Redis when
several API processes share the limits: the cluster profile), and the per-caller cap on requests
in flight (per process)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from limits import parse_many
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

from services.errors import OrgmemError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    limit: str = ""  # the window that refused, as the library writes it ("50 per 1 second")
    retry_after_s: int = 0
    window: str = ""  # the same for people ("50 requests per second")


def window_text(item) -> str:
    """A `limits` item as people read it: "50 requests per second", "2 requests per 5 minutes"."""
    unit = item.GRANULARITY.name
    per = unit if item.multiples == 1 else f"{item.multiples} {unit}s"
    return f"{item.amount} request{'s' if item.amount != 1 else ''} per {per}"


def env_var(setting: str) -> str:
    """The environment variable of a setting: auth.rate_limit -> ORGMEM_AUTH__RATE_LIMIT."""
    return "ORGMEM_" + setting.replace(".", "__").upper()


def storage_url(settings) -> str:
    if settings.auth.rate_limit_storage:
        return settings.auth.rate_limit_storage
    return settings.cluster.redis_url if settings.profile == "cluster" else "memory://"


class RateLimiter:
    """Several windows per caller (e.g. "50/second;1500/minute"); a request must pass all of them.

    When the storage fails (Redis down) requests pass and a warning is logged at most once a
    minute: limits protect capacity, and an outage of their store should not become an outage of
    the API. Authentication is not affected by this choice.
    """

    def __init__(self, limits: str, storage: str = "memory://", namespace: str = "orgmem",
                 setting: str = "auth.rate_limit"):
        try:
            self.items = parse_many(limits) if limits.strip() else []
        except ValueError as exc:
            raise OrgmemError(f"{setting}: cannot parse {limits!r}: {exc}") from None
        self.namespace, self.spec, self.setting = namespace, limits, setting
        try:
            # A moving window, exact: "5/minute" means at most 5 in any 60 s. The sliding-window
            # counter guesses the previous window's share, so just after a boundary it let a
            # guesser through early; the exact log costs one timestamp per hit, `amount` per key.
            self._limiter = MovingWindowRateLimiter(storage_from_string(storage))
        except Exception as exc:  # the library raises its own and its driver's errors here
            raise OrgmemError(f"auth.rate_limit_storage: cannot use {storage.split('@')[-1]!r}: {exc}") from None
        self._warned_at = 0.0

    def hit(self, identity: str) -> Verdict:
        for item in self.items:
            try:
                allowed = self._limiter.hit(item, self.namespace, identity)
                if not allowed:
                    stats = self._limiter.get_window_stats(item, self.namespace, identity)
                    wait = max(1, int(stats.reset_time - time.time() + 0.999))
                    return Verdict(False, str(item), wait, window_text(item))
            except Exception as exc:  # storage outage: fail open, see the class docstring
                now = time.monotonic()
                if now - self._warned_at > 60:
                    self._warned_at = now
                    log.warning("rate limit storage unavailable, letting requests pass: %s", type(exc).__name__)
                return Verdict(True)
        return Verdict(True)

    def refusal(self, verdict: Verdict, subject: str) -> str:
        """What a 429 says: the window that refused, for whom, the setting and how to raise it."""
        return (f"{verdict.window} {subject} (setting {self.setting} = {self.spec!r}; an operator raises it "
                f"with {env_var(self.setting)}); retry in {verdict.retry_after_s} s")

    def test(self, identity: str) -> bool:
        """Whether one more hit would pass every window, without counting it."""
        try:
            return all(self._limiter.test(item, self.namespace, identity) for item in self.items)
        except Exception:  # storage outage: fail open, see the class docstring
            return True

    def reset(self) -> None:
        self._limiter.storage.reset()


class InFlight:
    """How many requests of each caller this process is serving now; `enter` refuses one over the
    cap. Counted per process: behind several API processes a caller may have cap x processes."""

    def __init__(self):
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def enter(self, identity: str, cap: int) -> bool:
        with self._lock:
            count = self._counts.get(identity, 0)
            if cap > 0 and count >= cap:
                return False
            self._counts[identity] = count + 1
            return True

    def leave(self, identity: str) -> None:
        with self._lock:
            count = self._counts.get(identity, 0) - 1
            if count > 0:
                self._counts[identity] = count
            else:
                self._counts.pop(identity, None)

    def count(self, identity: str) -> int:
        with self._lock:
            return self._counts.get(identity, 0)

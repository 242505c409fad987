"""The indexer as its own process (cluster profile), and what the API runs instead of a projector.

`GroupIndexer` drives a `Projector` from a feed (a Kafka consumer-group member, or any EventLog
through `LogFeed`): poll a batch, apply it, and only then commit the feed's offset. The row
store's checkpoint, not the feed, is authoritative: before each batch the indexer compares it
with where the feed stands and seeks back (a rebuild reset the projections) or forward
(another member moved on). Delivery is at least once; the projector skips events at or below
the checkpoint, so each event's effect is applied exactly once.

`ProjectionFollower` stands in for the projector in processes that only read the projections
(the API, Celery workers): it follows the row store's checkpoint so that read-your-writes
(`wait_for`) and `catch_up` (wait until the indexers reach the log head) keep their meaning.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Protocol

from schemas.events import LoggedEvent
from services.ports import EventLog, OrgmemError, RowStore
from workers.indexer.projector import BatchStats, Projector

log = logging.getLogger(__name__)


class EventFeed(Protocol):
    def poll(self, max_records: int, timeout_s: float) -> list[LoggedEvent]: ...

    def seek(self, position: int) -> None:
        """Continue with the first event after `position`."""

    def commit(self, position: int) -> None:
        """Every event up to `position` is applied."""

    def close(self) -> None: ...


class LogFeed:
    """A feed over any EventLog (the SQLite log; tests): one reader, no group."""

    def __init__(self, event_log: EventLog, after: int = 0):
        self.log, self.after, self.committed = event_log, after, after

    def poll(self, max_records: int, timeout_s: float) -> list[LoggedEvent]:
        events = self.log.read(self.after, max_records)
        if not events:
            time.sleep(timeout_s)
            return []
        self.after = events[-1].position
        return events

    def seek(self, position: int) -> None:
        self.after = position

    def commit(self, position: int) -> None:
        self.committed = position

    def close(self) -> None:
        pass


class GroupIndexer:
    def __init__(self, projector: Projector, feed: EventFeed, batch: int = 256, poll_s: float = 0.5,
                 heartbeat: Path | None = None):
        self.projector, self.feed, self.batch, self.poll_s = projector, feed, batch, poll_s
        # Touched after every loop turn: a container health check reads its age.
        self.heartbeat = heartbeat
        self._fed_up_to: int | None = None  # position the feed will continue after
        self._stop = threading.Event()
        self.errors = 0
        self.applied_events = 0

    def step(self) -> BatchStats:
        """One batch: resynchronise with the checkpoint, poll, apply, commit."""
        checkpoint = self.projector.rows.applied_position()  # a writer finishes a pending batch here
        if self._fed_up_to != checkpoint:
            self.feed.seek(checkpoint)
            self._fed_up_to = checkpoint
        events = self.feed.poll(self.batch, self.poll_s)
        if not events:
            return BatchStats()
        stats = self.projector.apply(events)
        self._fed_up_to = events[-1].position
        # Only after the projections hold the batch: a crash before this line redelivers it.
        self.feed.commit(events[-1].position)
        self.applied_events += stats.events
        return stats

    def run(self) -> None:
        while not self._stop.is_set():
            if self.heartbeat is not None:
                self.heartbeat.touch()
            try:
                stats = self.step()
                if stats.events:
                    log.info("indexed %d events (%d rows, %d skipped) up to position %d in %.2f s", stats.events,
                             stats.rows_added, stats.skipped, self.projector.applied, stats.seconds)
            except OrgmemError as exc:
                # Unreachable backend, or fenced by a rebuild / another member: the checkpoint did
                # not move, so re-read it and retry the batch.
                self.errors += 1
                self._fed_up_to = None
                log.warning("indexer batch failed (%s); retrying", exc)
                self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()


class ProjectionFollower:
    """The projector's surface for a process that does not project (see the module doc)."""

    def __init__(self, event_log: EventLog, rows: RowStore, poll_s: float = 0.2, catch_up_timeout_s: float = 300.0):
        self.log, self.rows, self.poll_s, self.catch_up_timeout_s = event_log, rows, poll_s, catch_up_timeout_s
        self._applied = rows.applied_position()
        self._cond = threading.Condition()

    @property
    def applied(self) -> int:
        return self._applied

    def refresh(self) -> int:
        applied = self.rows.applied_position()
        with self._cond:
            self._applied = applied
            self._cond.notify_all()
        return applied

    def catch_up(self, until: int | None = None, progress=None) -> BatchStats:
        """Wait until the indexers have applied `until` (default: the log head now)."""
        started = time.monotonic()
        target = self.log.head() if until is None else until
        before = self.refresh()
        while self._applied < target:
            if time.monotonic() - started > self.catch_up_timeout_s:
                from services.memory import NotReady

                raise NotReady(f"indexers did not reach log position {target} within {self.catch_up_timeout_s:g} s "
                               f"(applied: {self._applied}); are `orgmem indexer` processes running?")
            time.sleep(self.poll_s)
            previous = self._applied
            if self.refresh() != previous and progress is not None:
                progress(self._applied, BatchStats(events=self._applied - before))
        return BatchStats(events=max(self._applied - before, 0), seconds=time.monotonic() - started)

    def wait_for(self, position: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self.refresh() >= position:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(self.poll_s, remaining))

    def apply(self, events):
        raise OrgmemError("this process does not project the log; the `orgmem indexer` processes do")

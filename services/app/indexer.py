"""The loops that drive the projection: the embedded server's background thread, and the
indexer process of `orgmem indexer`.

`GroupIndexer` drives a `Projector` from a feed (a Kafka consumer-group member, or any EventLog
through `LogFeed`): poll a batch, apply it, and only then commit the feed's offset. The row
store's checkpoint, not the feed, is authoritative: before each batch the indexer compares it
with where the feed stands and seeks back (a rebuild reset the projections) or forward
(another member moved on). Delivery is at least once; the projector skips events at or below
the checkpoint, so each event's effect is applied exactly once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from schemas.events import LoggedEvent
from services.errors import OrgmemError
from services.ports import BatchStats, EventFeed, EventLog, Projection

log = logging.getLogger(__name__)


class IndexerThread(threading.Thread):
    def __init__(self, projector: Projection, poll_s: float = 0.2):
        super().__init__(name="orgmem-indexer", daemon=True)
        self.projector, self.poll_s = projector, poll_s
        self._stop_event, self._wake = threading.Event(), threading.Event()
        self.errors = 0

    def wake(self) -> None:
        """Called after an append, so new documents are projected without waiting for a poll."""
        self._wake.set()

    def stop(self) -> None:
        self._stop_event.set()
        self._wake.set()

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                stats = self.projector.catch_up()
                if stats.events:
                    log.info("indexed %d events (%d rows, %d skipped) up to position %d in %.2f s",
                             stats.events, stats.rows_added, stats.skipped, self.projector.applied, stats.seconds)
            except Exception:
                # Keep following the log: the checkpoint did not move, so the batch is retried.
                self.errors += 1
                log.exception("indexer batch failed; retrying")
                self._stop_event.wait(1.0)
            self._wake.wait(self.poll_s)
            self._wake.clear()


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
    def __init__(self, projector: Projection, feed: EventFeed, checkpoint: Callable[[], int], batch: int = 256,
                 poll_s: float = 0.5, heartbeat: Path | None = None):
        self.projector, self.feed, self.batch, self.poll_s = projector, feed, batch, poll_s
        self.checkpoint = checkpoint
        # Touched after every loop turn: a container health check reads its age.
        self.heartbeat = heartbeat
        self._fed_up_to: int | None = None  # position the feed will continue after
        self._stop = threading.Event()
        self.errors = 0
        self.applied_events = 0

    def step(self) -> BatchStats:
        """One batch: resynchronise with the checkpoint, poll, apply, commit."""
        checkpoint = self.checkpoint()  # the row store's: a writer finishes a pending batch here
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

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
from collections.abc import Callable, Mapping
from pathlib import Path

from schemas.events import LoggedEvent
from services.app.disk import is_disk_full
from services.core.positions import Checkpoints, by_lane, lane_of
from services.errors import LogRewound, OrgmemError, StorageFull
from services.ports import BatchStats, EventFeed, EventLog, Projection

log = logging.getLogger(__name__)


class IndexerThread(threading.Thread):
    """Follows the log in the process that owns the projections. With a disk guard, no batch
    starts while the data folder is under its free-space floor: the thread pauses (`paused`),
    keeps polling the guard, and resumes by itself once space is back. A batch that fails (a
    disk error included) leaves the checkpoint where it was and is retried."""

    def __init__(self, projector: Projection, poll_s: float = 0.2, disk=None, retry_s: float = 1.0):
        super().__init__(name="orgmem-indexer", daemon=True)
        self.projector, self.poll_s, self.disk, self.retry_s = projector, poll_s, disk, retry_s
        self._stop_event, self._wake = threading.Event(), threading.Event()
        self.errors = 0
        self.paused = False

    def wake(self) -> None:
        """Called after an append, so new documents are projected without waiting for a poll."""
        self._wake.set()

    def stop(self) -> None:
        self._stop_event.set()
        self._wake.set()

    def _between_batches(self, *_) -> None:
        # Called by the projector after each batch: stop a long catch-up before the next batch
        # when the last one brought the disk under the floor.
        if self.disk is not None:
            self.disk.check()

    def _pause(self, exc: Exception | None) -> None:
        if not self.paused:
            log.warning("indexer paused: %s", exc or "data folder under its free-space floor")
        self.paused = True

    def run(self) -> None:
        while not self._stop_event.is_set():
            try:
                if self.disk is not None and self.disk.low():
                    self._pause(None)
                    self._stop_event.wait(self.retry_s)
                    continue
                if self.paused:
                    log.warning("indexer resumed: free space is above the floor again")
                    self.paused = False
                stats = self.projector.catch_up(progress=self._between_batches)
                if stats.events:
                    log.info("indexed %d events (%d rows, %d skipped) up to position %d in %.2f s",
                             stats.events, stats.rows_added, stats.skipped, self.projector.applied, stats.seconds)
            except StorageFull as exc:
                self._pause(exc)  # the batches before were applied; the rest waits for space
                self._stop_event.wait(self.retry_s)
                continue
            except Exception as exc:
                # Keep following the log: the checkpoint did not move, so the batch is retried.
                self.errors += 1
                if is_disk_full(exc):  # a write hit a full disk above the floor: wait, quietly
                    self._pause(exc)
                else:
                    log.exception("indexer batch failed; retrying")
                self._stop_event.wait(self.retry_s)
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

    def lanes(self) -> list[int]:
        return [0]  # a log that is not split into lanes

    def seek(self, position: int) -> None:
        self.after = position

    def commit(self, position: int) -> None:
        self.committed = position

    def close(self) -> None:
        pass


def rewound(heads: Mapping[int, int], checkpoints: Checkpoints) -> str | None:
    """Why the log cannot be followed any more, when a lane's head is behind the projections."""
    behind = checkpoints.behind(heads)
    if not behind:
        return None
    where = "; ".join(f"head {head} < checkpoint {applied}" + (f" (lane {lane})" if lane else "")
                      for lane, (head, applied) in sorted(behind.items()))
    return (f"the log's head is behind the projections' checkpoint ({where}): the log lost "
            "events, and positions handed out again would be skipped. Restore the log, or rebuild the "
            "projections from it as it is (`orgmem rebuild`) if that loss is accepted")


class GroupIndexer:
    """Positions are never reused: a batch at or below its lane's checkpoint after a seek, or a
    lane's head behind it (checked when idle, every `head_check_s`), means the log lost events.
    The indexer then stops (`halted` says why) instead of skipping the new events as applied.

    Each lane (a Kafka partition) is followed on its own: its checkpoint, where the feed stands
    in it, its commit. A poll may bring events of several lanes; each lane's share is applied as
    its own batch, so a lane's checkpoint never moves past another lane's events."""

    def __init__(self, projector: Projection, feed: EventFeed, checkpoints: Callable[[], Checkpoints],
                 batch: int = 256, poll_s: float = 0.5, heartbeat: Path | None = None,
                 heads: Callable[[], Mapping[int, int]] | None = None, head_check_s: float = 10.0):
        self.projector, self.feed, self.batch, self.poll_s = projector, feed, batch, poll_s
        self.checkpoints, self.heads, self.head_check_s = checkpoints, heads, head_check_s
        self._head_checked = 0.0
        self.halted: str | None = None
        # Touched after every loop turn: a container health check reads its age.
        self.heartbeat = heartbeat
        self._fed_up_to: dict[int, int] = {}  # per lane, the position the feed will continue after
        self._stop = threading.Event()
        self.errors = 0
        self.applied_events = 0

    def step(self) -> BatchStats:
        """One batch: resynchronise each lane with its checkpoint, poll, apply, commit."""
        checkpoints = self.checkpoints()  # the row store's: a writer finishes a pending batch here
        for lane in self.feed.lanes():
            if self._fed_up_to.get(lane) != checkpoints.of(lane):
                self.feed.seek(checkpoints.of(lane))
                self._fed_up_to[lane] = checkpoints.of(lane)
        events = self.feed.poll(self.batch, self.poll_s)
        if not events:
            self._check_heads(checkpoints)
            return BatchStats()
        lanes = by_lane(events)
        for lane, logged in lanes.items():
            if logged[0].position <= checkpoints.of(lane):
                self._fed_up_to.clear()  # the feed moved past these events: seek again on any next step
                raise LogRewound(f"the log handed out position {logged[0].position} again, at or below the "
                                 f"projections' checkpoint ({checkpoints.of(lane)}): it lost events")
        total = BatchStats()
        for logged in lanes.values():
            total = total.plus(self.projector.apply(logged))
            self._fed_up_to[lane_of(logged[-1].position)] = logged[-1].position
            # Only after the projections hold the batch: a crash before this line redelivers it.
            self.feed.commit(logged[-1].position)
        self.applied_events += total.events
        return total

    def _check_heads(self, checkpoints: Checkpoints) -> None:
        if self.heads is None or time.monotonic() - self._head_checked < self.head_check_s:
            return
        self._head_checked = time.monotonic()
        reason = rewound(self.heads(), checkpoints)
        if reason:
            raise LogRewound(reason)

    def run(self) -> None:
        while not self._stop.is_set():
            if self.heartbeat is not None:
                self.heartbeat.touch()
            try:
                stats = self.step()
                if stats.events:
                    log.info("indexed %d events (%d rows, %d skipped) up to position %d in %.2f s", stats.events,
                             stats.rows_added, stats.skipped, self.projector.applied, stats.seconds)
            except LogRewound as exc:
                self.halted = str(exc)
                log.error("indexer stopped: %s", exc)
                return
            except OrgmemError as exc:
                # Unreachable backend, or fenced by a rebuild / another member: the checkpoint did
                # not move, so re-read it and retry the batch.
                self.errors += 1
                self._fed_up_to.clear()
                log.warning("indexer batch failed (%s); retrying", exc)
                self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()

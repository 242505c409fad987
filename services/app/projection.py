"""The projection loop: log -> row store, lexical index, vector index.

The decisions (is this document a new row, a repeat, empty?) are `services.core.write_path`'s,
over the row store and the events before them, so a replay of the log makes exactly the same
decisions; this loop embeds the new rows and writes what was decided. The row store
commits each batch with the position it reaches; the two indexes are written first and are
idempotent (upserts by row id), so a crash between the writes only means some events are
applied to the indexes twice, with no effect the second time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from schemas.events import ErasureRecorded, LoggedEvent
from schemas.rows import Row
from services.app.tracing import batch_attributes, span
from services.core.positions import Checkpoints, by_lane, lane_of
from services.core.write_path import embedding_text, plan_batch
from services.errors import NotReady, OrgmemError
from services.ports import (
    BatchStats,
    Embedder,
    EventLog,
    LexicalIndex,
    RowStore,
    VectorIndex,
)

log = logging.getLogger(__name__)


class Projector:
    def __init__(
        self,
        log_: EventLog,
        rows: RowStore,
        lexical: LexicalIndex,
        vectors: VectorIndex,
        embedder: Embedder,
        batch_size: int = 256,
        tracer=None,
    ):
        self.log, self.rows, self.lexical, self.vectors, self.embedder = log_, rows, lexical, vectors, embedder
        self.batch_size = batch_size
        self.tracer = tracer  # OpenTelemetry's, or None: tracing off (services.app.tracing)
        self._applied = rows.applied_positions()
        self._cond = threading.Condition()
        self._run_lock = threading.Lock()
        # Held by each batch while it writes, and by `paused()`: a backup copies the projections
        # between two batches, all three at one checkpoint.
        self._batch_gate = threading.Lock()

    @property
    def applied(self) -> int:
        return self._applied.summary()

    @property
    def checkpoints(self) -> Checkpoints:
        return self._applied

    @contextmanager
    def paused(self) -> Iterator[int]:
        """No batch is applied inside (one in progress finishes first); yields the checkpoint
        that the row store, the lexical index and the vector index all stand at meanwhile."""
        with self._batch_gate:
            yield self.rows.applied_position()

    def catch_up(self, progress=None) -> BatchStats:
        """Apply every event after the checkpoint, lane by lane, batch by batch."""
        total = BatchStats()
        with self._run_lock:
            self._applied = self.rows.applied_positions()
            for lane in sorted(self.log.heads()):
                while True:
                    events = self.log.read(self._applied.of(lane), self.batch_size)
                    if not events:
                        break
                    total = total.plus(self.apply(events))
                    if progress is not None:
                        progress(self.applied, total)
        return total

    def apply(self, events: Sequence[LoggedEvent]) -> BatchStats:
        """Apply a batch; one of several lanes is applied lane by lane (each moves its own checkpoint)."""
        total = BatchStats()
        with self._batch_gate:
            for logged in by_lane(events).values():
                stats = self._apply(logged) if self.tracer is None else self._apply_traced(logged)
                total = total.plus(stats)
        return total

    def _apply_traced(self, events: Sequence[LoggedEvent]) -> BatchStats:
        with span(self.tracer, "orgmem.projection.batch", batch_attributes(events)) as current:
            stats = self._apply(events)
            current.set_attributes({"orgmem.applied_events": stats.events, "orgmem.rows_added": stats.rows_added,
                                    "orgmem.state_changes": stats.state_changes, "orgmem.skipped": stats.skipped})
            return stats

    def _apply(self, events: Sequence[LoggedEvent]) -> BatchStats:
        started = time.perf_counter()
        # Events at or below the row store's checkpoint are in every projection already (the
        # indexes are written before the row store commits), so delivering them again is a no-op.
        checkpoint = self.rows.applied_position(lane_of(events[0].position)) if events else 0
        events = [e for e in events if e.position > checkpoint]
        if not events:
            return BatchStats(seconds=time.perf_counter() - started)
        if any(isinstance(e.event, ErasureRecorded) for e in events):
            return self._apply_erasures(events, started)
        plan = plan_batch(events, self.rows)
        for logged in plan.unknown:
            log.warning("event at %d names unknown row %s of tenant %s; ignored",
                        logged.position, logged.event.row_id, logged.event.tenant)
        new_rows, changed = plan.new_rows, plan.changed_rows
        # The position of the event that produced each row's state as the batch leaves it: an
        # index shared by indexer processes keeps the later of two states (a stalled indexer
        # that wakes after another has moved on cannot write an older one back).
        positions = {m.row.row_id: m.change.position for m in plan.mutations}
        if new_rows:
            vectors = self.embedder.encode([embedding_text(r.title, r.text) for r in new_rows])
            self.vectors.upsert(new_rows, vectors, positions=positions)
        if changed:
            self.vectors.update_state(changed, positions=positions)
        if plan.touched:
            self.lexical.upsert(list(plan.touched.values()))
        position = events[-1].position
        self.rows.apply(plan.mutations, plan.skipped, position)
        with self._cond:
            self._applied = self._applied.after([position])
            self._cond.notify_all()
        return BatchStats(
            events=len(events), rows_added=len(new_rows), state_changes=len(changed),
            skipped=len(plan.skipped), seconds=time.perf_counter() - started,
        )

    def _apply_erasures(self, events: Sequence[LoggedEvent], started: float) -> BatchStats:
        """A batch cut at each ErasureRecorded: the events before it are applied, then the erasure,
        so that a row written earlier in the batch is purged too."""
        total, segment = BatchStats(), []
        for logged in [*events, None]:
            if logged is not None and not isinstance(logged.event, ErasureRecorded):
                segment.append(logged)
                continue
            if segment:
                total = total.plus(self._apply(segment))
                segment = []
            if logged is not None:
                self._purge(logged.event.tenant, logged.event.row_ids, logged.position)
                total.events += 1
        total.seconds = time.perf_counter() - started
        return total

    def purge(self, tenant: str, row_ids: Sequence[str]) -> list[str]:
        """Erase rows from every projection out of band (`services.app.erasure.purge_erased`, after
        a restore); the checkpoint stays where it is. Returns the ids that were stored rows."""
        with self._batch_gate:
            return self._purge(tenant, row_ids, None)

    def _purge(self, tenant: str, row_ids: Sequence[str], position: int | None) -> list[str]:
        """The indexes first and the row store last (it moves the checkpoint), as for a batch: a
        crash in between applies the erasure again, which finds less to do."""
        stored = self.rows.get_many(row_ids)
        if stored:
            forget = getattr(self.embedder, "forget", None)  # the vector cache keeps vectors by text
            if forget is not None:
                forget([embedding_text(r.title, r.text) for r in stored.values()])
            self.vectors.delete(list(stored))
            self.lexical.delete(list(stored), survivors=self._survivors)
        erased = self.rows.erase(tenant, row_ids, position)
        if position is not None:
            with self._cond:
                self._applied = self._applied.after([position])
                self._cond.notify_all()
        return erased

    def _survivors(self) -> Iterator[Row]:
        after = None
        while True:
            page = self.rows.page(None, after, 1000)
            if not page:
                return
            yield from page
            after = (page[-1].ingest_position, page[-1].row_id)

    def wait_for(self, position: int, timeout: float) -> bool:
        """Block until the projections have applied `position` (read-your-writes)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._applied.covers(position):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True


class ProjectionFollower:
    """The projector's surface for a process that does not project (see the module doc)."""

    def __init__(self, event_log: EventLog, rows: RowStore, poll_s: float = 0.2, catch_up_timeout_s: float = 300.0):
        self.log, self.rows, self.poll_s, self.catch_up_timeout_s = event_log, rows, poll_s, catch_up_timeout_s
        self._applied = rows.applied_positions()

    @property
    def applied(self) -> int:
        return self._applied.summary()

    @property
    def checkpoints(self) -> Checkpoints:
        return self._applied

    def refresh(self) -> Checkpoints:
        self._applied = self.rows.applied_positions()
        return self._applied

    def catch_up(self, progress=None) -> BatchStats:
        """Wait until the indexers have applied every lane's head now."""
        started = time.monotonic()
        targets = list(self.log.heads().values())
        before = self.refresh().summary()
        while not all(self._applied.covers(target) for target in targets):
            if time.monotonic() - started > self.catch_up_timeout_s:
                raise NotReady(f"indexers did not reach log position {max(targets)} within "
                               f"{self.catch_up_timeout_s:g} s (applied: {self.applied}); are `orgmem indexer` "
                               "processes running?")
            time.sleep(self.poll_s)
            previous = self.applied
            if self.refresh().summary() != previous and progress is not None:
                progress(self.applied, BatchStats(events=self.applied - before))
        return BatchStats(events=max(self.applied - before, 0), seconds=time.monotonic() - started)

    def wait_for(self, position: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self.refresh().covers(position):
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(self.poll_s, remaining))

    def apply(self, events):
        raise OrgmemError("this process does not project the log; the `orgmem indexer` processes do")

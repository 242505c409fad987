"""The indexer as a background thread of the embedded server: follow the log, project it."""

from __future__ import annotations

import logging
import threading

from workers.indexer.projector import Projector

log = logging.getLogger(__name__)


class IndexerThread(threading.Thread):
    def __init__(self, projector: Projector, poll_s: float = 0.2):
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

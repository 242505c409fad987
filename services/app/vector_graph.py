"""The embedded server's keeper of the vector graph: a small thread that asks the vector index
to seal the rows it searches exactly once there are enough of them. The build itself runs in a
child process (the index's own business), so this thread never waits on it."""

from __future__ import annotations

import logging
import threading

from services.app.memory import Memory
from services.errors import OrgmemError

log = logging.getLogger(__name__)


class VectorGraphKeeper(threading.Thread):
    def __init__(self, memory: Memory, every_s: float):
        super().__init__(name="orgmem-vector-graph", daemon=True)
        self.memory, self.every_s = memory, every_s
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.wait(self.every_s):
            try:
                self.memory.seal_vectors_if_due()
            except OrgmemError as exc:  # a closed index at shutdown, a full disk: try again later
                log.warning("vector graph: could not start a build: %s", exc)

    def stop(self) -> None:
        self._stop_event.set()

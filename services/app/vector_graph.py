"""The embedded server's keeper of the vector graph: a small thread that asks the vector index
to seal the rows it searches exactly once there are enough of them. The build itself runs in a
child process (the index's own business), so this thread never waits on it.

A build copies the shards it seals and writes the new one beside them: about twice the vector
index on disk, all at once. Started on a disk without that much room above the free-space floor
it would take the margin that keeps Qdrant Edge's mmap writes from SIGBUS (services/app/disk.py),
so it is deferred until there is room, and said once in the log."""

from __future__ import annotations

import logging
import threading

from services.app.disk import DiskGuard
from services.app.memory import Memory
from services.errors import OrgmemError

log = logging.getLogger(__name__)


class VectorGraphKeeper(threading.Thread):
    def __init__(self, memory: Memory, every_s: float, disk: DiskGuard | None = None):
        super().__init__(name="orgmem-vector-graph", daemon=True)
        self.memory, self.every_s, self.disk = memory, every_s, disk
        self._stop_event = threading.Event()
        self._deferred = False  # the last due build waited for room (logged once)

    def run(self) -> None:
        while not self._stop_event.wait(self.every_s):
            self.check()

    def check(self) -> bool:
        """Start a build if one is due and the disk has room for it; True when one started."""
        try:
            return self.memory.seal_vectors_if_due(self._space_for if self.disk is not None else None)
        except OrgmemError as exc:  # a closed index at shutdown, a full disk: try again later
            log.warning("vector graph: could not start a build: %s", exc)
            return False

    def _space_for(self, needed: int) -> bool:
        room = self.disk.room_for(needed)
        if not room and not self._deferred:
            log.warning("vector graph: build deferred: it writes about %d MB and %d MB are free above the floor "
                        "of %d MB (limits.min_free_bytes); the rows stay searched exactly until there is room",
                        _mb(needed), _mb((self.disk.free_bytes() or 0) - self.disk.floor_bytes),
                        _mb(self.disk.floor_bytes))
        elif room and self._deferred:
            log.warning("vector graph: room for the deferred build again (%d MB)", _mb(needed))
        self._deferred = not room
        return room

    def stop(self) -> None:
        self._stop_event.set()


def _mb(n: int) -> int:
    return max(0, n) // 2**20

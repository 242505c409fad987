"""The free-space floor of the data folder.

A full disk must never reach the projections: Qdrant Edge writes its segments through mmap, and
a page that cannot be backed by a block kills the process with SIGBUS (and again at every
restart, when the indexer retries the same batch). So orgmem keeps a margin: while the file
system holding the data folder has less than `limits.min_free_bytes` available,

- every append to the log is refused before it is made (`StorageFull`, answered 507), which
  covers document ingest, connector runs, maintenance and audit events alike;
- the indexer starts no batch: it pauses and resumes by itself once space is back;
- `/readyz` answers 503 naming the cause, and `/metrics` shows free bytes, the floor and the pause.

Reads (queries, rows, threads) are served throughout. A floor of 0 turns the guard off.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from services.errors import StorageFull

log = logging.getLogger(__name__)


class DiskGuard:
    """Free space of the file system that holds `folder`, against a floor in bytes."""

    def __init__(self, folder: Path, floor_bytes: int, statvfs: Callable[[str], os.statvfs_result] = os.statvfs):
        self.folder, self.floor_bytes, self._statvfs = Path(folder), max(0, int(floor_bytes)), statvfs
        self._lock = threading.Lock()
        self._was_low = False

    @property
    def enabled(self) -> bool:
        return self.floor_bytes > 0

    def free_bytes(self) -> int | None:
        """Bytes available to this process there, or None when it cannot be measured."""
        try:
            st = self._statvfs(str(self.folder))
        except OSError:
            return None
        return int(st.f_bavail) * int(st.f_frsize or st.f_bsize)

    def low(self) -> bool:
        """True while free space is under the floor (never when disabled or unmeasurable: the
        write itself then reports what fails)."""
        if not self.enabled:
            return False
        free = self.free_bytes()
        is_low = free is not None and free < self.floor_bytes
        with self._lock:
            changed, self._was_low = is_low != self._was_low, is_low
        if changed:
            if is_low:
                log.warning("data folder %s: %d bytes free, under the floor of %d bytes (limits.min_free_bytes): "
                            "writes are refused and indexing pauses until space is freed", self.folder, free,
                            self.floor_bytes)
            else:
                log.warning("data folder %s: %s bytes free again (floor %d): writes and indexing resume",
                            self.folder, free, self.floor_bytes)
        return is_low

    def room_for(self, more_bytes: int) -> bool:
        """Whether `more_bytes` can be written and leave the floor free (True when disabled or
        unmeasurable, as `low`)."""
        free = self.free_bytes() if self.enabled else None
        return free is None or free - more_bytes >= self.floor_bytes

    def check(self) -> None:
        """Raise StorageFull when under the floor."""
        if self.low():
            raise StorageFull(self.folder, self.free_bytes() or 0, self.floor_bytes)

    def report(self) -> dict:
        free = self.free_bytes()
        low = self.low()
        return {"data_dir": str(self.folder), "free_bytes": free, "min_free_bytes": self.floor_bytes, "low": low}


_FULL_TEXTS = ("no space left on device", "database or disk is full", "disk quota exceeded", "os error 28")


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether an error (or one it was raised from) says the disk is full: ENOSPC, SQLite's
    "database or disk is full", tantivy's IoError text, or our own StorageFull."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, StorageFull):
            return True
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(text in str(exc).lower() for text in _FULL_TEXTS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


class GuardedEventLog:
    """An event log whose appends are refused under the floor; everything else passes through."""

    def __init__(self, inner, guard: DiskGuard):
        self._inner, self.guard = inner, guard

    def append(self, events: Sequence):
        self.guard.check()
        return self._inner.append(events)

    def read(self, after: int, limit: int):
        return self._inner.read(after, limit)

    def head(self) -> int:
        return self._inner.head()

    def heads(self):
        return self._inner.heads()

    def lane_for(self, tenant: str) -> int:
        return self._inner.lane_for(tenant)

    def backlog(self, after: int, head: int) -> int:
        return self._inner.backlog(after, head)

    def close(self) -> None:
        self._inner.close()

    def __getattr__(self, name: str):  # the adapter's other attributes (its path, ...)
        if name.startswith("__") or name == "_inner":
            raise AttributeError(name)
        return getattr(self._inner, name)

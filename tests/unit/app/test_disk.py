"""The free-space floor with a fake statvfs: the guard, the guarded log (appends refused, reads
served), the indexer's pause and resume, and the 507 the API answers."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from services.api.problems import respond
from services.app.disk import DiskGuard, GuardedEventLog, is_disk_full
from services.app.indexer import IndexerThread
from services.errors import OrgmemError, StorageFull
from services.ports import BatchStats

MB = 1024 * 1024


class FakeDisk:
    """A statvfs whose free space the test sets."""

    def __init__(self, free: int):
        self.free, self.fail = free, False

    def __call__(self, path: str) -> os.statvfs_result:
        if self.fail:
            raise FileNotFoundError(path)
        blocks = self.free // 4096
        return os.statvfs_result((4096, 4096, 10**6, blocks, blocks, 1000, 1000, 1000, 0, 255))


def test_guard_refuses_under_the_floor_and_names_the_cause():
    disk = FakeDisk(100 * MB)
    guard = DiskGuard(Path("/srv/orgmem"), 64 * MB, statvfs=disk)
    assert not guard.low() and guard.free_bytes() == 100 * MB
    guard.check()
    disk.free = 10 * MB
    assert guard.low()
    with pytest.raises(StorageFull) as caught:
        guard.check()
    exc = caught.value
    assert (exc.free_bytes, exc.floor_bytes, exc.folder) == (10 * MB, 64 * MB, "/srv/orgmem")
    assert "/srv/orgmem" in str(exc) and "min_free_bytes" in str(exc)
    assert guard.report() == {"data_dir": "/srv/orgmem", "free_bytes": 10 * MB, "min_free_bytes": 64 * MB,
                              "low": True}
    disk.free = 65 * MB
    assert not guard.low()


def test_floor_zero_disables_and_an_unmeasurable_folder_does_not_block():
    disk = FakeDisk(0)
    assert not DiskGuard(Path("/d"), 0, statvfs=disk).low()
    disk.fail = True
    guard = DiskGuard(Path("/d"), 64 * MB, statvfs=disk)
    assert not guard.low() and guard.report()["free_bytes"] is None


class ListLog:
    def __init__(self):
        self.events, self.path = [], "log.sqlite"

    def append(self, events):
        self.events.extend(events)
        return list(events)

    def read(self, after, limit):
        return self.events[after:after + limit]

    def head(self):
        return len(self.events)

    def close(self):
        pass


def test_guarded_log_refuses_appends_before_writing_and_keeps_reads():
    disk = FakeDisk(100 * MB)
    inner = ListLog()
    logged = GuardedEventLog(inner, DiskGuard(Path("/d"), 64 * MB, statvfs=disk))
    logged.append(["a"])
    disk.free = MB
    with pytest.raises(StorageFull):
        logged.append(["b"])
    assert inner.events == ["a"]  # nothing was written
    assert logged.read(0, 10) == ["a"] and logged.head() == 1 and logged.path == "log.sqlite"
    disk.free = 100 * MB
    logged.append(["b"])
    assert inner.events == ["a", "b"]


def test_disk_full_errors_are_recognised_through_their_causes():
    import sqlite3

    try:
        try:
            raise ValueError("An IO error occurred: 'No space left on device (os error 28)'")
        except ValueError as driver:
            raise OrgmemError("lexical index (tantivy): upsert failed") from driver
    except OrgmemError as wrapped:
        assert is_disk_full(wrapped)
    assert is_disk_full(OSError(28, "No space left on device"))
    assert is_disk_full(sqlite3.OperationalError("database or disk is full"))
    assert is_disk_full(StorageFull("/d", 1, 2))
    assert not is_disk_full(OSError(13, "Permission denied")) and not is_disk_full(None)


def test_storage_full_answers_507_with_free_and_floor():
    response = respond(StorageFull("/srv/orgmem", 5, 10))
    assert response.status_code == 507
    body = response.body.decode()
    assert "Insufficient storage" in body and "/srv/orgmem" in body and '"min_free_bytes":10' in body
    assert response.headers["Retry-After"] == "30"


class CountingProjector:
    """Each catch_up applies one batch; `fail_with` makes the next call raise instead."""

    def __init__(self):
        self.calls, self.applied, self.fail_with = 0, 0, None

    def catch_up(self, progress=None):
        if self.fail_with is not None:
            exc, self.fail_with = self.fail_with, None
            raise exc
        self.calls += 1
        self.applied += 1
        if progress is not None:
            progress(self.applied, BatchStats(events=1))
        return BatchStats(events=1)


def wait_until(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_indexer_pauses_under_the_floor_and_resumes_by_itself():
    disk = FakeDisk(100 * MB)
    projector = CountingProjector()
    indexer = IndexerThread(projector, poll_s=0.01, disk=DiskGuard(Path("/d"), 64 * MB, statvfs=disk), retry_s=0.01)
    indexer.start()
    try:
        assert wait_until(lambda: projector.calls >= 2)
        disk.free = MB
        assert wait_until(lambda: indexer.paused)
        time.sleep(0.05)  # let a batch that had started finish
        stopped_at = projector.calls
        time.sleep(0.2)
        assert projector.calls == stopped_at  # no batch starts under the floor
        disk.free = 100 * MB
        assert wait_until(lambda: projector.calls > stopped_at and not indexer.paused)
        # A batch failing on the disk (ENOSPC) is retried, not fatal.
        projector.fail_with = OSError(28, "No space left on device")
        assert wait_until(lambda: indexer.errors == 1)
        calls = projector.calls
        assert wait_until(lambda: projector.calls > calls) and indexer.is_alive()
    finally:
        indexer.stop()
        indexer.join(5)

"""A vector graph build writes about twice the vector index at once (a copy of the shards it seals
and the new sealed shard). Started on a disk without that room above the free-space floor, it
would eat the margin that keeps Qdrant Edge's mmap writes from SIGBUS, so the server's keeper
defers it, says so once, counts it in `builds_deferred`, and starts it when room is back.

The embedded memory and its tiered index are real; the file system's free space comes from the
fake statvfs of tests/unit/app/test_disk.py (the guard's own tests, and tests/integration/
test_full_disk.py on a real small file system, cover measuring it)."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from schemas.documents import DocumentIn
from services.app.disk import DiskGuard
from services.app.vector_graph import VectorGraphKeeper
from tests.unit.app.test_disk import MB, FakeDisk

pytestmark = pytest.mark.slow

FLOOR = 256 * MB


@pytest.fixture
def settings(settings):
    return settings.model_copy(update={"vector_seal_rows": 5})


def test_a_build_without_room_above_the_floor_waits_for_it(memory, settings, caplog):
    t0 = datetime(2025, 3, 3, tzinfo=UTC)
    memory.ingest([DocumentIn(text=f"note {i} on the office move and the vendor budget", author="a",
                              date=t0 + timedelta(days=i)) for i in range(12)])
    memory.catch_up()
    assert memory.vector_status()["rows_searched_exactly"] >= 5  # a build is due
    disk = FakeDisk(FLOOR + 1 * MB)  # above the floor, so ingest goes on, but not by a build's size
    keeper = VectorGraphKeeper(memory, every_s=60, disk=DiskGuard(Path(settings.data_dir), FLOOR, statvfs=disk))

    with caplog.at_level(logging.WARNING, logger="services.app.vector_graph"):
        assert keeper.check() is False and keeper.check() is False
    status = memory.vector_status()
    assert status["builds_deferred"] == 2 and status["builds_running"] == 0 and status["builds_done"] == 0
    deferred = [r for r in caplog.records if "deferred" in r.getMessage()]
    assert len(deferred) == 1 and "min_free_bytes" in deferred[0].getMessage()  # said once, with the setting

    disk.free = FLOOR + 10 * 1024 * MB
    assert keeper.check() is True
    deadline = time.monotonic() + 120
    while memory.vector_status()["builds_done"] == 0:
        assert time.monotonic() < deadline, "the build never finished"
        time.sleep(0.1)
    status = memory.vector_status()
    assert status["rows_in_graph"] == 12 and status["rows_searched_exactly"] == 0

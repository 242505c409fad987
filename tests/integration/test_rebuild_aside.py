"""`orgmem rebuild` repairs projections from the log alone, whatever state they are in (built
aside, swapped in); at start a missing or far-behind index, and a lagging indexer, make
`/readyz` answer 503."""

from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi import Response

from services.adapters.data_folder import projections as projection_folders
from services.api.routes.ops import readyz
from services.bootstrap import build_memory
from services.cli.main import main
from tests.integration.test_rebuild import corpus, top_ids

pytestmark = pytest.mark.slow


def _filled(settings):
    memory, lock = build_memory(settings)
    try:
        memory.ingest(corpus())
        memory.catch_up()
        return top_ids(memory), memory.counts(), memory.head()
    finally:
        memory.close()
        lock.release()


def _answers(settings):
    memory, lock = build_memory(settings)
    try:
        assert memory.problems == {}
        return top_ids(memory), memory.counts(), memory.head()
    finally:
        memory.close()
        lock.release()


def _corrupt_rows(projections: Path) -> None:
    for name in ("rows.sqlite-wal", "rows.sqlite-shm"):
        (projections / name).unlink(missing_ok=True)
    (projections / "rows.sqlite").write_bytes(b"\x00garbage, not a database\xff" * 4096)


def _corrupt_meta(projections: Path) -> None:
    (projections / "lexical" / "meta.json").write_text("{ this is not json")


def _corrupt_segment(projections: Path) -> None:
    # Every shard of the tiered index (vectors/<shard>/segments/<segment>).
    segments = [p for p in (projections / "vectors").glob("*/segments/*") if p.is_dir()]
    assert segments, "no Qdrant segment found"
    for segment in segments:  # the segment's own files: its config, id tracker, vector storage
        for path in segment.iterdir():
            if path.is_file():
                path.write_bytes(b"\xde\xad\xbe\xef" * 1024)


@pytest.mark.parametrize("corrupt", [_corrupt_rows, _corrupt_meta, _corrupt_segment])
def test_rebuild_repairs_a_corrupted_projection(settings, corrupt):
    before, counts, head = _filled(settings)
    projections = Path(settings.data_dir) / "projections"
    corrupt(projections)
    assert main(["rebuild", "--data", str(settings.data_dir)]) == 0
    data = Path(settings.data_dir)
    assert not (data / projection_folders.ASIDE).exists() and not (data / projection_folders.OLD).exists()
    after, counts_after, head_after = _answers(settings)
    assert after == before and counts_after == counts
    assert head_after == head + 1  # the rebuild's audit event, appended to the log


def test_interrupted_swaps_recover(tmp_path):
    data = tmp_path / "data"
    (data / "projections").mkdir(parents=True)
    (data / "projections" / "rows.sqlite").write_text("old")
    aside = projection_folders.fresh_aside(data)  # a crash before the folder was finished
    projection_folders.recover(data)
    assert not aside.exists() and (data / "projections" / "rows.sqlite").read_text() == "old"
    aside = projection_folders.fresh_aside(data)  # a crash between the two renames
    (aside / "rows.sqlite").write_text("new")
    projection_folders.mark_finished(data)
    (data / "projections").rename(data / projection_folders.OLD)
    projection_folders.recover(data)
    assert (data / "projections" / "rows.sqlite").read_text() == "new"
    assert not (data / projection_folders.OLD).exists() and not aside.exists()


def _ready(settings, memory) -> tuple[int, dict]:
    state = SimpleNamespace(settings=settings, memory=memory, parts=SimpleNamespace(disk=None),
                            indexer=SimpleNamespace(is_alive=lambda: True, paused=False))
    response = Response()
    body = readyz(state, response)
    return response.status_code, body


def test_deleted_lexical_folder_is_named_by_readyz(settings):
    import shutil

    before, _, _ = _filled(settings)
    shutil.rmtree(Path(settings.data_dir) / "projections" / "lexical")
    memory, lock = build_memory(settings)
    try:
        assert memory.problems == {"lexical": "missing"}
        code, body = _ready(settings, memory)
        assert code == 503 and body["projections"] == {"lexical": "missing"}
        assert "orgmem rebuild" in body["reason"]
    finally:
        memory.close()
        lock.release()
    # Restarted without a rebuild, the now-empty index is still named (far behind the row store).
    memory, lock = build_memory(settings)
    try:
        assert memory.problems == {"lexical": "behind"}
    finally:
        memory.close()
        lock.release()
    assert main(["rebuild", "--data", str(settings.data_dir)]) == 0
    assert _answers(settings)[0] == before


def test_lag_over_the_threshold_is_not_ready(settings):
    settings.indexer_max_lag = 5
    memory, lock = build_memory(settings)
    try:
        memory.ingest(corpus()[:10])
        code, body = _ready(settings, memory)
        assert code == 503 and body["status"] == "lagging" and body["lag"] == 10 and body["max_lag"] == 5
        memory.catch_up()
        code, body = _ready(settings, memory)
        assert code == 200 and body["status"] == "ready" and body["lag"] == 0
    finally:
        memory.close()
        lock.release()

"""Several writers on one tantivy directory (the cluster profile's shared folder: two indexer
processes, or an indexer and an erasure): tantivy's directory lock is held for one commit, and a
writer that finds it busy waits for it instead of failing its batch."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import tantivy

from schemas.rows import Row
from services.adapters.lexical.tantivy import TantivyLexicalIndex
from services.core.scope import Scope
from services.core.term_match import TermMatch
from services.errors import BackendUnavailable

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2025, 3, 3, tzinfo=UTC)
ACME = Scope("acme")


def row(row_id: str, text: str, position: int) -> Row:
    return Row(row_id=row_id, tenant="acme", text=text, ingest_position=position,
               ingested_at=T0 + timedelta(seconds=position))


def found(index: TantivyLexicalIndex, term: str) -> set[str]:
    return {hit.row_id for hit in index.search_text([term], ACME, 1000, match=TermMatch("any"))}


def test_a_writer_waits_for_a_lock_held_by_another_writer(tmp_path):
    index = TantivyLexicalIndex(tmp_path, lock_wait_s=5)
    index.upsert([row("a", "shared ledger", 1)])
    holder = tantivy.Index.open(str(tmp_path)).writer(heap_size=15_000_000, num_threads=1)

    def release_later() -> None:
        nonlocal holder
        time.sleep(0.5)
        holder = None  # dropping the writer releases the directory lock

    releaser = threading.Thread(target=release_later)
    started = time.monotonic()
    releaser.start()
    index.upsert([row("b", "shared ledger entry", 2)])  # would be LockBusy without the wait
    waited = time.monotonic() - started
    releaser.join()
    assert waited >= 0.4
    assert found(index, "ledger") == {"a", "b"}
    index.close()


def test_the_wait_is_bounded(tmp_path):
    index = TantivyLexicalIndex(tmp_path, lock_wait_s=0.3)
    holder = tantivy.Index(index._schema, str(tmp_path), reuse=True).writer(heap_size=15_000_000, num_threads=1)
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="LockBusy"):
        index.upsert([row("a", "never written", 1)])
    assert 0.3 <= time.monotonic() - started < 3
    del holder
    index.close()


WRITER = """
import sys
from datetime import UTC, datetime
from pathlib import Path
from schemas.rows import Row
from services.adapters.lexical.tantivy import TantivyLexicalIndex
path, name, batches = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
index = TantivyLexicalIndex(path)
for b in range(batches):
    index.upsert([Row(row_id=f"{name}-{b}-{i}", tenant="acme", text=f"journal {name} entry {b} {i}",
                      ingest_position=b * 10 + i, ingested_at=datetime(2025, 3, 3, tzinfo=UTC))
                  for i in range(5)])
index.close()
"""


def test_two_processes_write_one_index_without_losing_a_batch(tmp_path):
    TantivyLexicalIndex(tmp_path).close()  # the index exists before both open it
    batches = 15
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), name, str(batches)], cwd=REPO,
                                stderr=subprocess.PIPE) for name in ("left", "right")]
    for proc in writers:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err.decode()[-2000:]
    index = TantivyLexicalIndex(tmp_path)
    rows = found(index, "journal")
    assert len(rows) == 2 * batches * 5
    assert {r.split("-")[0] for r in rows} == {"left", "right"}
    index.close()

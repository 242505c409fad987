"""After `kill -9` of the active indexer process a standby process takes over, and the projections
end exactly as an uninterrupted run's: the same rows in the same states with the same histories,
and the same answers as the embedded profile gives for the same events.

Real processes on a real Kafka-protocol broker (tansu): two indexer processes
(tests/integration/standby_indexer.py, the cluster indexer's runner over the stores that run
here) in one consumer group; the test kills the one that holds the partition with SIGKILL while
it is part way through the log, and appends more while the other takes over. What the standby
waits on besides the group is in that module's docstring."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from schemas.events import RowArchived, RowSuperseded
from tests.integration.test_cluster_equivalence import T0, answers, documents
from tests.tansu import kafka_bootstrap_or_skip

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BATCH = 2  # events per batch: the log is many batches, so the kill lands part way through it
TIMEOUT_S = 240  # first group assignment (~15 s on tansu) and a dead member's session (30 s) included


@pytest.fixture(scope="module")
def kafka_bootstrap():
    pytest.importorskip("kafka")
    pytest.importorskip("qdrant_client")
    yield from kafka_bootstrap_or_skip()


def checkpoint(folder: Path) -> int:
    """The row store's applied position, read as another process would (0 before it exists)."""
    try:
        with sqlite3.connect(f"file:{folder / 'rows.sqlite'}?mode=ro", uri=True, timeout=5) as conn:
            found = conn.execute("SELECT value FROM meta WHERE key = 'applied_position'").fetchone()
    except sqlite3.OperationalError:  # not created yet
        return 0
    return int(found[0]) if found else 0


def wait_until(condition, what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


class IndexerProcess:
    def __init__(self, name: str, folder: Path, data_dir: Path, bootstrap: str, topic: str, group: str):
        self.log_path = folder / f"indexer-{name}.log"
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.standby_indexer", str(folder), str(data_dir), bootstrap,
                 topic, group, str(BATCH)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log)

    def said(self, text: str) -> bool:
        return text in self.log_path.read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)


def projected(memory, row_ids: list[str]) -> dict:
    """Rows, states and histories without log positions and times (a Kafka position is not an
    SQLite log's), and the answers."""
    return {
        "rows": {rid: (row.state, row.superseded_by) for rid in row_ids if (row := memory.stored_row(rid))},
        "history": {rid: [(c.change, c.state, c.superseded_by, c.reason) for c in memory.row_history(rid)]
                    for rid in row_ids},
        "answers": {"now": answers(memory), "before": answers(memory, T0 + timedelta(days=50))},
    }


def test_a_standby_takes_over_from_a_killed_indexer_and_ends_as_an_uninterrupted_run(
        tmp_path, settings, memory, kafka_bootstrap):
    from qdrant_client import QdrantClient

    from services.adapters.event_log.kafka import KafkaEventLog
    from services.adapters.lexical.tantivy import TantivyLexicalIndex
    from services.adapters.row_store.sqlite import SqliteRowStore
    from services.adapters.vector.qdrant_server import QdrantServerVectorIndex
    from services.app.memory import append_documents
    from services.app.sealing import Sealer, sealing
    from services.bootstrap import assemble_memory, data_key_store_for
    from services.core.caller import SYSTEM

    docs = documents()
    first, second = docs[:40], docs[40:]
    # The uninterrupted run: the embedded profile, the same events in the same order.
    ids = memory.ingest(first).row_ids + memory.ingest(second).row_ids
    steps = [RowArchived(row_id=ids[5], reason="stale"), RowSuperseded(row_id=ids[0], superseded_by=ids[1],
                                                                       reason="newer decision")]
    memory.append(steps)
    memory.catch_up()
    expected = projected(memory, ids)
    assert expected["answers"]["now"]["remote work policy office days"]  # the scenario has answers

    folder = tmp_path / "cluster"
    folder.mkdir()
    topic, group = f"orgmem-standby-{uuid.uuid4().hex[:8]}", f"orgmem-indexer-{uuid.uuid4().hex[:8]}"
    log = sealing(KafkaEventLog(kafka_bootstrap, topic), Sealer(data_key_store_for(settings)))
    processes: list[IndexerProcess] = []
    try:
        assert append_documents(log, first, SYSTEM).row_ids == ids[:40]
        active = IndexerProcess("a", folder, settings.data_dir, kafka_bootstrap, topic, group)
        processes.append(active)
        wait_until(lambda: active.said("took the stores"), "the first indexer to start")
        standby = IndexerProcess("b", folder, settings.data_dir, kafka_bootstrap, topic, group)
        processes.append(standby)

        wait_until(lambda: checkpoint(folder) > 0, "the active indexer's first batch")
        active.proc.send_signal(signal.SIGKILL)
        active.proc.wait(timeout=30)
        killed_at = checkpoint(folder)
        assert 0 < killed_at < log.head(), "the active indexer was not part way through the log"

        # More arrives while nobody holds the partition.
        assert append_documents(log, second, SYSTEM).row_ids == ids[40:]
        log.append(steps)
        head = log.head()
        wait_until(lambda: checkpoint(folder) == head, f"the standby to reach the head {head}")
        assert standby.said("took the stores") and standby.proc.poll() is None
        standby.proc.send_signal(signal.SIGTERM)
        assert standby.proc.wait(timeout=60) == 0, standby.log_path.read_text()[-3000:]
    finally:
        for process in processes:
            process.stop()

    rows = SqliteRowStore(folder / "rows.sqlite")
    lexical = TantivyLexicalIndex(folder / "lexical")
    vectors = QdrantServerVectorIndex(QdrantClient(path=str(folder / "qdrant")), "orgmem-rows", 384)
    reader = assemble_memory(settings, log, rows, lexical, vectors, role="reader")
    try:
        assert reader.projection.wait_for(head, 10)
        assert projected(reader, ids) == expected
    finally:
        for part in (lexical, vectors, rows, log):
            part.close()

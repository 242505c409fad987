"""A stalled ("zombie") indexer cannot overwrite newer state: row writes are versioned by log
position. Two indexers share one set of projections (SQLite row store, tantivy, the Qdrant server
adapter over qdrant-client's local mode, as in the cluster-equivalence test) and follow one Kafka
log on a real broker (tansu). Indexer A takes a batch and stalls just before it writes it (a
real pause inside its store, released by the test); indexer B applies that batch and the
maintenance steps after it that change the same rows; then A wakes and writes its batch. Every
projection must end as B left it, and the checkpoint must not go back."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from schemas.documents import DocumentIn
from schemas.events import RowArchived, RowSuperseded
from services.core.scope import Scope
from tests.tansu import kafka_bootstrap_or_skip

pytestmark = pytest.mark.slow

T0 = datetime(2024, 5, 6, tzinfo=UTC)
STALL_S = 120  # longest a stalled call waits for the test to release it


@pytest.fixture(scope="module")
def kafka_bootstrap():
    pytest.importorskip("kafka")
    yield from kafka_bootstrap_or_skip()


class Stall:
    """One of indexer A's stores, whose `method` blocks once armed: the indexer process stops
    there (a long GC pause, a frozen VM, a lost network) until the test releases it."""

    def __init__(self, inner, method: str):
        self.inner, self.method = inner, method
        self.armed, self.reached, self.released = False, threading.Event(), threading.Event()

    def __getattr__(self, name):
        attribute = getattr(self.inner, name)
        if name != self.method:
            return attribute

        def stalled(*args, **kwargs):
            if self.armed:
                self.reached.set()
                assert self.released.wait(STALL_S), "the test never released the stalled indexer"
            return attribute(*args, **kwargs)

        return stalled


def documents() -> list[DocumentIn]:
    topics = ["kafka consumer lag", "vendor budget review", "office move plan", "hiring pipeline"]
    return [DocumentIn(text=f"Note {i} on the {topics[i % 4]}: item {i}", author=f"p{i % 3}",
                       date=T0 + timedelta(days=i), kind="email", thread=f"t{i % 4}") for i in range(12)]


def projected_state(rows, vectors, row_ids: list[str]) -> dict:
    """What the projections hold of the rows: the row store's rows, histories and checkpoint, and
    the rows the vector index admits as active (a search as wide as the corpus)."""
    stored = rows.get_many(row_ids)
    query = vectors.vectors(row_ids[-1:])[row_ids[-1]]
    return {
        "rows": {rid: (r.state, r.superseded_by) for rid, r in stored.items()},
        "history": {rid: [(c.position, c.change, c.state) for c in rows.history(rid)] for rid in row_ids},
        "checkpoint": rows.applied_position(),
        "vector_active": sorted(h.row_id for h in vectors.search(query, Scope("default"), len(row_ids))),
    }


@pytest.mark.parametrize("stalls_in", ["rows.apply", "vectors.upsert"])
def test_a_stalled_indexer_that_wakes_late_cannot_put_older_row_states_back(stalls_in, tmp_path, settings,
                                                                              kafka_bootstrap):
    from qdrant_client import QdrantClient

    from services.adapters.event_log.kafka import KafkaEventLog
    from services.adapters.lexical.tantivy import TantivyLexicalIndex
    from services.adapters.row_store.sqlite import SqliteRowStore
    from services.adapters.vector.qdrant_server import QdrantServerVectorIndex
    from services.app.indexer import GroupIndexer, LogFeed
    from services.app.sealing import Sealer, sealing
    from services.bootstrap import assemble_memory, data_key_store_for

    folder = tmp_path / "cluster"
    kafka = KafkaEventLog(kafka_bootstrap, f"orgmem-zombie-{uuid.uuid4().hex[:8]}")
    log = sealing(kafka, Sealer(data_key_store_for(settings)))
    rows = SqliteRowStore(folder / "rows.sqlite")
    lexical = TantivyLexicalIndex(folder / "lexical")
    vectors = QdrantServerVectorIndex(QdrantClient(path=str(folder / "qdrant")), "orgmem-rows", 384)
    store, method = stalls_in.split(".")
    stall = Stall(rows if store == "rows" else vectors, method)
    shared = {"rows": rows, "lexical": lexical, "vectors": vectors}
    a_stores = {**shared, store: stall}
    api = assemble_memory(settings, log, rows, lexical, vectors, role="reader")
    memory_a = assemble_memory(settings, log, a_stores["rows"], lexical, a_stores["vectors"], role="indexer")
    memory_b = assemble_memory(settings, log, **shared, role="indexer")
    try:
        ingested = api.ingest(documents())
        ids = ingested.row_ids
        indexer_a = GroupIndexer(memory_a.projection, LogFeed(log), memory_a.checkpoints, batch=64, poll_s=0.01)
        indexer_b = GroupIndexer(memory_b.projection, LogFeed(log), memory_b.checkpoints, batch=5, poll_s=0.01)

        # A takes the documents' batch and stalls before it writes it.
        stall.armed = True
        a_result: list = []
        a_thread = threading.Thread(target=lambda: a_result.append(indexer_a.step()), daemon=True)
        a_thread.start()
        assert stall.reached.wait(STALL_S), "indexer A never reached its stall point"
        assert rows.applied_position() == 0

        # Meanwhile maintenance moves some of those rows on, and B (the member that took over)
        # applies everything: the documents, then the steps.
        log.append([RowArchived(row_id=ids[0], reason="stale"), RowArchived(row_id=ids[3], reason="stale"),
                      RowSuperseded(row_id=ids[1], superseded_by=ids[2], reason="newer decision")])
        while indexer_b.step().events:
            pass
        head = log.head()
        assert rows.applied_position() == head > ingested.position
        after_b = projected_state(rows, vectors, ids)
        assert after_b["rows"][ids[0]] == ("archived", None) and after_b["rows"][ids[1]] == ("active", ids[2])
        assert after_b["vector_active"] == sorted(set(ids) - {ids[0], ids[3]})

        # A wakes and writes its (older) batch.
        stall.released.set()
        a_thread.join(STALL_S)
        assert not a_thread.is_alive()
        assert a_result and a_result[0].events == len(ids)  # A did apply it, as far as it knows
        assert projected_state(rows, vectors, ids) == after_b
        # Its next step finds the checkpoint past its batch and nothing to do.
        assert indexer_a.step().events == 0 and rows.applied_position() == head
        assert api.projection.wait_for(head, 5)
    finally:
        stall.released.set()
        for part in (lexical, vectors, rows, log):
            part.close()

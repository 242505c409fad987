"""Scale-out by tenant on a real Kafka-protocol broker (tansu): with the log split into two
partitions, one tenant's bulk import no longer holds back another tenant's document. The other
tenant reads its own write (`after=` its position) while most of the import still waits, and
both end fully projected, each in its own lane of checkpoints."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from schemas.documents import DocumentIn
from services.core.caller import Caller
from services.core.positions import lane_of, lane_start
from tests.tansu import kafka_bootstrap_or_skip

pytestmark = pytest.mark.slow

BULK, BULK_BATCH = 24, 25  # 600 documents of one tenant: ~10 s of encoding on one core
SALES, OPS = "sales", "ops"  # lanes 0 and 1 of a two-partition log


@pytest.fixture(scope="module")
def bootstrap():
    pytest.importorskip("kafka")
    yield from kafka_bootstrap_or_skip()


def test_one_tenants_bulk_import_does_not_hold_back_anothers_document(tmp_path, settings, bootstrap):
    from services.adapters.event_log.kafka import KafkaEventLog
    from services.adapters.lexical.tantivy import TantivyLexicalIndex
    from services.adapters.row_store.sqlite import SqliteRowStore
    from services.adapters.vector.qdrant_edge import QdrantEdgeVectorIndex
    from services.app.indexer import GroupIndexer
    from services.app.memory import append_documents
    from services.app.sealing import Sealer, sealing
    from services.bootstrap import assemble_memory, data_key_store_for

    topic = f"orgmem-tenants-{uuid.uuid4().hex[:8]}"
    folder = tmp_path / "projections"
    event_log = sealing(KafkaEventLog(bootstrap, topic, timeout_ms=10_000, partitions=2),
                        Sealer(data_key_store_for(settings)))
    assert (event_log.lane_for(SALES), event_log.lane_for(OPS)) == (0, 1)
    rows = SqliteRowStore(folder / "rows.sqlite")
    memory = assemble_memory(settings, event_log, rows, TantivyLexicalIndex(folder / "lexical"),
                             QdrantEdgeVectorIndex(folder / "vectors", 384), role="indexer")
    feed = indexer = runner = None
    try:
        for i in range(BULK):
            append_documents(event_log, [DocumentIn(text=f"Sales import {i}-{j}: the {j} quote for account {i}",
                                                    author="crm@corp.example") for j in range(BULK_BATCH)],
                             Caller(tenant=SALES))
        mine = append_documents(event_log, [DocumentIn(text="The on-call rota moves to Mondays from March.",
                                                       author="lee@corp.example")], Caller(tenant=OPS))
        assert lane_of(mine.position) == 1
        feed = event_log.subscribe(f"indexer-{topic}", checkpoint=memory.checkpoint, max_poll_records=32)
        indexer = GroupIndexer(memory.projection, feed, memory.checkpoints, batch=32, poll_s=0.05,
                               heads=event_log.heads)
        runner = threading.Thread(target=indexer.run, daemon=True)
        runner.start()

        assert memory.wait_for(mine.position, 90), "the other tenant's document was not projected"
        sales_head = event_log.heads()[0]
        sales_left = event_log.backlog(memory.checkpoint(0), sales_head)
        assert sales_left > BULK // 2, f"only {sales_left} of {BULK} import batches were still waiting"
        scope = memory.scope_for(Caller(tenant=OPS))
        found = memory.query("on-call rota", scope, memory.config_for(None, k=5), after=mine.position)
        assert [s.row.row_id for s in found.selected] == mine.row_ids

        deadline = time.monotonic() + 240
        while not memory.covers(sales_head) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert memory.checkpoints() == {0: sales_head, 1: mine.position}
        assert rows.count(SALES)["active"] == BULK * BULK_BATCH and rows.count(OPS)["active"] == 1
        assert memory.lag(event_log.heads()) == 0 and not indexer.halted
        assert memory.checkpoint(1) > lane_start(1) and memory.head(OPS) == mine.position
    finally:
        if indexer is not None:
            indexer.stop()
        if runner is not None:
            runner.join(30)
        if feed is not None:
            feed.close()
        memory.close()

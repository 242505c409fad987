"""The cluster-profile wiring (reader processes follow the checkpoint; a separate indexer
projects through the consumer-group runner) answers the same scenario with the same top-k ids
as the embedded memory. Here with the adapters that run on this machine: SQLite log, SQLite row
store, tantivy, and the Qdrant *server* adapter over qdrant-client's local mode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from schemas.documents import DocumentIn
from services.core.caller import Caller

pytestmark = pytest.mark.slow

T0 = datetime(2024, 1, 8, tzinfo=UTC)
POLICY = [
    ("Remote work policy: two office days a week for everyone.", "hr", 0),
    ("Update to the remote work policy: three office days a week from March.", "hr", 40),
    ("Remote work policy change: office days are back to two; Fridays stay remote.", "ceo", 90),
]
QUERIES = ["remote work policy office days", "who decided about Fridays", "kafka outage consumer lag",
           "budget review for the vendor contract", "hr"]


def documents() -> list[DocumentIn]:
    docs = [DocumentIn(text=t, author=a, date=T0 + timedelta(days=d), kind="email", thread="remote policy")
            for t, a, d in POLICY]
    topics = ["kafka outage consumer lag", "budget review vendor contract", "hiring plan q3", "office move"]
    for i in range(60):
        docs.append(DocumentIn(text=f"Status {i}: {topics[i % 4]} notes, item {i}", author=f"p{i % 5}",
                               date=T0 + timedelta(days=i), kind="ticket" if i % 3 else "doc",
                               tags=[f"OPS-{i % 7}"]))
    docs.append(DocumentIn(text=POLICY[0][0], author="hr", date=T0))  # an exact repeat: no row
    return docs


def answers(memory, as_of=None) -> dict[str, list[str]]:
    config = memory.config_for(None, k=10)
    scope = memory.scope_for(Caller(), as_of=as_of)
    return {q: [s.row.row_id for s in memory.query(q, scope, config).selected] for q in QUERIES}


def test_cluster_wiring_answers_like_the_embedded_profile(tmp_path, settings, memory):
    from qdrant_client import QdrantClient

    from services.adapters.event_log.sqlite import SqliteEventLog
    from services.adapters.lexical.tantivy import TantivyLexicalIndex
    from services.adapters.row_store.sqlite import SqliteRowStore
    from services.adapters.vector.qdrant_server import QdrantServerVectorIndex
    from services.app.indexer import GroupIndexer, LogFeed
    from services.app.projection import ProjectionFollower
    from services.app.sealing import Sealer, sealing
    from services.bootstrap import assemble_memory, data_key_store_for

    docs = documents()
    memory.ingest(docs)
    memory.catch_up()
    embedded = {"now": answers(memory), "before": answers(memory, T0 + timedelta(days=50))}

    folder = tmp_path / "cluster"
    vectors_client = QdrantClient(path=str(folder / "qdrant"))
    # Sealed under the embedded folder's data keys: ids of texts are keyed by the tenant's key, so the
    # two wirings name the same documents alike only with the same key.
    log = sealing(SqliteEventLog(folder / "log.sqlite"), Sealer(data_key_store_for(settings)))
    rows = SqliteRowStore(folder / "rows.sqlite")
    lexical = TantivyLexicalIndex(folder / "lexical")
    vectors = QdrantServerVectorIndex(vectors_client, "orgmem-rows", 384)
    api = assemble_memory(settings, log, rows, lexical, vectors, role="reader")
    indexer_memory = assemble_memory(settings, log, rows, lexical, vectors, role="indexer")
    try:
        assert isinstance(api.projection, ProjectionFollower)
        position = api.ingest(docs).position
        assert not api.projection.wait_for(position, 0.2)  # nobody has projected yet
        indexer = GroupIndexer(indexer_memory.projection, LogFeed(log), indexer_memory.checkpoints, batch=16, poll_s=0.01)
        while indexer.step().events:
            pass
        assert indexer.feed.committed == position == log.head()
        assert api.projection.wait_for(position, 5)
        cluster = {"now": answers(api), "before": answers(api, T0 + timedelta(days=50))}
        assert cluster == embedded
        assert embedded["now"][QUERIES[0]][:1] != []  # the scenario has answers at all
        # A rebuild from a reader process: it resets, the indexer replays, the answers hold.
        rows.reset(), lexical.reset(), vectors.reset()
        while indexer.step().events:
            pass
        assert api.projection.catch_up().events >= 0 and api.projection.applied == position
        assert {"now": answers(api), "before": answers(api, T0 + timedelta(days=50))} == embedded
    finally:
        for part in (lexical, vectors, rows, log):
            part.close()

"""One indexer process of tests/integration/test_standby_takeover.py: the cluster indexer's runner
(`orgmem indexer --profile cluster`: a member of the Kafka consumer group driving GroupIndexer)
over the stores that run on this machine, in one folder: the SQLite row store, tantivy and the
Qdrant server adapter in qdrant-client's local mode.

Elasticsearch and a Qdrant server take writes from any number of processes; tantivy and Qdrant's
local mode take one process each (their folder locks). So this process first waits for the
folder's lock (`flock`, which the kernel releases when the holder dies, `kill -9` included) and
only then opens the stores and joins the group: the standby waits as a member without the
partition would, and takes over through the same group rebalance and checkpoint.

    python -m tests.integration.standby_indexer FOLDER DATA_DIR BOOTSTRAP TOPIC GROUP BATCH
"""

from __future__ import annotations

import fcntl
import logging
import signal
import sys
from pathlib import Path


def main(folder: Path, data_dir: Path, bootstrap: str, topic: str, group: str, batch: int) -> int:
    # The runner's own lines (assignments, batches) with times: what a failed test shows.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    logging.getLogger("kafka").setLevel(logging.WARNING)
    lock = open(folder / "writer.lock", "w")  # noqa: SIM115 - held for the life of the process
    fcntl.flock(lock, fcntl.LOCK_EX)
    logging.getLogger(__name__).info("took the stores")

    from qdrant_client import QdrantClient

    from services.adapters.event_log.kafka import KafkaEventLog
    from services.adapters.lexical.tantivy import TantivyLexicalIndex
    from services.adapters.row_store.sqlite import SqliteRowStore
    from services.adapters.vector.qdrant_server import QdrantServerVectorIndex
    from services.app.indexer import GroupIndexer
    from services.app.sealing import Sealer, sealing
    from services.bootstrap import assemble_memory, data_key_store_for, indexer_feed
    from services.settings import Settings

    # The test's settings (tests/conftest.py), in the cluster profile; data keys from the test's
    # data folder, so that row ids are those of the embedded run.
    settings = Settings(data_dir=data_dir, indexer_poll_s=0.05, embedder={"encoder_processes": 1},
                        profile="cluster", erasure={"key_store": "sqlite"})
    log = sealing(KafkaEventLog(bootstrap, topic), Sealer(data_key_store_for(settings)))
    rows = SqliteRowStore(folder / "rows.sqlite")
    lexical = TantivyLexicalIndex(folder / "lexical")
    vectors = QdrantServerVectorIndex(QdrantClient(path=str(folder / "qdrant")), "orgmem-rows", 384)
    memory = assemble_memory(settings, log, rows, lexical, vectors, role="indexer")
    feed = indexer_feed(settings, memory, group, batch)
    indexer = GroupIndexer(memory.projection, feed, memory.checkpoint, batch=batch, poll_s=0.05, head=memory.head)
    signal.signal(signal.SIGTERM, lambda *_: indexer.stop())
    try:
        indexer.run()
    finally:
        feed.close()
        memory.close()
    return 3 if indexer.halted else 0


if __name__ == "__main__":
    folder_, data_dir_, bootstrap_, topic_, group_, batch_ = sys.argv[1:7]
    sys.exit(main(Path(folder_), Path(data_dir_), bootstrap_, topic_, group_, int(batch_)))

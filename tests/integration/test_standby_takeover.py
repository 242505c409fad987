"""After `kill -9` of the active indexer process a hot standby takes over, and the projections
end exactly as an uninterrupted run's: the same rows in the same states with the same histories,
and the same answers as the embedded profile gives for the same events.

Real processes on a real Kafka-protocol broker (tansu): two `orgmem indexer --profile cluster`,
started together, both members of one consumer group over a one-partition log, both with the
stores open: the shared-folder rows and lexical index (`cluster.stores = "shared-folder"`: SQLite
and tantivy in one folder every process opens) and the Qdrant server adapter over HTTP to the
Qdrant REST stand-in (tests/qdrant_rest.py; no Qdrant server runs here). One member holds the
partition, the other none. The test kills the holder with SIGKILL after its first committed
batch, part way through the log, and appends more while the group waits out the dead member's
session (30 s) and hands the partition to the standby, which resumes after the checkpoint."""

from __future__ import annotations

import signal
import sqlite3
import time
import uuid
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

import pytest

from schemas.events import RowArchived, RowSuperseded
from tests.integration.test_cluster_equivalence import T0, answers, documents
from tests.integration.test_cluster_processes import (
    Orgmem,
    cluster_env,
    stop_together,
    wait_until,
)
from tests.qdrant_rest import qdrant_rest_url
from tests.tansu import kafka_bootstrap_or_skip

pytestmark = pytest.mark.slow

BATCH = 2  # events per batch: the log is many batches, so the kill lands part way through it
TAKEOVER_S = 240  # a dead member's session (30 s) and the rebalance, on a shared host


@pytest.fixture(scope="module")
def kafka_bootstrap():
    pytest.importorskip("kafka")
    pytest.importorskip("qdrant_client")
    yield from kafka_bootstrap_or_skip()


def checkpoint(shared: Path) -> int:
    """The row store's applied position, read as another process would (0 before it exists)."""
    try:
        with sqlite3.connect(f"file:{shared / 'rows.sqlite'}?mode=ro", uri=True, timeout=5) as conn:
            found = conn.execute("SELECT value FROM meta WHERE key = 'applied_position'").fetchone()
    except sqlite3.OperationalError:  # not created yet
        return 0
    return int(found[0]) if found else 0


def membership(process: Orgmem) -> str | None:
    """What the member's last rebalance line says: "holder" (it was assigned the partition),
    "standby" (assigned none), "rebalancing" (its partitions were revoked and nothing assigned
    since), or None before its first."""
    last = None
    for line in process.log_path.read_text(errors="replace").splitlines():
        if "indexer: partitions revoked" in line:
            last = "rebalancing"
        elif "indexer: assigned no partition" in line:
            last = "standby"
        elif "indexer: assigned " in line:
            last = "holder"
    return last


def group_settled(indexers: list[Orgmem]) -> bool:
    """Both members joined, each past its last rebalance, one holding the partition and the other
    standing by. (A later rebalance on tansu can still move the partition: the test takes the
    active member to be the one that indexes.)"""
    return sorted(membership(indexer) or "" for indexer in indexers) == ["holder", "standby"]


def projected(memory, row_ids: list[str]) -> dict:
    """Rows, states and histories without log positions and times (a Kafka position is not an
    SQLite log's), and the answers."""
    return {
        "rows": {rid: (row.state, row.superseded_by) for rid in row_ids if (row := memory.stored_row(rid))},
        "history": {rid: [(c.change, c.state, c.superseded_by, c.reason) for c in memory.row_history(rid)]
                    for rid in row_ids},
        "answers": {"now": answers(memory), "before": answers(memory, T0 + timedelta(days=50))},
    }


def test_a_hot_standby_takes_over_from_a_killed_indexer_and_ends_as_an_uninterrupted_run(
        tmp_path, settings, memory, kafka_bootstrap, monkeypatch):
    from services.adapters.event_log.kafka import KafkaEventLog
    from services.app.memory import append_documents
    from services.app.sealing import Sealer, sealing
    from services.bootstrap import data_key_store_for, open_memory
    from services.core.caller import SYSTEM
    from services.settings import Settings

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

    shared = tmp_path / "cluster-shared"
    topic, group = f"orgmem-standby-{uuid.uuid4().hex[:8]}", f"orgmem-indexer-{uuid.uuid4().hex[:8]}"
    with ExitStack() as stack:
        qdrant_url = stack.enter_context(qdrant_rest_url(tmp_path / "qdrant"))
        env = cluster_env(tmp_path / "cluster-data", shared, kafka_bootstrap, topic, qdrant_url,
                          Path(settings.data_dir) / "data-keys.sqlite")
        log = sealing(KafkaEventLog(kafka_bootstrap, topic), Sealer(data_key_store_for(settings)))
        stack.callback(log.close)
        indexers = [Orgmem(f"indexer-{name}", ["indexer", "--profile", "cluster", "--group", group,
                                               "--batch", str(BATCH)], env, tmp_path) for name in ("a", "b")]
        stack.callback(stop_together, indexers)
        wait_until(lambda: group_settled(indexers),
                   "both indexers in the group, one holding the partition and one standing by", indexers)
        assert append_documents(log, first, SYSTEM).row_ids == ids[:40]
        # The active member is the one that indexes: a late rebalance on tansu can still move the
        # partition from the member first assigned it. Its log line comes just after the batch's
        # commit: wait for both, or the kill can land between.
        wait_until(lambda: checkpoint(shared) > 0 and any(i.said("indexed") for i in indexers),
                   "the active indexer's first batch", indexers)
        active = next(indexer for indexer in indexers if indexer.said("indexed"))
        standby = next(indexer for indexer in indexers if indexer is not active)
        killed = time.monotonic()
        active.proc.send_signal(signal.SIGKILL)
        active.proc.wait(timeout=30)
        killed_at = checkpoint(shared)
        assert 0 < killed_at < log.head(), "the active indexer was not part way through the log"
        assert active.said("indexed") and not standby.said("indexed")  # the standby only stood by

        # More arrives while the group waits out the dead member's session.
        assert append_documents(log, second, SYSTEM).row_ids == ids[40:]
        log.append(steps)
        head = log.head()
        wait_until(lambda: standby.said("indexed"), "the standby's first batch", [standby], TAKEOVER_S)
        takeover_s = time.monotonic() - killed
        print(f"\ntakeover: {takeover_s:.1f} s from kill -9 of the active indexer to the standby's first batch "
              f"(checkpoint {killed_at} at the kill)")
        assert standby.said("indexer: assigned")
        wait_until(lambda: checkpoint(shared) == head, f"the standby to reach the head {head}", [standby], TAKEOVER_S)
        standby.proc.send_signal(signal.SIGTERM)
        assert standby.proc.wait(timeout=60) == 0, standby.output()

        # The projections as any process of the cluster reads them (the same settings).
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        with open_memory(Settings(), role="reader") as reader:
            assert reader.projection.wait_for(head, 10)
            assert projected(reader, ids) == expected

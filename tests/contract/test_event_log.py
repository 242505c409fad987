"""EventLog contract: every adapter of the port passes the same tests."""

import sqlite3
import threading
import uuid
from itertools import pairwise

import pytest

from schemas.documents import DocumentIn
from schemas.events import DocumentObserved, RowArchived
from tests.tansu import kafka_bootstrap_or_skip


def _sqlite(tmp_path):
    from services.adapters.event_log.sqlite import SqliteEventLog

    return SqliteEventLog(tmp_path / "log.sqlite")


@pytest.fixture(scope="module")
def kafka_bootstrap():
    yield from kafka_bootstrap_or_skip()


def _kafka(request, tmp_path):
    pytest.importorskip("kafka")
    from services.adapters.event_log.kafka import KafkaEventLog
    from services.settings import ClusterSettings

    return KafkaEventLog.from_settings(ClusterSettings(
        kafka_bootstrap=request.getfixturevalue("kafka_bootstrap"), kafka_topic=f"orgmem-test-{uuid.uuid4().hex[:8]}"))


def _sqlite_log(request, tmp_path):
    return _sqlite(tmp_path)


@pytest.fixture(params=[_sqlite_log, _kafka], ids=["sqlite", "kafka"])
def event_log(request, tmp_path):
    log = request.param(request, tmp_path)
    yield log
    log.close()


def doc_event(i, tenant="t"):
    return DocumentObserved(tenant=tenant, row_id=f"r{i}", document=DocumentIn(text=f"document {i}", author="a"))


def test_positions_increase_and_read_returns_log_order(event_log):
    first = event_log.append([doc_event(1), doc_event(2)])
    second = event_log.append([RowArchived(tenant="t", row_id="r1", reason="test")])
    positions = [e.position for e in first + second]
    assert positions == sorted(positions) and len(set(positions)) == 3
    assert event_log.head() == positions[-1]
    read = event_log.read(0, 100)
    assert [e.position for e in read] == positions
    assert read[0].event == first[0].event and read[2].event.type == "row_archived"
    assert [e.position for e in event_log.read(positions[0], 1)] == [positions[1]]
    assert all(a.appended_at <= b.appended_at for a, b in pairwise(read))


def test_empty_log_and_empty_append(event_log):
    assert event_log.head() == 0
    assert event_log.append([]) == []
    assert event_log.read(0, 10) == []


def test_concurrent_appenders_never_share_a_position(event_log):
    def work(base):
        for i in range(20):
            event_log.append([doc_event(base + i)])

    threads = [threading.Thread(target=work, args=(k * 100,)) for k in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    read = event_log.read(0, 1000)
    assert len(read) == 80 and len({e.position for e in read}) == 80


def test_sqlite_log_refuses_update_and_delete(tmp_path):
    log = _sqlite(tmp_path)
    log.append([doc_event(1)])
    raw = sqlite3.connect(tmp_path / "log.sqlite")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        raw.execute("UPDATE events SET body = '{}'")
    with pytest.raises(sqlite3.DatabaseError, match="append-only"):
        raw.execute("DELETE FROM events")
    raw.close()
    assert len(log.read(0, 10)) == 1


def test_sqlite_batch_is_whole_or_nothing(tmp_path):
    log = _sqlite(tmp_path)
    log.append([doc_event(1)])

    class Broken(DocumentObserved):
        def model_dump_json(self, **kw):  # fails while the batch is being written
            raise RuntimeError("serialisation failed")

    bad = Broken(tenant="t", row_id="rX", document=DocumentIn(text="x"))
    with pytest.raises(RuntimeError):
        log.append([doc_event(2), bad])
    assert [e.event.row_id for e in log.read(0, 10)] == ["r1"]


def test_sqlite_log_persists_across_reopen(tmp_path):
    log = _sqlite(tmp_path)
    log.append([doc_event(1), doc_event(2)])
    log.close()
    again = _sqlite(tmp_path)
    assert again.head() == 2 and len(again.read(0, 10)) == 2
    again.close()

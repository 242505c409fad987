"""The Kafka event log's batches against a real Kafka-protocol broker (tansu, or
ORGMEM_KAFKA_BOOTSTRAP): one record per appended batch, so a batch is whole without transactions;
a position handed out is readable at once even while another producer holds a transaction open;
positions increase and map back, also from inside a record; a batch too large is refused whole."""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from itertools import pairwise

import pytest

pytest.importorskip("kafka")

from schemas.documents import DocumentIn  # noqa: E402
from schemas.events import DocumentObserved, RowArchived  # noqa: E402
from services.adapters.event_log.kafka import (  # noqa: E402
    SPAN,
    KafkaEventLog,
    driver_errors,
    offset_after,
)
from services.errors import BackendUnavailable, Invalid, TooLarge  # noqa: E402

WORDS = "budget remote policy quarter hiring vendor contract travel review launch audit roadmap".split()


def batch(tag: str, n: int, text_bytes: int = 64) -> list[DocumentObserved]:
    rng = random.Random(tag)
    return [DocumentObserved(tenant="t", row_id=f"{tag}-{j}", document=DocumentIn(
        title=f"{tag}/{n}", author="ana@corp.example",
        text=" ".join(rng.choice(WORDS) for _ in range(text_bytes // 7)))) for j in range(n)]


def batches_seen(events) -> Counter:
    """Events per batch tag; the title says how many the batch has."""
    return Counter(e.event.document.title for e in events if getattr(e.event, "document", None))


def check_whole(events) -> None:
    for title, count in batches_seen(events).items():
        assert count == int(title.rsplit("/", 1)[1]), f"batch {title} read in part: {count} events"


class Writer(threading.Thread):
    """Another writer: appends big batches until stopped."""

    def __init__(self, event_log: KafkaEventLog, size: int, text_bytes: int, limit: int = 1_000):
        super().__init__(daemon=True)
        self.log, self.size, self.text_bytes, self.limit = event_log, size, text_bytes, limit
        self.stop, self.appended, self.error = threading.Event(), [], None

    def run(self) -> None:
        try:
            while not self.stop.is_set() and len(self.appended) < self.limit:
                logged = self.log.append(batch(f"w{len(self.appended)}", self.size, self.text_bytes))
                self.appended.append([e.position for e in logged])
        except Exception as exc:  # the test asserts on it
            self.error = exc


def test_an_acknowledged_batch_is_never_read_in_part(logs):
    writer_log, reader_log = logs(), logs(create_topic=False)
    writer = Writer(writer_log, size=300, text_bytes=2_000, limit=8)  # about 0.6 MB of JSON each
    writer.start()
    reads, after, seen = 0, 0, []
    while writer.is_alive() or after < reader_log.head():
        whole = reader_log.read(0, 100_000)  # everything there is, from the start
        check_whole(whole)
        fresh = reader_log.read(after, 100_000)  # what is new since the last read
        check_whole(fresh)
        if fresh:
            after = fresh[-1].position
            seen += fresh
        reads += 1
    assert writer.error is None
    assert reads > 1 and len(writer.appended) == 8
    assert [e.position for e in seen] == [p for positions in writer.appended for p in positions]
    # One record per batch: its events share the append time, and the last one closes the record.
    for positions in writer.appended:
        assert positions[-1] % SPAN == 0 and positions == list(range(positions[0], positions[-1] + 1))
    stamps = {(e.event.document.title, e.appended_at) for e in seen}
    assert len(stamps) == len(writer.appended)


def test_a_position_handed_out_is_readable_at_once_while_others_are_mid_append(logs, bootstrap, topic):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    api, other_replica = logs(), logs(create_topic=False)
    api.append(batch("before", 3))
    # A foreign producer holds a transaction open on the topic: the case that made a position just
    # handed out read as past the log head, since the last stable offset stays behind it.
    foreign = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"foreign-{topic}", enable_idempotence=True)
    foreign.init_transactions()
    foreign.begin_transaction()
    foreign_offset = foreign.send(topic, value=b'{"type":"document_observed"}', partition=0).get(10).offset
    committed_reader = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", group_id=None)
    tp = TopicPartition(topic, 0)
    writer = Writer(logs(create_topic=False), size=200, text_bytes=2_000)
    writer.start()
    try:
        while not writer.appended and writer.error is None:
            time.sleep(0.01)
        for i in range(10):
            logged = api.append(batch(f"mine{i}", 4))
            last = logged[-1].position
            # What the API checks before it waits for `after`, on this replica and on another one.
            assert api.head() >= last and other_replica.head() >= last
            assert other_replica.read(logged[0].position - 1, 4) == logged
            assert other_replica.read(logged[1].position, 2) == logged[2:]
        # The precondition held all along: a read_committed reader saw a stale end of the log.
        assert committed_reader.end_offsets([tp])[tp] <= foreign_offset < offset_after(last)
    finally:
        writer.stop.set()
        writer.join(timeout=60)
        committed_reader.close()
        foreign.abort_transaction()
        foreign.close()
    assert writer.error is None and len(writer.appended) >= 1
    # The foreign record itself is refused by name, never misread as an event.
    with pytest.raises(BackendUnavailable, match=f"offset {foreign_offset} has no format header"):
        other_replica.read(0, 1_000)


def test_positions_increase_and_map_back_from_inside_a_record(logs):
    event_log = logs()
    sizes = [5, 1, 3, 2]
    logged = [e for i, n in enumerate(sizes) for e in event_log.append(batch(f"b{i}", n))]
    positions = [e.position for e in logged]
    assert all(a < b for a, b in pairwise(positions))
    assert positions[-1] < 2**53 and event_log.head() == positions[-1]
    # After any position — an event's, a gap's, 0 — the next events come, and only those.
    probes = sorted({0, *positions, *(p - 1 for p in positions), positions[-1] + 1})
    for after in probes:
        assert [e.position for e in event_log.read(after, 100)] == [p for p in positions if p > after], after
    assert event_log.read(positions[1], 2) == logged[2:4]  # a limit inside the first record


def test_the_indexer_feed_splits_records_and_resumes_inside_one(logs):
    event_log = logs()
    logged = [e for i, n in enumerate([5, 3]) for e in event_log.append(batch(f"f{i}", n))]
    positions = [e.position for e in logged]
    checkpoint = positions[1]  # two events of the first record are applied already
    feed = event_log.subscribe(f"group-{uuid.uuid4().hex[:6]}", checkpoint=lambda lane: checkpoint, max_poll_records=2)
    try:
        got, deadline = [], time.monotonic() + 60  # a first group assignment takes tansu ~15 s
        while len(got) < len(positions) - 2 and time.monotonic() < deadline:
            polled = feed.poll(max_records=2, timeout_s=0.5)
            assert len(polled) <= 2
            got += polled
            if polled:
                feed.commit(polled[-1].position)
        assert [e.position for e in got] == positions[2:]
        committed = feed.consumer.committed(feed._tp(positions[-1]))
        assert committed == offset_after(positions[-1]) == 2  # the last record is applied whole
        feed.seek(positions[5])  # the first event of the second record: a partial read of it
        again = []
        while len(again) < 2 and time.monotonic() < deadline:
            again += feed.poll(max_records=10, timeout_s=0.5)
        assert [e.position for e in again] == positions[6:]
    finally:
        feed.close()


def test_a_batch_too_large_is_refused_whole_and_nothing_is_appended(logs):
    event_log = logs(max_record_bytes=1024 * 1024)
    first = event_log.append(batch("small", 2))
    with pytest.raises(TooLarge, match="over cluster.kafka_max_record_bytes") as refused:
        event_log.append(batch("huge", 200, text_bytes=8_000))  # about 1.6 MB of JSON
    with pytest.raises(Invalid, match=f"at most {SPAN} events"):
        event_log.append([RowArchived(tenant="t", row_id="r")] * (SPAN + 1))
    assert event_log.head() == first[-1].position
    assert event_log.read(0, 1_000) == first
    after = event_log.append(batch("after", 1))  # the producer is fine: the next batch goes in
    assert event_log.read(0, 1_000) == first + after
    from services.api.problems import rule_for

    assert rule_for(refused.value).status == 413


def test_a_broker_that_refuses_a_record_as_too_large_is_too_large():
    from kafka.errors import MessageSizeTooLargeError

    with pytest.raises(TooLarge, match="message.max.bytes"), driver_errors("append"):
        raise MessageSizeTooLargeError("MESSAGE_SIZE_TOO_LARGE")


def test_a_topic_written_one_event_per_record_is_refused_not_misread(logs, bootstrap, topic):
    from kafka import KafkaProducer

    event_log = logs()  # creates the topic with its one partition
    # The previous adapter's format: each event a record of its own, in a transaction.
    old = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"old-{topic}", enable_idempotence=True)
    old.init_transactions()
    old.begin_transaction()
    for event in batch("old", 2):
        old.send(topic, value=event.model_dump_json().encode(), partition=0, headers=[("type", b"document_observed")])
    old.commit_transaction()
    old.close()
    with pytest.raises(BackendUnavailable, match="offset 0 has no format header.*previous adapter"):
        event_log.read(0, 10)


def test_the_backlog_counts_batches_not_the_gaps_between_positions(logs):
    """/readyz compares the backlog with indexer_max_lag: head - applied would count 65,536 per batch."""
    event_log = logs()
    first = [e.position for e in event_log.append(batch("b1", 3))]
    second = [e.position for e in event_log.append(batch("b2", 3))]
    head = event_log.head()
    assert head == second[-1] and head - first[-1] == 2**16  # what the raw difference would count for one batch
    assert event_log.backlog(0, head) == 2
    assert event_log.backlog(first[0], head) == 2  # a batch applied in part is still owed
    assert event_log.backlog(first[-1], head) == 1
    assert event_log.backlog(second[1], head) == 1
    assert event_log.backlog(head, head) == 0
    assert event_log.backlog(head + 2**16, head) == -1  # the log is behind the checkpoint

"""The Kafka event log split by tenant, against a real Kafka-protocol broker (tansu, or
ORGMEM_KAFKA_BOOTSTRAP): each tenant's batches go to its partition, each partition is a lane of
positions read, counted and committed on its own, and the partition count cannot change under
an existing log (it would move tenants and split their order)."""

from __future__ import annotations

import time
import uuid

import pytest

pytest.importorskip("kafka")

from schemas.documents import DocumentIn  # noqa: E402
from schemas.events import DocumentObserved  # noqa: E402
from services.core.positions import Checkpoints, lane_of, lane_start  # noqa: E402
from services.errors import Invalid, OrgmemError  # noqa: E402

SALES, OPS = "sales", "ops"  # lanes 0 and 1 of a two-partition log (asserted below)


def batch(tenant: str, tag: str, n: int) -> list[DocumentObserved]:
    return [DocumentObserved(tenant=tenant, row_id=f"{tag}-{j}",
                             document=DocumentIn(text=f"{tag} note {j}", author="ana@corp.example"))
            for j in range(n)]


def test_each_tenant_writes_and_reads_its_own_lane(logs):
    event_log = logs(partitions=2)
    assert (event_log.lane_for(SALES), event_log.lane_for(OPS)) == (0, 1)
    assert event_log.heads() == {0: 0, 1: lane_start(1)}  # empty: each lane at its start
    sales = event_log.append(batch(SALES, "s1", 3)) + event_log.append(batch(SALES, "s2", 2))
    ops = event_log.append(batch(OPS, "o1", 4))
    assert {lane_of(e.position) for e in sales} == {0} and {lane_of(e.position) for e in ops} == {1}
    # Lane 0 counts exactly as a one-partition log does: (offset + 1) * 65536 per record's last event.
    assert [e.position for e in sales][-1] == 2 * 65_536 and ops[-1].position == lane_start(1) + 65_536
    assert event_log.heads() == {0: sales[-1].position, 1: ops[-1].position}
    assert event_log.head() == sales[-1].position  # lane 0's, as before lanes
    # A read names its lane by its position and never returns another lane's events.
    assert [e.event.row_id for e in event_log.read(0, 100)] == [e.event.row_id for e in sales]
    assert [e.event.row_id for e in event_log.read(lane_start(1), 100)] == [e.event.row_id for e in ops]
    assert [e.position for e in event_log.read(ops[1].position, 100)] == [e.position for e in ops[2:]]
    assert event_log.read(sales[-1].position, 100) == []
    # Each lane's backlog, in records: lane 0 holds two, lane 1 one.
    heads = event_log.heads()
    assert event_log.backlog(0, heads[0]) == 2 and event_log.backlog(lane_start(1), heads[1]) == 1
    assert event_log.backlog(ops[0].position, heads[1]) == 1  # a record applied in part is still owed
    with pytest.raises(Invalid, match="lane 5; the log has 2 partitions"):
        event_log.read(lane_start(5), 10)


def test_a_batch_of_two_tenants_is_refused_before_anything_is_written(logs):
    event_log = logs(partitions=2)
    with pytest.raises(Invalid, match="one tenant's events"):
        event_log.append(batch(SALES, "s", 1) + batch(OPS, "o", 1))
    assert event_log.heads() == {0: 0, 1: lane_start(1)}


def test_the_partition_count_cannot_change_under_an_existing_log(logs):
    logs(partitions=2).append(batch(OPS, "o", 1))
    for count in (1, 3):
        with pytest.raises(OrgmemError, match=f"has 2 partitions and cluster.kafka_partitions is {count}"):
            logs(partitions=count)
    with pytest.raises(OrgmemError, match="1 to 64"):
        logs(partitions=0)


def test_a_group_member_resumes_each_lane_at_its_own_checkpoint_and_commits_per_lane(logs, topic):
    from kafka import TopicPartition

    event_log = logs(partitions=2)
    sales = event_log.append(batch(SALES, "s", 3))
    ops = event_log.append(batch(OPS, "o1", 2)) + event_log.append(batch(OPS, "o2", 2))
    checkpoints = Checkpoints({0: sales[0].position, 1: ops[1].position})  # each lane applied in part
    feed = event_log.subscribe(f"group-{uuid.uuid4().hex[:6]}", checkpoint=checkpoints.of, max_poll_records=2)
    try:
        got, deadline = [], time.monotonic() + 60  # a first group assignment takes tansu ~15 s
        while len(got) < 4 and time.monotonic() < deadline:
            polled = feed.poll(max_records=2, timeout_s=0.5)
            assert len(polled) <= 2
            got += polled
        assert feed.lanes() == [0, 1]
        assert sorted(e.position for e in got) == sorted([e.position for e in sales[1:]] + [e.position for e in ops[2:]])
        for lane in (0, 1):  # each lane's events in its own order
            positions = [e.position for e in got if lane_of(e.position) == lane]
            assert positions == sorted(positions)
        feed.commit(sales[-1].position)
        feed.commit(ops[2].position)  # inside lane 1's second record: that record is still owed
        committed = {p: feed.consumer.committed(TopicPartition(topic, p)) for p in (0, 1)}
        assert committed == {0: 1, 1: 1}
        feed.seek(lane_start(1))  # lane 1 again from its start; lane 0 stays where it is
        again, deadline = [], time.monotonic() + 30
        while len(again) < 4 and time.monotonic() < deadline:
            again += feed.poll(max_records=10, timeout_s=0.5)
        assert [e.position for e in again] == [e.position for e in ops]
    finally:
        feed.close()


def test_a_lanes_backlog_does_not_hold_back_another_lanes_events(logs):
    # One tenant's bulk import (40 records, 400 events) is in lane 0 before another tenant's one
    # document in lane 1. The feed takes the lanes in turn: lane 1's event comes with the first
    # batches, not after the 40 records (kafka-python alone would hand out lane 0's fetch first).
    event_log = logs(partitions=2)
    bulk = [e for i in range(40) for e in event_log.append(batch(SALES, f"bulk{i}", 10))]
    [single] = event_log.append(batch(OPS, "one", 1))
    feed = event_log.subscribe(f"group-{uuid.uuid4().hex[:6]}", checkpoint=Checkpoints().of, max_poll_records=20)
    try:
        polls, deadline = [], time.monotonic() + 60
        while sum(map(len, polls)) < len(bulk) + 1 and time.monotonic() < deadline:
            polled = feed.poll(max_records=20, timeout_s=0.5)
            if polled:
                assert len({lane_of(e.position) for e in polled}) == 1  # one lane per batch
                assert len(polled) <= 20
                polls.append(polled)
        handed = [e for polled in polls for e in polled]
        assert sorted(e.position for e in handed) == sorted([e.position for e in bulk] + [single.position])
        when = next(i for i, polled in enumerate(polls) if single.position in {e.position for e in polled})
        assert when <= 2, f"lane 1's event came with batch {when} of {len(polls)}"
        assert [e.position for e in handed if lane_of(e.position) == 0] == [e.position for e in bulk]
    finally:
        feed.close()


def test_the_feed_serves_lanes_with_events_in_turn():
    from types import SimpleNamespace

    from services.adapters.event_log.kafka_subscription import KafkaSubscription

    feed = object.__new__(KafkaSubscription)  # the turn-taking alone, without a broker
    feed._last_lane = -1
    feed._pending = {0: [SimpleNamespace(position=p) for p in range(1, 51)],
                     1: [SimpleNamespace(position=lane_start(1) + p) for p in range(1, 6)], 2: []}
    served = [feed._take_turn(20) for _ in range(5)]
    assert [lane_of(batch[0].position) if batch else None for batch in served] == [0, 1, 0, 0, None]
    assert [len(batch) for batch in served] == [20, 5, 20, 10, 0]

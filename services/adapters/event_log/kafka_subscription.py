"""The indexer's feed over the Kafka event log: one member of a consumer group (kafka.py has the
log itself, kafka_records.py the records and positions)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from schemas.events import LoggedEvent
from services.adapters.event_log.kafka import KafkaEventLog, driver_errors
from services.adapters.event_log.kafka_records import logged_from_record, offset_after
from services.core.positions import lane_of

log = logging.getLogger(__name__)


class KafkaSubscription:
    """The indexer's feed: a member of consumer group `group_id`. Kafka shares the partitions
    among the members (each partition to one member at a time); a member without any waits as a
    hot standby and takes over on a rebalance.

    The projections' own checkpoint of each lane (in the row store) decides where reading starts,
    not the group's committed offset: on every assignment the consumer seeks each partition to
    `checkpoint(lane)`. Offsets are still committed after each applied batch, so
    `kafka-consumer-groups` shows the lag.

    A poll hands out at most `max_records` events of ONE lane, in its order, taking the lanes
    with events in turn: a tenant's bulk import in one partition then costs another tenant at
    most one batch of waiting, not the whole import (kafka-python hands out a fetch's records
    partition after partition). Each lane buffers at most `max_records` events: the records
    past that are left in the log (the partition is sought back to the first of them) and
    fetched again when the lane has room. Not `pause()`: kafka-python 3.0 can leave a paused
    partition's parked records unrestored after `resume()`, and the partition is never fetched
    again (seen on tansu)."""

    def __init__(self, event_log: KafkaEventLog, group_id: str, checkpoint: Callable[[int], int],
                 max_poll_records: int, max_poll_interval_ms: int):
        from kafka import ConsumerRebalanceListener

        self.topic = event_log.topic
        self._checkpoint = checkpoint
        self._after: dict[int, int] = {}  # per lane, the position last sought to: its record's events up to it are dropped
        self._pending: dict[int, list[LoggedEvent]] = {}  # per lane, fetched and not handed out
        self._last_lane = -1  # the lane the last poll handed out: the next poll starts after it
        subscription = self

        class _Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                log.info("indexer: partitions revoked: %s", revoked)
                subscription._pending = {}  # (eager rebalance) every partition is sought again on assignment

            def on_partitions_assigned(self, assigned):
                if not assigned:
                    log.info("indexer: assigned no partition; standing by")
                for tp in assigned:
                    position = subscription._checkpoint(tp.partition)
                    log.info("indexer: assigned %s; resuming after position %d", tp, position)
                    subscription._seek_consumer(position)

        with driver_errors(f"join consumer group {group_id}"):
            self.consumer = event_log._consumer(
                group_id=group_id, max_poll_records=max_poll_records, max_poll_interval_ms=max_poll_interval_ms,
                session_timeout_ms=30_000, heartbeat_interval_ms=3_000,
            )
            self.consumer.subscribe([event_log.topic], listener=_Listener())

    def _tp(self, position: int):
        from kafka import TopicPartition

        return TopicPartition(self.topic, lane_of(position))

    def _seek_consumer(self, position: int) -> None:
        lane = lane_of(position)
        tp = self._tp(position)
        self.consumer.seek(tp, offset_after(position))
        self._after[lane] = position
        self._pending.pop(lane, None)

    def lanes(self) -> list[int]:
        """The lanes (partitions) this member holds now."""
        return sorted(tp.partition for tp in self.consumer.assignment())

    def assigned(self) -> bool:
        return bool(self.consumer.assignment())

    def poll(self, max_records: int, timeout_s: float) -> list[LoggedEvent]:
        deadline = time.monotonic() + timeout_s
        with driver_errors("poll"):
            while not self._full(max_records):
                # Wait only while nothing is in hand; then take what is already fetched.
                waiting = not any(self._pending.values())
                wait_s = max(0.0, deadline - time.monotonic()) if waiting else 0.0
                fetched = self.consumer.poll(timeout_ms=int(wait_s * 1000))
                if not fetched:
                    break
                for tp, records in fetched.items():
                    self._buffer(tp, records, max_records)
        return self._take_turn(max_records)

    def _full(self, max_records: int) -> bool:
        assigned = self.consumer.assignment()
        return bool(assigned) and all(len(self._pending.get(tp.partition, ())) >= max_records for tp in assigned)

    def _buffer(self, tp, records, max_records: int) -> None:
        pending = self._pending.setdefault(tp.partition, [])
        for record in records:
            if len(pending) >= max_records:
                # The lane is full: this record and the rest stay in the log for a later fetch.
                self.consumer.seek(tp, record.offset)
                return
            pending += logged_from_record(record, self._after.get(tp.partition, 0))

    def _take_turn(self, max_records: int) -> list[LoggedEvent]:
        """Up to `max_records` events of the next lane after the last one served that has any."""
        ready = sorted(lane for lane, pending in self._pending.items() if pending)
        if not ready:
            return []
        lane = next((lane for lane in ready if lane > self._last_lane), ready[0])
        self._last_lane = lane
        handed, self._pending[lane] = self._pending[lane][:max_records], self._pending[lane][max_records:]
        return handed

    def seek(self, position: int) -> None:
        if self._tp(position) in self.consumer.assignment():
            with driver_errors("seek"):
                self._seek_consumer(position)

    def commit(self, position: int) -> None:
        """Record that every event of the position's lane up to `position` is applied: the next
        offset to read is that of the record holding the next event (the same record while it is
        applied in part)."""
        from kafka import OffsetAndMetadata

        with driver_errors("commit"):
            self.consumer.commit({self._tp(position): OffsetAndMetadata(offset_after(position), "", -1)})

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception:
            log.exception("closing the Kafka consumer failed")

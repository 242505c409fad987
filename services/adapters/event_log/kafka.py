"""The cluster event log on Kafka (kafka-python).

One topic, split by tenant into `cluster.kafka_partitions` partitions (1 by default). The
projection's write-path rules (an exact repeat of an active row in the same author scope adds no
row; a repeated source adds nothing) compare each document with every earlier one of ITS TENANT,
so they need one order per tenant, not one over the whole log: every batch of a tenant goes to
the partition `lane_for_tenant` names (a stable hash, not the client's partitioner), and each
partition is a lane of positions with its own checkpoint (services.core.positions). Indexer
processes share the partitions through one consumer group; one tenant's bulk import fills its
own partition and no longer holds back another tenant's documents. The partition count is fixed
once the topic exists: a different count would move tenants to other partitions and split their
order, so the adapter refuses a topic whose count differs from the setting.

One appended batch is ONE Kafka record: its value is the JSON array of the batch's events, with
the header `format: batch-1` (the envelope's version). A record is written, replicated and read
whole, so a batch is in the log whole or not at all with no Kafka transaction. The producer is idempotent (acks=all, retries within the delivery timeout, no
transactional id). Readers use read_uncommitted: orgmem writes no transactions, so on a faithful
broker it reads the same as read_committed, and it reads up to the high watermark, which no open
transaction holds back — under read_committed another producer's open transaction on the topic
holds the last stable offset back, and a position just handed out would read as past the head.

Positions (kafka_records.py, with the envelope): SPAN = 2**16 per record, a record's last event
at (offset + 1) * SPAN in its partition's lane, so positions strictly increase in a partition's
order, are never reused, and a partition's head is `end offset * SPAN` without reading a record.

Size: a request of limits.max_body_bytes, sealed, must fit one record; the topic is created with
`max.message.bytes` of `cluster.kafka_max_record_bytes` plus the envelope, the producer's
max_request_size matches, and a larger batch is refused as `TooLarge` (413) before it is sent.

A record without the envelope header — written by the previous adapter (one record per event, in
transactions) or by another producer — is refused with a clear error, never guessed at: read
uncommitted, that format's aborted records would look committed. The topic is created with
infinite retention (the log is the record), delete (never compact) clean-up, and LogAppendTime
timestamps, so that transaction time follows position order as `known_at` requires.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from schemas.events import Event, LoggedEvent
from services.adapters.event_log.kafka_records import (
    BATCH_FORMAT,
    COMPONENT,
    ENVELOPE_ROOM,
    FORMAT_HEADER,
    SPAN,
    batch_key,
    encode_batch,
    head_of,
    logged_events,
    logged_from_record,
    offset_after,
)
from services.core.positions import MAX_LANES, Checkpoints, lane_for_tenant, lane_of
from services.errors import BackendUnavailable, Invalid, OrgmemError, TooLarge

if TYPE_CHECKING:
    from services.adapters.event_log.kafka_subscription import KafkaSubscription

log = logging.getLogger(__name__)


def topic_configs(max_record_bytes: int, min_insync_replicas: int | None = None) -> dict[str, str]:
    configs = {
        "retention.ms": "-1",  # keep every event forever: the log is the only source of truth
        "retention.bytes": "-1",
        "cleanup.policy": "delete",  # never compact: compaction would drop all but a key's last record
        "message.timestamp.type": "LogAppendTime",  # the broker stamps transaction time in log order
        "max.message.bytes": str(max_record_bytes + ENVELOPE_ROOM),  # one record is one whole batch
    }
    if min_insync_replicas:
        configs["min.insync.replicas"] = str(min_insync_replicas)
    return configs


@contextmanager
def driver_errors(action: str) -> Iterator[None]:
    """The one place where kafka-python's errors become ours."""
    from kafka import errors as kafka_errors

    # kafka-python 3 has no NoBrokersAvailable (naming it raised AttributeError here): an unreachable
    # broker is a KafkaTimeoutError ("Unable to bootstrap") or a connection error, both retriable.
    unreachable = (kafka_errors.KafkaTimeoutError, kafka_errors.KafkaConnectionError,
                   kafka_errors.NodeNotReadyError, OSError)
    try:
        yield
    except OrgmemError:
        raise
    except unreachable as exc:
        raise BackendUnavailable(COMPONENT, f"{action}: {exc}") from exc
    except kafka_errors.MessageSizeTooLargeError as exc:
        raise TooLarge(f"{COMPONENT}: {action}: the broker refused the batch as too large ({exc}); the topic's "
                       "max.message.bytes and the brokers' message.max.bytes and replica.fetch.max.bytes must "
                       "allow cluster.kafka_max_record_bytes (docs/cluster.md)") from exc
    except kafka_errors.KafkaError as exc:
        if getattr(exc, "retriable", False):
            raise BackendUnavailable(COMPONENT, f"{action}: {exc}") from exc
        raise OrgmemError(f"{COMPONENT}: {action}: {exc}") from exc


class KafkaEventLog:
    def __init__(self, bootstrap: str, topic: str, *, replication_factor: int = 1,
                 min_insync_replicas: int | None = None, max_record_bytes: int = 64 * 1024 * 1024,
                 client_id: str = "orgmem", create_topic: bool = True, timeout_ms: int = 30_000,
                 partitions: int = 1):
        if not bootstrap:
            raise OrgmemError("cluster.kafka_bootstrap: required for the Kafka event log")
        if not 1 <= partitions <= MAX_LANES:
            raise OrgmemError(f"cluster.kafka_partitions: 1 to {MAX_LANES}, got {partitions}")
        self.partitions = partitions
        self.bootstrap = [b.strip() for b in bootstrap.split(",") if b.strip()]
        self.topic, self.client_id, self.timeout_ms = topic, client_id, timeout_ms
        self.max_record_bytes = max_record_bytes
        self._producer = None
        self._reader = None
        self._append_lock, self._read_lock = threading.Lock(), threading.Lock()
        if create_topic:
            self.ensure_topic(replication_factor, min_insync_replicas)

    @classmethod
    def from_settings(cls, cluster) -> KafkaEventLog:
        return cls(
            cluster.kafka_bootstrap or "", cluster.kafka_topic,
            replication_factor=getattr(cluster, "kafka_replication_factor", 1),
            min_insync_replicas=getattr(cluster, "kafka_min_insync_replicas", None),
            max_record_bytes=getattr(cluster, "kafka_max_record_bytes", 64 * 1024 * 1024),
            timeout_ms=getattr(cluster, "kafka_timeout_ms", 10_000),
            partitions=getattr(cluster, "kafka_partitions", 1),
        )

    # -- topic ------------------------------------------------------------------------------

    def ensure_topic(self, replication_factor: int, min_insync_replicas: int | None) -> None:
        from kafka import KafkaAdminClient
        from kafka.errors import TopicAlreadyExistsError

        configs = topic_configs(self.max_record_bytes, min_insync_replicas)
        with driver_errors(f"create topic {self.topic}"):
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id=f"{self.client_id}-admin",
                                     request_timeout_ms=self.timeout_ms, bootstrap_timeout_ms=self.timeout_ms)
            try:
                try:
                    admin.create_topics({self.topic: {"num_partitions": self.partitions,
                                                      "replication_factor": replication_factor, "configs": configs}},
                                        wait_for_metadata=True)
                    log.info("created topic %s (%d partitions, infinite retention)", self.topic, self.partitions)
                except TopicAlreadyExistsError:
                    pass
                described = admin.describe_topics([self.topic])
            finally:
                admin.close()
        partitions = len(described[0].get("partitions", [])) if described else 0
        if partitions != self.partitions:
            raise OrgmemError(
                f"cluster.kafka_topic: topic {self.topic!r} has {partitions} partitions and cluster.kafka_partitions "
                f"is {self.partitions}: a tenant's events must stay in one partition, so the count cannot change "
                "under an existing log (set the setting to the topic's count; see docs/cluster.md)")

    def lane_for(self, tenant: str) -> int:
        """The partition (lane of positions) that holds the tenant's events."""
        return lane_for_tenant(tenant, self.partitions)

    def lanes(self) -> list[int]:
        return list(range(self.partitions))

    # -- writes -----------------------------------------------------------------------------

    def _delivery_timeout_ms(self) -> int:
        return max(self.timeout_ms, 5_000) + 1_000

    def _producer_ready(self):
        if self._producer is None:
            from kafka import KafkaProducer

            with driver_errors("start producer"):
                self._producer = KafkaProducer(
                    bootstrap_servers=self.bootstrap, client_id=self.client_id, acks="all",
                    enable_idempotence=True,  # a retried send is written once; no transactional id
                    # Every blocking step is bounded by the adapter's timeout, so a dead broker answers
                    # BackendUnavailable (503) in `timeout_ms`, not after kafka-python's 60 + 120 s.
                    retries=2**31 - 1, delivery_timeout_ms=self._delivery_timeout_ms(),
                    request_timeout_ms=max(self.timeout_ms, 5_000), max_block_ms=self.timeout_ms,
                    bootstrap_timeout_ms=self.timeout_ms, max_in_flight_requests_per_connection=5,
                    linger_ms=0, compression_type="gzip", max_request_size=self.max_record_bytes + ENVELOPE_ROOM,
                )
        return self._producer

    def append(self, events: Sequence[Event]) -> list[LoggedEvent]:
        """One record per batch: acknowledged = replicated to min.insync.replicas, whole."""
        if not events:
            return []
        if len(events) > SPAN:
            raise Invalid(f"{COMPONENT}: a batch holds at most {SPAN} events, got {len(events)}; append it in parts")
        tenants = {e.tenant for e in events}
        if len(tenants) > 1 and self.partitions > 1:
            raise Invalid(f"{COMPONENT}: a batch holds one tenant's events when the log is split by tenant; "
                          f"got {len(tenants)} tenants")
        partition = self.lane_for(events[0].tenant)
        value = encode_batch(events)
        if len(value) > self.max_record_bytes:
            raise TooLarge(f"{COMPONENT}: the batch of {len(events)} events is {len(value)} bytes as a log record, "
                           f"over cluster.kafka_max_record_bytes ({self.max_record_bytes}); send fewer or smaller "
                           "documents at a time")
        with self._append_lock:
            producer = self._producer_ready()
            try:
                with driver_errors("append"):
                    future = producer.send(self.topic, key=batch_key(events), value=value, partition=partition,
                                           headers=[(FORMAT_HEADER, BATCH_FORMAT)])
                    metadata = future.get(timeout=self._delivery_timeout_ms() / 1000 + 1)
            except BaseException:
                self._restart_producer()
                raise
        return logged_events(events, metadata.offset, metadata.timestamp, partition)

    def _restart_producer(self) -> None:
        # After a failed send an idempotent producer's sequence numbers may be out of step with the
        # broker's; appends are serialised, so nothing else is in flight: start afresh next time.
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                producer.close(timeout=1)
            except Exception:  # closing is best effort
                log.exception("closing the Kafka producer failed")

    # -- reads ------------------------------------------------------------------------------

    def _consumer(self, **extra):
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=self.bootstrap, client_id=self.client_id, enable_auto_commit=False,
            isolation_level="read_uncommitted", auto_offset_reset="earliest",
            request_timeout_ms=max(self.timeout_ms, 31_000), bootstrap_timeout_ms=self.timeout_ms, **extra,
        )

    def _partitions(self) -> list:
        from kafka import TopicPartition

        return [TopicPartition(self.topic, p) for p in range(self.partitions)]

    def _reader_ready(self):
        if self._reader is None:
            with driver_errors("start reader"):
                reader = self._consumer(group_id=None)
                reader.assign(self._partitions())
            self._reader = reader
        return self._reader

    def read(self, after: int, limit: int) -> list[LoggedEvent]:
        """Events after `after` in ITS lane (partition): a lane's order is the only order there is."""
        from kafka import TopicPartition

        lane = lane_of(after)
        if lane >= self.partitions:
            raise Invalid(f"after: position {after} is in lane {lane}; the log has {self.partitions} partitions")
        tp = TopicPartition(self.topic, lane)
        with self._read_lock, driver_errors("read"):
            reader = self._reader_ready()
            end = reader.end_offsets([tp])[tp]  # the high watermark: every acknowledged record
            offset = offset_after(after)
            if offset >= end or limit <= 0:
                return []
            reader.pause(*[other for other in reader.assignment() if other != tp])
            reader.resume(tp)
            reader.seek(tp, offset)
            found: list[LoggedEvent] = []
            deadline = time.monotonic() + self.timeout_ms / 1000
            while len(found) < limit and reader.position(tp) < end:
                if time.monotonic() > deadline:
                    raise BackendUnavailable(COMPONENT, f"read: no progress at offset {reader.position(tp)} "
                                                        f"of {end} in {self.timeout_ms} ms")
                # One record at a time: a record can hold up to SPAN events, and only `limit` are wanted.
                for record in reader.poll(timeout_ms=500, max_records=1).get(tp, []):
                    found += logged_from_record(record, after)
                    deadline = time.monotonic() + self.timeout_ms / 1000
            return found[:limit]

    def head(self) -> int:
        """Position of lane 0's last appended event (0 for an empty log): the whole log's head
        with one partition. `heads()` gives every lane's."""
        return self.heads()[0]

    def heads(self) -> Checkpoints:
        """Each partition's last position: its last record's last event is at `end offset * SPAN`
        in the partition's lane, so no record is read."""
        with self._read_lock, driver_errors("head"):
            ends = self._reader_ready().end_offsets(self._partitions())
        return Checkpoints({tp.partition: head_of(tp.partition, end) for tp, end in ends.items()})

    def backlog(self, after: int, head: int) -> int:
        """Records (appended batches) of one lane not wholly applied: positions leave gaps, so
        `head - after` would count 65,536 per batch."""
        return offset_after(head) - offset_after(after)

    def subscribe(self, group_id: str, checkpoint: Callable[[int], int], max_poll_records: int = 256,
                  max_poll_interval_ms: int = 600_000) -> KafkaSubscription:
        from services.adapters.event_log.kafka_subscription import KafkaSubscription

        return KafkaSubscription(self, group_id, checkpoint, max_poll_records, max_poll_interval_ms)

    def close(self) -> None:
        for client in (self._producer, self._reader):
            if client is not None:
                try:
                    client.close()
                except Exception:  # closing is best effort
                    log.exception("closing a Kafka client failed")
        self._producer = self._reader = None

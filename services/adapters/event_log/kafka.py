"""The cluster event log on Kafka (kafka-python).

One topic with ONE partition. The projection's write-path rules (an exact repeat of an active
row in the same author scope adds no row; a repeated source adds nothing) compare each document
with every earlier one of its tenant, so they need one order over the whole log; with several
partitions two indexers would race on the same decision and a replay could decide differently.
One partition gives that total order, and the position is simply `offset + 1` (0 = empty log),
an integer the API hands out for read-your-writes and the projections store as their checkpoint.
Events are still keyed by row id (or run id), so per-row order would survive a partitioned
layout and tools can follow a row. Indexers scale out as hot standbys of one consumer group; see
docs/cluster.md for why the projector is scaled up (batch, threads) rather than out.

Durability: the producer is idempotent with acks=all and unbounded retries, and each append is
one Kafka transaction, so a batch is in the log whole or not at all; readers use
read_committed. The topic is created with infinite retention (the log is the record), delete
(never compact) clean-up, and LogAppendTime timestamps, so that transaction time follows
position order as `known_at` requires.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime

from schemas.events import Event, LoggedEvent, event_from_json, event_to_json
from services.errors import BackendUnavailable, OrgmemError

log = logging.getLogger(__name__)

COMPONENT = "event log (Kafka)"
PARTITION = 0


def topic_configs(min_insync_replicas: int | None = None) -> dict[str, str]:
    configs = {
        "retention.ms": "-1",  # keep every event forever: the log is the only source of truth
        "retention.bytes": "-1",
        "cleanup.policy": "delete",  # never compact: compaction would drop all but a key's last event
        "message.timestamp.type": "LogAppendTime",  # the broker stamps transaction time in log order
    }
    if min_insync_replicas:
        configs["min.insync.replicas"] = str(min_insync_replicas)
    return configs


def position_of(offset: int) -> int:
    return offset + 1


def offset_after(position: int) -> int:
    """The first offset holding an event with a position greater than `position`."""
    if position < 0:
        raise OrgmemError(f"after: a log position is >= 0, got {position}")
    return position


def event_key(event: Event) -> bytes:
    key = getattr(event, "row_id", None) or getattr(event, "run_id", None) or event.tenant
    return str(key).encode("utf-8")


def logged_from_record(record) -> LoggedEvent:
    return LoggedEvent(
        position=position_of(record.offset),
        appended_at=datetime.fromtimestamp(record.timestamp / 1000, tz=UTC),
        event=event_from_json(record.value),
    )


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
    except kafka_errors.KafkaError as exc:
        if getattr(exc, "retriable", False):
            raise BackendUnavailable(COMPONENT, f"{action}: {exc}") from exc
        raise OrgmemError(f"{COMPONENT}: {action}: {exc}") from exc


class KafkaEventLog:
    def __init__(self, bootstrap: str, topic: str, *, replication_factor: int = 1,
                 min_insync_replicas: int | None = None, transactional_id: str | None = None,
                 client_id: str = "orgmem", create_topic: bool = True, timeout_ms: int = 30_000):
        if not bootstrap:
            raise OrgmemError("cluster.kafka_bootstrap: required for the Kafka event log")
        self.bootstrap = [b.strip() for b in bootstrap.split(",") if b.strip()]
        self.topic, self.client_id, self.timeout_ms = topic, client_id, timeout_ms
        # Unique per process: a transactional id names one live producer (a restart with the
        # same id would fence the previous incarnation, which is what we want for a restart).
        self.transactional_id = transactional_id or f"orgmem-{socket.gethostname()}-{os.getpid()}"
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
            timeout_ms=getattr(cluster, "kafka_timeout_ms", 10_000),
        )

    # -- topic ------------------------------------------------------------------------------

    def ensure_topic(self, replication_factor: int, min_insync_replicas: int | None) -> None:
        from kafka import KafkaAdminClient
        from kafka.errors import TopicAlreadyExistsError

        with driver_errors(f"create topic {self.topic}"):
            admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id=f"{self.client_id}-admin",
                                     request_timeout_ms=self.timeout_ms, bootstrap_timeout_ms=self.timeout_ms)
            try:
                try:
                    admin.create_topics({self.topic: {"num_partitions": 1, "replication_factor": replication_factor,
                                                      "configs": topic_configs(min_insync_replicas)}},
                                        wait_for_metadata=True)
                    log.info("created topic %s (1 partition, infinite retention)", self.topic)
                except TopicAlreadyExistsError:
                    pass
                described = admin.describe_topics([self.topic])
            finally:
                admin.close()
        partitions = len(described[0].get("partitions", [])) if described else 0
        if partitions != 1:
            raise OrgmemError(
                f"cluster.kafka_topic: topic {self.topic!r} has {partitions} partitions; orgmem needs exactly one "
                "(the write-path rules need one total order; see docs/cluster.md)")

    # -- writes -----------------------------------------------------------------------------

    def _producer_ready(self):
        if self._producer is None:
            from kafka import KafkaProducer

            with driver_errors("start producer"):
                producer = KafkaProducer(
                    bootstrap_servers=self.bootstrap, client_id=self.client_id, acks="all",
                    enable_idempotence=True, transactional_id=self.transactional_id,
                    # Every blocking step is bounded by the adapter's timeout, so a dead broker answers
                    # BackendUnavailable (503) in `timeout_ms`, not after kafka-python's 60 + 120 s.
                    retries=2**31 - 1, delivery_timeout_ms=max(self.timeout_ms, 5_000) + 1_000,
                    request_timeout_ms=max(self.timeout_ms, 5_000), max_block_ms=self.timeout_ms,
                    bootstrap_timeout_ms=self.timeout_ms, max_in_flight_requests_per_connection=5,
                    linger_ms=5, compression_type="gzip", max_request_size=16 * 1024 * 1024,
                )
                producer.init_transactions()
            self._producer = producer
        return self._producer

    def append(self, events: Sequence[Event]) -> list[LoggedEvent]:
        """One transaction per batch: acknowledged = replicated to min.insync.replicas, whole."""
        if not events:
            return []
        bodies = [(event_key(e), event_to_json(e).encode("utf-8"), e) for e in events]
        with self._append_lock:
            producer = self._producer_ready()
            with driver_errors("append"):
                producer.begin_transaction()
                try:
                    futures = [
                        producer.send(self.topic, key=key, value=value, partition=PARTITION,
                                      headers=[("type", e.type.encode()), ("tenant", e.tenant.encode())])
                        for key, value, e in bodies
                    ]
                    producer.commit_transaction()  # flushes; raises if any record failed
                    metadata = [f.get(timeout=self.timeout_ms / 1000) for f in futures]
                except BaseException:
                    self._abort(producer)
                    raise
        return [
            LoggedEvent(position=position_of(m.offset),
                        appended_at=datetime.fromtimestamp(m.timestamp / 1000, tz=UTC), event=e)
            for m, (_, _, e) in zip(metadata, bodies, strict=True)
        ]

    def _abort(self, producer) -> None:
        try:
            producer.abort_transaction()
        except Exception:  # a fatal producer state: start a fresh producer next time
            log.exception("aborting the Kafka transaction failed; restarting the producer")
            self._producer = None
            try:
                producer.close(timeout=5)
            except Exception:
                pass

    # -- reads ------------------------------------------------------------------------------

    def _consumer(self, **extra):
        from kafka import KafkaConsumer

        return KafkaConsumer(
            bootstrap_servers=self.bootstrap, client_id=self.client_id, enable_auto_commit=False,
            isolation_level="read_committed", auto_offset_reset="earliest",
            request_timeout_ms=max(self.timeout_ms, 31_000), bootstrap_timeout_ms=self.timeout_ms, **extra,
        )

    def _reader_ready(self):
        if self._reader is None:
            from kafka import TopicPartition

            with driver_errors("start reader"):
                reader = self._consumer(group_id=None)
                reader.assign([TopicPartition(self.topic, PARTITION)])
            self._reader = reader
        return self._reader

    def read(self, after: int, limit: int) -> list[LoggedEvent]:
        from kafka import TopicPartition

        tp = TopicPartition(self.topic, PARTITION)
        with self._read_lock, driver_errors("read"):
            reader = self._reader_ready()
            end = reader.end_offsets([tp])[tp]  # the last stable offset under read_committed
            offset = offset_after(after)
            if offset >= end or limit <= 0:
                return []
            reader.seek(tp, offset)
            found: list[LoggedEvent] = []
            deadline = time.monotonic() + self.timeout_ms / 1000
            while len(found) < limit and reader.position(tp) < end:
                if time.monotonic() > deadline:
                    raise BackendUnavailable(COMPONENT, f"read: no progress from offset {offset} to {end}")
                batch = reader.poll(timeout_ms=500, max_records=limit - len(found)).get(tp, [])
                found += [logged_from_record(r) for r in batch]
            return found[:limit]

    def head(self) -> int:
        """Position of the last committed event (0 for an empty log). The end offset is not
        it: transaction markers take offsets too, so the last event is found by reading back."""
        from kafka import TopicPartition

        tp = TopicPartition(self.topic, PARTITION)
        with self._read_lock, driver_errors("head"):
            reader = self._reader_ready()
            end = reader.end_offsets([tp])[tp]
            start = reader.beginning_offsets([tp])[tp]
            window = 16
            while end > start:
                begin = max(start, end - window)
                reader.seek(tp, begin)
                last = None
                while reader.position(tp) < end:
                    for record in reader.poll(timeout_ms=500).get(tp, []):
                        last = record.offset
                if last is not None:
                    return position_of(last)
                if begin == start:
                    break
                window *= 4  # only markers and aborted records in the window: look further back
            return 0

    def subscribe(self, group_id: str, checkpoint: Callable[[], int], max_poll_records: int = 256,
                  max_poll_interval_ms: int = 600_000) -> KafkaSubscription:
        return KafkaSubscription(self, group_id, checkpoint, max_poll_records, max_poll_interval_ms)

    def close(self) -> None:
        for client in (self._producer, self._reader):
            if client is not None:
                try:
                    client.close()
                except Exception:  # closing is best effort
                    log.exception("closing a Kafka client failed")
        self._producer = self._reader = None


class KafkaSubscription:
    """The indexer's feed: a member of consumer group `group_id`. Kafka gives the one partition
    to one member at a time; the others wait as hot standbys and take over on a rebalance.

    The projections' own checkpoint (in the row store) decides where reading starts, not the
    group's committed offset: on every assignment the consumer seeks to `checkpoint()`. Offsets
    are still committed after each applied batch, so `kafka-consumer-groups` shows the lag."""

    def __init__(self, event_log: KafkaEventLog, group_id: str, checkpoint: Callable[[], int],
                 max_poll_records: int, max_poll_interval_ms: int):
        from kafka import ConsumerRebalanceListener, TopicPartition

        self.tp = TopicPartition(event_log.topic, PARTITION)
        self._checkpoint = checkpoint
        subscription = self

        class _Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                log.info("indexer: partitions revoked: %s", revoked)

            def on_partitions_assigned(self, assigned):
                for tp in assigned:
                    position = subscription._checkpoint()
                    log.info("indexer: assigned %s; resuming after position %d", tp, position)
                    subscription.consumer.seek(tp, offset_after(position))

        with driver_errors(f"join consumer group {group_id}"):
            self.consumer = event_log._consumer(
                group_id=group_id, max_poll_records=max_poll_records, max_poll_interval_ms=max_poll_interval_ms,
                session_timeout_ms=30_000, heartbeat_interval_ms=3_000,
            )
            self.consumer.subscribe([event_log.topic], listener=_Listener())

    def assigned(self) -> bool:
        return self.tp in self.consumer.assignment()

    def poll(self, max_records: int, timeout_s: float) -> list[LoggedEvent]:
        with driver_errors("poll"):
            batches = self.consumer.poll(timeout_ms=int(timeout_s * 1000), max_records=max_records)
        return [logged_from_record(r) for r in batches.get(self.tp, [])]

    def seek(self, position: int) -> None:
        if self.assigned():
            with driver_errors("seek"):
                self.consumer.seek(self.tp, offset_after(position))

    def commit(self, position: int) -> None:
        """Record that every event up to `position` is applied (the next offset to read)."""
        from kafka import OffsetAndMetadata

        with driver_errors("commit"):
            self.consumer.commit({self.tp: OffsetAndMetadata(offset_after(position), "", -1)})

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception:
            log.exception("closing the Kafka consumer failed")

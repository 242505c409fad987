"""Fixtures of the Kafka adapter tests: a broker per module (tansu, or ORGMEM_KAFKA_BOOTSTRAP), a
topic per test, and KafkaEventLogs opened on it (each its own producer and reader, as API
replicas are), closed after the test."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

import pytest

from tests.tansu import kafka_bootstrap_or_skip

if TYPE_CHECKING:
    from services.adapters.event_log.kafka import KafkaEventLog


@pytest.fixture(scope="module")
def bootstrap():
    yield from kafka_bootstrap_or_skip()


@pytest.fixture
def topic():
    return f"orgmem-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def logs(bootstrap, topic):
    """Open KafkaEventLogs on the topic (each its own producer and reader, as API replicas are)."""
    pytest.importorskip("kafka")
    from services.adapters.event_log.kafka import KafkaEventLog

    opened: list[KafkaEventLog] = []

    def open_log(**kw) -> KafkaEventLog:
        opened.append(KafkaEventLog(bootstrap, topic, timeout_ms=10_000, **kw))
        return opened[-1]

    yield open_log
    for event_log in opened:
        event_log.close()

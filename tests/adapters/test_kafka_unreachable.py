"""The Kafka event log with no broker behind its address: every call fails fast with
BackendUnavailable naming the event log (the API's 503), within the configured timeout."""

from __future__ import annotations

import socket
import time

import pytest

pytest.importorskip("kafka")

from schemas.documents import DocumentIn  # noqa: E402
from schemas.events import DocumentObserved  # noqa: E402
from services.adapters.event_log.kafka import KafkaEventLog  # noqa: E402
from services.errors import BackendUnavailable  # noqa: E402

TIMEOUT_MS = 2_000


def closed_port() -> int:
    """A loopback port that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def unreachable_log(create_topic: bool) -> KafkaEventLog:
    return KafkaEventLog(f"127.0.0.1:{closed_port()}", "orgmem-unreachable", create_topic=create_topic,
                         timeout_ms=TIMEOUT_MS)


def timed(call):
    started = time.monotonic()
    with pytest.raises(BackendUnavailable) as caught:
        call()
    return caught.value, time.monotonic() - started


def test_creating_the_topic_without_a_broker_is_backend_unavailable_in_time():
    error, took = timed(lambda: unreachable_log(create_topic=True))
    assert error.component == "event log (Kafka)"
    assert "create topic" in str(error)
    assert took < TIMEOUT_MS / 1000 + 3


@pytest.mark.parametrize("action", ["append", "read", "head"])
def test_every_call_without_a_broker_is_backend_unavailable_in_time(action):
    event_log = unreachable_log(create_topic=False)
    event = DocumentObserved(tenant="t", row_id="r1", document=DocumentIn(text="x"))
    calls = {"append": lambda: event_log.append([event]), "read": lambda: event_log.read(0, 10),
             "head": event_log.head}
    try:
        error, took = timed(calls[action])
    finally:
        event_log.close()
    assert error.component == "event log (Kafka)"
    assert took < TIMEOUT_MS / 1000 + 3

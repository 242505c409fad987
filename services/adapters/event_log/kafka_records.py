"""The Kafka event log's record envelope and position arithmetic, without the driver.

A record is one appended batch: its value is the JSON array of the batch's events, with the
header `format: batch-1` (the envelope's version); a record in any other format is refused,
never guessed at (see kafka.py for why).

Positions: the event at index i of the n events of the record at offset o is at position
(o + 1) * SPAN - (n - 1 - i), SPAN = 2**16: a record's last event sits at (o + 1) * SPAN, so
positions strictly increase in log order, are never reused, the head is `end offset * SPAN`
without reading a record, and the event after position p is in the record at offset p // SPAN
(the next one when p ends a record). A checkpoint can end inside a record when a reader's batch
splits one: reading after p drops that record's events at or below p. A record holds at most SPAN
events.

A topic with several partitions (the log split by tenant) gives each partition a lane of
positions (services.core.positions): the positions above plus `lane_start(partition)`, so one
integer still names the partition and the place in it; a lane holds 2**31 records.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pydantic import TypeAdapter, ValidationError

from schemas.events import Event, LoggedEvent, event_to_json
from services.core.positions import in_lane, lane_of, lane_start
from services.errors import BackendUnavailable, OrgmemError

COMPONENT = "event log (Kafka)"
SPAN = 2**16  # positions per record: a record holds at most SPAN events
FORMAT_HEADER, BATCH_FORMAT = "format", b"batch-1"
ENVELOPE_ROOM = 64 * 1024  # record batch header, key and headers, over the value's own bytes
_EVENTS = TypeAdapter(list[Event])


def position_of(offset: int, index: int, count: int, partition: int = 0) -> int:
    """Event `index` of the `count` events of the record at `offset` of `partition`; the last is
    at (offset + 1) * SPAN in the partition's lane."""
    return lane_start(partition) + (offset + 1) * SPAN - (count - 1 - index)


def offset_after(position: int) -> int:
    """The offset of the record (in the partition of the position's lane) that holds the first
    event with a position greater than `position`."""
    if position < 0:
        raise OrgmemError(f"after: a log position is >= 0, got {position}")
    return in_lane(position) // SPAN


def head_of(partition: int, end_offset: int) -> int:
    """The position of a partition's last event: its last record's, with no record read."""
    return lane_start(partition) + end_offset * SPAN


def encode_batch(events: Sequence[Event]) -> bytes:
    return b"[" + b",".join(event_to_json(e).encode("utf-8") for e in events) + b"]"


def batch_key(events: Sequence[Event]) -> bytes:
    """The record's key: its tenant (a request's batch has one), the unit a partitioned log would split by."""
    return events[0].tenant.encode("utf-8")


def batch_of(record) -> list[Event]:
    """The events of one record; a record in any other format is refused, never guessed at."""
    found = dict(record.headers or []).get(FORMAT_HEADER)
    if found != BATCH_FORMAT:
        written = (f"format {found.decode(errors='replace')!r}, which this orgmem does not read" if found
                   else "no format header: one event per record in Kafka transactions (the previous adapter's "
                        "format) or another producer's record")
        raise BackendUnavailable(COMPONENT, f"the record at offset {record.offset} has {written}; orgmem reads "
                                            f"only {BATCH_FORMAT.decode()} batches from this topic (docs/cluster.md)")
    try:
        events = _EVENTS.validate_json(record.value)
    except ValidationError as exc:
        raise BackendUnavailable(COMPONENT, f"the batch at offset {record.offset} does not decode: {exc}") from exc
    if not 0 < len(events) <= SPAN:
        raise BackendUnavailable(COMPONENT, f"the batch at offset {record.offset} holds {len(events)} events")
    return events


def logged_events(events: Sequence[Event], offset: int, timestamp_ms: int, partition: int = 0) -> list[LoggedEvent]:
    """The events of the record at `offset` of `partition`, appended at `timestamp_ms`, with their positions."""
    at = datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC)
    return [LoggedEvent(position=position_of(offset, i, len(events), partition), appended_at=at, event=e)
            for i, e in enumerate(events)]


def logged_from_record(record, after: int = 0) -> list[LoggedEvent]:
    """The record's events with their positions, less those at or below `after` in the record that
    `after` points into (a checkpoint inside a record). A record elsewhere is passed on whole, so
    a log that hands out old positions again still shows them (the indexer stops on it)."""
    logged = logged_events(batch_of(record), record.offset, record.timestamp, record.partition)
    if lane_of(after) == record.partition and record.offset == offset_after(after):
        logged = [e for e in logged if e.position > after]
    return logged

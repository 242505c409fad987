"""Reading the whole log, lane by lane (services.core.positions).

A log split by tenant has no order across its lanes, so a scan "from the start to the head"
is one scan per lane: from the lane's start to that lane's head. A tenant's events are all in
its lane, so a scan for one tenant reads that lane only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from schemas.events import LoggedEvent
from services.core.positions import lane_start
from services.ports import EventLog


def lane_spans(event_log: EventLog, tenant: str | None = None) -> list[tuple[int, int]]:
    """(start, head) of each lane to scan: the tenant's lane, or every lane of the log."""
    heads = event_log.heads()
    lanes = [event_log.lane_for(tenant)] if tenant is not None else sorted(heads)
    return [(lane_start(lane), heads.of(lane)) for lane in lanes]


def scan(event_log: EventLog, read: Callable[[int, int], list[LoggedEvent]], tenant: str | None = None,
         page: int = 2000) -> Iterator[LoggedEvent]:
    """Every event up to each lane's head now, page by page: of the tenant's lane, or of every
    lane. `read` is the log's `read`, or a sealing log's `read_sealed` (nothing opened)."""
    for after, head in lane_spans(event_log, tenant):
        while after < head:
            batch = read(after, page)
            if not batch:
                break
            yield from batch
            after = batch[-1].position

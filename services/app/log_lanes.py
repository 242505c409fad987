"""Reading the whole log, lane by lane (services.core.positions).

A log split by tenant has no order across its lanes, so a scan "from the start to the head"
is one scan per lane: from the lane's start to that lane's head. A tenant's events are all in
its lane, so a scan for one tenant reads that lane only.
"""

from __future__ import annotations

from services.core.positions import lane_start
from services.ports import EventLog


def lane_spans(event_log: EventLog, tenant: str | None = None) -> list[tuple[int, int]]:
    """(start, head) of each lane to scan: the tenant's lane, or every lane of the log."""
    heads = event_log.heads()
    lanes = [event_log.lane_for(tenant)] if tenant is not None else sorted(heads)
    return [(lane_start(lane), heads.of(lane)) for lane in lanes]

"""Log positions across lanes: one integer that names a partition of the log and a place in it.

A log split by tenant (the cluster's Kafka topic with several partitions) has one order per
partition, not one over the whole log. Each partition is a *lane*: its positions are
`lane * LANE_SPAN + p`, with p the position inside the partition (as a one-partition log counts
them). So a position still is one integer — the read-your-writes token, the row's ingest
position, the version a row write carries — and lane 0 is exactly a one-partition log's
positions: `after=` tokens of a one-partition deployment keep their meaning.

Positions only increase within a lane; two lanes are not ordered against each other, so the
projections keep one checkpoint per lane (`Checkpoints`), and "is position P applied?" asks the
checkpoint of P's lane. The write-path rules compare a document only with its own tenant's,
and a tenant lives in one lane, so per-lane order is all they need.

LANE_SPAN = 2**47 leaves a lane 2**31 Kafka records (65,536 positions each) and allows 64
lanes below 2**53, the largest integer a JavaScript client (the web console) reads exactly.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol, TypeVar

LANE_SPAN = 2**47
MAX_LANES = 64


def lane_of(position: int) -> int:
    return position // LANE_SPAN


def lane_start(lane: int) -> int:
    """The position "nothing applied yet" of a lane (0 for lane 0)."""
    return lane * LANE_SPAN


def in_lane(position: int) -> int:
    """The position inside its lane (what a one-partition log would call it)."""
    return position % LANE_SPAN


def lane_for_tenant(tenant: str, lanes: int) -> int:
    """The lane a tenant's events go to: a stable hash, the same in every process and release
    (Python's hash() is salted per process)."""
    return zlib.crc32(tenant.encode("utf-8")) % lanes if lanes > 1 else 0


class _Positioned(Protocol):
    position: int


P = TypeVar("P", bound=_Positioned)


def by_lane(logged: Sequence[P]) -> dict[int, list[P]]:
    """Logged events split by lane, each lane's in the order given (its log order)."""
    lanes: dict[int, list[P]] = {}
    for item in logged:
        lanes.setdefault(lane_of(item.position), []).append(item)
    return lanes


class Checkpoints(dict):
    """The applied position of each lane; a lane never written stands at its start."""

    def of(self, lane: int) -> int:
        return self.get(lane, lane_start(lane))

    def covers(self, position: int) -> bool:
        return self.of(lane_of(position)) >= position

    def after(self, positions: Iterable[int]) -> Checkpoints:
        """These checkpoints moved on to `positions` (the highest per lane wins)."""
        moved = Checkpoints(self)
        for position in positions:
            lane = lane_of(position)
            moved[lane] = max(moved.of(lane), position)
        return moved

    def behind(self, heads: Mapping[int, int]) -> dict[int, tuple[int, int]]:
        """Lanes whose applied position is past the log's head there: (head, applied)."""
        return {lane: (heads.get(lane, lane_start(lane)), applied) for lane, applied in self.items()
                if applied > heads.get(lane, lane_start(lane))}

    def summary(self) -> int:
        """One number for displays and gauges: lane 0's position with one lane (the usual
        case), else the sum of the lanes' in-lane positions (it grows as any lane moves)."""
        if set(self) <= {0}:
            return self.of(0)
        return sum(in_lane(p) for p in self.values())

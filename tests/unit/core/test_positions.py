"""Lanes of log positions: one integer names a partition and a place in it, each lane has its own
checkpoint, and lane 0 is exactly a one-partition log."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from services.core.positions import (
    LANE_SPAN,
    MAX_LANES,
    Checkpoints,
    by_lane,
    in_lane,
    lane_for_tenant,
    lane_of,
    lane_start,
)


def test_lane_zero_is_a_one_partition_logs_positions():
    for position in (0, 1, 65_536, LANE_SPAN - 1):
        assert lane_of(position) == 0 and in_lane(position) == position
    assert lane_start(0) == 0


def test_a_position_names_its_lane_and_its_place():
    position = lane_start(3) + 131_072
    assert lane_of(position) == 3 and in_lane(position) == 131_072
    assert lane_of(lane_start(3) - 1) == 2  # the last position of lane 2 is not lane 3's
    assert lane_start(MAX_LANES) <= 2**53  # exact in JavaScript


def test_tenants_map_to_stable_lanes():
    # The same lane in every process (Python's own hash() is salted per process).
    lanes = {tenant: lane_for_tenant(tenant, 4) for tenant in ("acme", "globex", "initech", "umbrella")}
    assert lanes == {tenant: lane_for_tenant(tenant, 4) for tenant in lanes}
    assert all(0 <= lane < 4 for lane in lanes.values())
    assert lane_for_tenant("acme", 1) == 0
    spread = {lane_for_tenant(f"tenant-{i}", 4) for i in range(64)}
    assert spread == {0, 1, 2, 3}


def test_checkpoints_cover_positions_of_their_own_lane_only():
    applied = Checkpoints({0: 500, 2: lane_start(2) + 70})
    assert applied.covers(500) and not applied.covers(501)
    assert applied.covers(lane_start(2) + 70) and not applied.covers(lane_start(2) + 71)
    # Lane 1 was never written: nothing of it is applied, however far lane 0 is.
    assert applied.of(1) == lane_start(1) and not applied.covers(lane_start(1) + 1)
    assert Checkpoints().covers(0) and not Checkpoints().covers(1)


def test_checkpoints_move_per_lane_and_never_back():
    applied = Checkpoints({0: 10})
    moved = applied.after([lane_start(1) + 5, 7, lane_start(1) + 3])
    assert moved == {0: 10, 1: lane_start(1) + 5}
    assert applied == {0: 10}  # a new value, the old one unchanged


def test_a_lane_behind_its_head_is_named():
    heads = {0: 100, 1: lane_start(1) + 40}
    assert Checkpoints({0: 100, 1: lane_start(1) + 40}).behind(heads) == {}
    assert Checkpoints({0: 90, 1: lane_start(1) + 50}).behind(heads) == {1: (lane_start(1) + 40, lane_start(1) + 50)}
    # A lane the log does not have (fewer partitions than before) is behind at its start.
    assert Checkpoints({3: lane_start(3) + 1}).behind(heads) == {3: (lane_start(3), lane_start(3) + 1)}


def test_summary_is_lane_zeros_position_with_one_lane():
    assert Checkpoints({0: 42}).summary() == 42 and Checkpoints().summary() == 0
    assert Checkpoints({0: 42, 1: lane_start(1) + 8}).summary() == 50


@pytest.mark.parametrize("order", [[0, 1, 0, 2, 1], [2, 2, 0]])
def test_by_lane_keeps_each_lanes_order(order):
    logged = [SimpleNamespace(position=lane_start(lane) + i + 1) for i, lane in enumerate(order)]
    split = by_lane(logged)
    assert sorted(split) == sorted(set(order))
    for lane, items in split.items():
        assert [lane_of(e.position) for e in items] == [lane] * len(items)
        assert [e.position for e in items] == sorted(e.position for e in items)
    assert sum(len(items) for items in split.values()) == len(logged)

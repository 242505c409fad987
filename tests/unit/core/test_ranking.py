"""The read path's ranking (services.core.ranking): legs -> weighted RRF -> selector -> reserve."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from services.core.fusion import weighted_rrf
from services.core.ranking import RowFields, fuse, pool_of, rank
from services.core.retrieval_config import RetrievalConfig


def fields(*specs: tuple[str, str | None, int, int]) -> dict[str, RowFields]:
    """(row id, thread, ingest position, year of its date) per row."""
    return {rid: RowFields(thread, pos, (datetime(year, 1, 1, tzinfo=UTC), pos)) for rid, thread, pos, year in specs}


ROWS = fields(("a", "A", 1, 2020), ("b", "A", 2, 2021), ("c", "B", 3, 2019), ("d", None, 4, 2024),
              ("e", "B", 5, 2023), ("u1", None, 9, 2018), ("u2", None, 8, 2025))
LEGS = {"lex": [("a", 9.0), ("b", 7.0), ("ghost", 6.0), ("d", 2.0)], "tag": [("b", 1.0)], "vec": [("c", 0.9), ("a", 0.8)]}
NO_VECTORS = np.zeros(4)


def vectors_for(ids):
    return np.zeros((len(ids), 4))


def config(**changes) -> RetrievalConfig:
    return RetrievalConfig(weights={"lex": 1.0, "tag": 1.0, "vec": 4.0}, gamma=60.0, k=10, reserve=0).with_overrides(**changes)


def ranked(run: RetrievalConfig, newest=(), legs=LEGS) -> list[tuple[str, str]]:
    return [(p.row_id, p.reason) for p in rank(legs, ROWS, NO_VECTORS, vectors_for, run, newest).picks]


def test_rows_come_in_weighted_rrf_order_and_unknown_rows_drop_out_before_ranks_count():
    ranking = rank(LEGS, ROWS, NO_VECTORS, vectors_for, config(), [])
    known = {"lex": ["a", "b", "d"], "tag": ["b"], "vec": ["c", "a"]}
    expected = weighted_rrf(known, {"lex": 1.0, "tag": 1.0, "vec": 4.0}, 60.0, {r: f.ingest_position for r, f in ROWS.items()})
    assert ranking.fusion.fused == expected
    assert ranking.fusion.fused[0].row_id == "a" and ranking.fusion.fused[0].ranks == {"lex": 0, "vec": 1}
    assert [f.row_id for f in expected if f.row_id == "d"] and dict(expected[-1].ranks) == {"lex": 2}  # ghost took no rank
    assert [(p.row_id, p.reason) for p in ranking.picks] == [(f.row_id, "fused") for f in expected]
    assert ranking.fusion.legs["lex"] == [("a", 9.0), ("b", 7.0), ("d", 2.0)]


def test_each_leg_is_cut_to_c_candidates():
    fusion = fuse(LEGS, ROWS, config(candidates=1))
    assert fusion.legs == {"lex": [("a", 9.0)], "tag": [("b", 1.0)], "vec": [("c", 0.9)]}
    assert {f.row_id for f in fusion.fused} == {"a", "b", "c"}


def test_a_zero_weight_leg_takes_no_part():
    run = config(weights={"lex": 1.0, "tag": 0.0, "vec": 0.0})
    fusion = fuse({"lex": [("a", 1.0)], "vec": [("c", 0.5), ("e", 0.4)]}, ROWS, run)
    assert {f.row_id: f.score for f in fusion.fused} == {"a": pytest.approx(1 / 60)}
    assert set(fusion.legs) == {"lex"}
    # Its rows are not matched: a reserve short of matched rows is filled from the newest rows.
    picks = ranked(config(weights={"lex": 1.0, "tag": 0.0, "vec": 0.0}, k=2, reserve=1),
                   ["u2", "u1"], {"lex": [("a", 1.0)], "vec": [("c", 0.5), ("e", 0.4)]})
    assert picks == [("a", "fused"), ("u2", "reserve_fill")]


def test_the_reserve_takes_the_latest_dated_remaining_rows_then_the_newest_unmatched():
    # Fused order a, c, b, d; k = 4 with R = 2: a and c lead, then d (2024) and b (2021).
    assert ranked(config(k=4, reserve=2), ["u2", "u1"]) == [("a", "fused"), ("c", "fused"), ("d", "reserve"), ("b", "reserve")]
    # k = 5, R = 3: two lead, two matched rows remain, the third slot goes to the newest unmatched row
    # (newest lists matched rows too; they are passed over).
    assert ranked(config(k=5, reserve=3), ["d", "u2", "u1"])[-3:] == [("d", "reserve"), ("b", "reserve"), ("u2", "reserve_fill")]
    assert ranked(config(k=0, reserve=3), ["u2"]) == []


def test_newest_is_read_only_as_far_as_the_reserve_needs():
    seen = []

    def newest():
        for rid in ("d", "u2", "u1"):
            seen.append(rid)
            yield rid

    ranked(config(k=5, reserve=1), newest())
    assert seen == ["d", "u2"]  # d is matched and passed over; u2 fills the one slot
    seen.clear()
    ranked(config(reserve=0), newest())
    assert seen == []


def test_the_selector_and_the_lap_callback():
    laps = []
    ranking = rank(LEGS, ROWS, NO_VECTORS, vectors_for, config(selector="coverage", k=3, reserve=0, context_weight=0.0,
                                                                coverage_every=2), [], laps.append)
    assert laps == ["fuse", "select", "reserve"]
    # Coverage: slot 2 goes to the best row of a thread not covered yet (c, thread B after a of A).
    assert [(p.row_id, p.reason) for p in ranking.picks] == [("a", "coverage"), ("c", "coverage"), ("b", "coverage")]


def test_pool_of_carries_threads_positions_and_bm25_scores():
    pool = pool_of(fuse(LEGS, ROWS, config()), ROWS)
    assert pool.ids == ["a", "c", "b", "d"]
    assert pool.threads == ["A", "B", "A", None] and pool.positions == [1, 3, 2, 4]
    assert list(pool.lexical) == [9.0, 0.0, 7.0, 2.0]

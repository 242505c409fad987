"""A leg of weight 0 takes no part in ranking (services.core.ranking): its rows neither fill the
fused list nor count as matched for the recency reserve; all-zero weights are refused."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np

from services.core.ranking import RowFields, active_legs, rank
from services.core.retrieval_config import PRESETS, RetrievalConfig, weights_problem

ROWS = {rid: RowFields(None, pos, (datetime(2020 + pos, 1, 1, tzinfo=UTC), pos))
        for rid, pos in (("lex1", 1), ("lex2", 2), ("tag1", 3), ("vec1", 4), ("both", 5), ("new", 9))}
LEGS = {"lex": [("lex1", 5.0), ("both", 4.0), ("lex2", 3.0)], "tag": [("tag1", 1.0), ("both", 1.0)],
        "vec": [("vec1", 0.9), ("both", 0.5)]}


def picks(weights, reserve=0, newest=(), k=10):
    config = RetrievalConfig(weights=weights, k=k, reserve=reserve)
    ranking = rank(LEGS, ROWS, None, lambda ids: np.zeros((len(ids), 2)), config, newest)
    return [(p.row_id, p.reason) for p in ranking.picks], ranking.fusion


def test_lexical_only_by_weights_returns_only_lexical_rows():
    got, fusion = picks({"lex": 1.0, "tag": 0.0, "vec": 0.0})
    assert [rid for rid, _ in got] == ["lex1", "both", "lex2"]
    assert set(fusion.legs) == {"lex"} and all(set(f.ranks) == {"lex"} for f in fusion.fused)


def test_the_reserve_counts_only_rows_of_legs_that_take_part():
    # tag1 and vec1 are newer than every lexical row; with their legs at 0 they are not matched,
    # so the reserve takes the latest lexical rows, and its fill comes from `newest` only.
    got, _ = picks({"lex": 1.0, "tag": 0.0, "vec": 0.0}, reserve=2, k=3)
    assert got == [("lex1", "fused"), ("both", "reserve"), ("lex2", "reserve")]
    short, _ = picks({"lex": 1.0, "tag": 0.0, "vec": 0.0}, reserve=3, k=5, newest=["new", "vec1"])
    # vec1 comes in only as the scope's newest rows do, as a fill, never as a match of its leg.
    assert short == [("lex1", "fused"), ("both", "fused"), ("lex2", "reserve"), ("new", "reserve_fill"),
                     ("vec1", "reserve_fill")]
    every, _ = picks({"lex": 1.0, "tag": 1.0, "vec": 1.0}, reserve=2)
    assert {"tag1", "vec1"} <= {rid for rid, _ in every}


def test_weights_problem_names_weights_only_when_no_leg_is_left():
    assert active_legs(RetrievalConfig(weights={"lex": 0.0, "tag": 2.0, "vec": 0.0})) == {"tag"}
    assert weights_problem({"lex": 0.0, "tag": 0.0, "vec": 0.0}).startswith("weights:")
    assert weights_problem({"lex": -1.0}) is not None and weights_problem({}) is not None
    assert all(weights_problem(p.weights) is None for p in PRESETS.values())

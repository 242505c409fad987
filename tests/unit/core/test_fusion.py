import pytest

from services.core.fusion import weighted_rrf


def test_worked_example_of_weighted_rrf():
    # lex: a, b ; tag: b ; vec: c, a   with weights (1, 1, 4), gamma 60, rank from 0
    legs = {"lex": ["a", "b"], "tag": ["b"], "vec": ["c", "a"]}
    fused = weighted_rrf(legs, {"lex": 1, "tag": 1, "vec": 4}, 60, {"a": 1, "b": 2, "c": 3})
    scores = {f.row_id: f.score for f in fused}
    assert scores["a"] == pytest.approx(1 / 60 + 4 / 61)
    assert scores["b"] == pytest.approx(1 / 61 + 1 / 60)
    assert scores["c"] == pytest.approx(4 / 60)
    assert [f.row_id for f in fused] == ["a", "c", "b"]
    assert fused[0].ranks == {"lex": 0, "vec": 1}


def test_absent_row_gets_nothing_from_a_leg_and_zero_weight_leg_counts_nothing():
    fused = weighted_rrf({"lex": ["a"], "vec": ["b"]}, {"lex": 0.0, "vec": 1.0}, 60, {"a": 1, "b": 2})
    assert {f.row_id: f.score for f in fused} == {"a": 0.0, "b": pytest.approx(1 / 60)}


def test_ties_go_to_the_most_recently_ingested_row():
    fused = weighted_rrf({"lex": ["old"], "vec": ["new"]}, {"lex": 1, "vec": 1}, 60, {"old": 5, "new": 9})
    assert [f.row_id for f in fused] == ["new", "old"]
    fused = weighted_rrf({"lex": ["new"], "vec": ["old"]}, {"lex": 1, "vec": 1}, 60, {"old": 5, "new": 9})
    assert [f.row_id for f in fused] == ["new", "old"]

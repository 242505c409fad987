"""Retrieval metrics of the harness: recall, complete gold-thread coverage, per-category means."""

from __future__ import annotations

import math

import pytest

from bench.retrieval.datasets import normalise_locomo_evidence
from bench.retrieval.metrics import (
    ALL,
    Scores,
    complete_at,
    complete_coverage_at,
    first_gold_at,
    recall_at,
    score_question,
    version_correct_at,
)
from bench.retrieval.report import category_table, overall_table

THREADS = {"a1": "s1", "a2": "s1", "b1": "s2", "c1": "s3", "x": None}


def test_recall_counts_gold_rows_within_the_budget():
    selected = ["a1", "b1", "zz", "a2"]
    assert recall_at(selected, ["a1", "a2"], 2) == 0.5
    assert recall_at(selected, ["a1", "a2"], 4) == 1.0
    assert recall_at(selected, ["a1", "a1"], 1) == 1.0  # repeated gold ids count once
    assert recall_at(selected, ["c1"], 10) == 0.0


def test_complete_coverage_needs_every_gold_thread():
    gold = ["a1", "b1"]  # sessions s1 and s2
    assert complete_coverage_at(["a2", "b1"], gold, 2, THREADS) == 1.0  # any turn of s1 counts
    assert complete_coverage_at(["a2", "c1", "b1"], gold, 2, THREADS) == 0.0
    assert complete_coverage_at(["a1", "x"], ["x"], 2, THREADS) == 1.0  # unthreaded row: itself


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="gold"):
        recall_at(["a"], [], 10)
    with pytest.raises(ValueError, match="k"):
        recall_at(["a"], ["a"], -1)
    with pytest.raises(ValueError, match="gold"):
        complete_coverage_at(["a"], [], 10, THREADS)


def test_scores_average_per_category_and_overall():
    s = Scores()
    s.add("1 multi-hop", score_question(["a1", "zz"], ["a1", "b1"], [1, 2], THREADS))
    s.add("4 single-hop", score_question(["c1"], ["c1"], [1, 2], THREADS))
    s.add("4 single-hop", score_question(["zz", "c1"], ["c1"], [1, 2], THREADS))
    assert s.mean("1 multi-hop", "recall@2") == 0.5
    assert s.mean("4 single-hop", "recall@1") == 0.5
    assert s.mean("4 single-hop", "coverage@2") == 1.0
    assert s.mean(ALL, "recall@2") == pytest.approx((0.5 + 1 + 1) / 3)
    assert s.categories() == ["1 multi-hop", "4 single-hop", ALL]
    assert math.isnan(s.mean("2 temporal", "recall@1"))


@pytest.mark.parametrize("raw, ids", [
    ("D3:12", ["D3:12"]),
    ("D8:6; D9:17", ["D8:6", "D9:17"]),
    ("D:11:26", ["D11:26"]),
    ("D30:05", ["D30:5"]),
    ("D9:1 D4:4 D4:6", ["D9:1", "D4:4", "D4:6"]),
    ("D", []),
])
def test_locomo_evidence_is_normalised(raw, ids):
    assert normalise_locomo_evidence(raw) == ids


def test_complete_needs_every_gold_row_within_the_budget():
    assert complete_at(["a1", "b1", "a2"], ["a1", "a2"], 3) == 1.0
    assert complete_at(["a1", "b1", "a2"], ["a1", "a2"], 2) == 0.0  # a2 is the third row
    assert complete_at(["a1"], ["a1", "a1"], 1) == 1.0
    with pytest.raises(ValueError, match="gold"):
        complete_at(["a1"], [], 1)


def test_version_correct_needs_the_holding_version_above_every_version_it_superseded():
    superseded = ["v1", "v2"]
    assert version_correct_at(["v3", "x", "v2", "v1"], "v3", superseded, 4) == 1.0
    assert version_correct_at(["x", "v3"], "v3", superseded, 2) == 1.0  # superseded ones absent: fine
    assert version_correct_at(["v2", "v3"], "v3", superseded, 2) == 0.0  # a superseded version ranks above
    assert version_correct_at(["x", "v1", "y", "v3"], "v3", superseded, 4) == 0.0
    assert version_correct_at(["v3", "v1"], "v3", superseded, 0) == 0.0
    assert version_correct_at(["v1", "x", "v3"], "v3", superseded, 2) == 0.0  # not in the top k
    # A later version above is no fault: only the versions it replaced count.
    assert version_correct_at(["v4", "v3"], "v3", superseded, 2) == 1.0


def test_score_question_adds_version_only_where_a_question_has_one():
    with_version = score_question(["v2", "v1"], ["v2"], [1, 2], THREADS, version="v2", superseded=["v1"])
    assert with_version["version@1"] == with_version["version@2"] == 1.0 and with_version["complete@1"] == 1.0
    swapped = score_question(["v1", "v2"], ["v2", "v1"], [1, 2], THREADS, version="v2", superseded=["v1"])
    assert swapped["version@2"] == 0.0 and swapped["recall@2"] == swapped["complete@2"] == 1.0
    assert not any(name.startswith("version") for name in score_question(["a1"], ["a1"], [1], THREADS))


def test_a_metric_some_questions_lack_is_averaged_over_those_that_have_it():
    s = Scores()
    s.add("as_of", score_question(["v2"], ["v2"], [1], THREADS, version="v2", superseded=["v1"]))
    s.add("as_of", score_question(["v1", "v2"], ["v2"], [1], THREADS, version="v2", superseded=["v1"]))
    s.add("justification", score_question(["a1"], ["a1", "b1"], [1], THREADS))
    assert s.mean(ALL, "version@1") == 0.5 and s.count(ALL, "version@1") == 2
    assert s.mean(ALL, "recall@1") == pytest.approx((1 + 0 + 0.5) / 3)
    assert math.isnan(s.mean("justification", "version@1")) and s.count("justification", "version@1") == 0
    table = category_table({"x": s}, "version@1")
    assert "as_of (n=2)" in table and "justification" not in table
    assert overall_table({"x": s}, [1], families=["recall", "version"]).splitlines()[-1] == "| x | 0.500 | 0.500 | 3 |"


def test_a_category_named_all_is_counted_once():
    s = Scores()
    s.add(ALL, score_question(["a1"], ["a1"], [1], THREADS))
    s.add(ALL, score_question(["zz"], ["a1"], [1], THREADS))
    assert s.counts[ALL] == 2 and s.mean(ALL, "recall@1") == 0.5 and s.categories() == [ALL]


def test_mrr_sees_the_order_inside_k_that_recall_ignores():
    assert first_gold_at(["x", "g", "h"], ["g", "h"], 3) == 0.5
    assert first_gold_at(["g", "x"], ["g"], 2) == 1.0
    assert first_gold_at(["x", "y", "g"], ["g"], 2) == 0.0  # the gold row is past k
    swapped, kept = score_question(["x", "g"], ["g"], [2], THREADS), score_question(["g", "x"], ["g"], [2], THREADS)
    assert swapped["recall@2"] == kept["recall@2"] and swapped["mrr@2"] < kept["mrr@2"]

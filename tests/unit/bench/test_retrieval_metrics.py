"""Retrieval metrics of the harness: recall, complete gold-thread coverage, per-category means."""

from __future__ import annotations

import math

import pytest

from bench.retrieval.datasets import normalise_locomo_evidence
from bench.retrieval.metrics import (
    ALL,
    Scores,
    complete_coverage_at,
    recall_at,
    score_question,
)

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

"""Selection variants (services.core.selection): fused order, pursuit over the pool, thread coverage."""

from __future__ import annotations

import numpy as np
import pytest

from services.core.pursuit import pursuit_select
from services.core.retrieval_config import RetrievalConfig
from services.core.selection import (
    Pool,
    context_scores,
    coverage_order,
    pursuit_order,
    select,
    thread_priority,
)


def pool_of(spec: list[tuple[str, float, str | None, int]]) -> Pool:
    ids, scores, threads, positions = zip(*spec, strict=True)
    return Pool(list(ids), np.array(scores), list(threads), list(positions))


# Fused order: a1 a2 a3 (thread A, consecutive turns), then b1 (thread B), c1 (C), x (unthreaded).
POOL = pool_of([
    ("a1", 1.00, "A", 10), ("a2", 0.90, "A", 11), ("a3", 0.80, "A", 12),
    ("b1", 0.50, "B", 20), ("c1", 0.45, "C", 30), ("x", 0.40, None, 31),
])


def test_pool_rejects_misaligned_fields():
    with pytest.raises(ValueError, match="same length"):
        Pool(["a", "b"], np.array([1.0]), [None, None], [1, 2])


def test_rrf_selector_keeps_the_fused_order():
    order, reason = select(POOL, np.zeros(2), lambda ids: np.zeros((len(ids), 2)), RetrievalConfig(selector="rrf", k=3))
    assert order == POOL.ids and reason == "fused"


def test_context_scores_add_the_best_neighbour_of_the_same_thread():
    s = context_scores(POOL, 0.5)
    assert s[0] == pytest.approx(1.00 + 0.5 * 0.90)  # a1: neighbour a2
    assert s[1] == pytest.approx(0.90 + 0.5 * 1.00)  # a2: best of a1, a3
    assert s[3] == pytest.approx(0.50)  # b1: no neighbour in the pool
    assert s[5] == pytest.approx(0.40)  # x is unthreaded; c1 at position 30 is another thread
    assert np.array_equal(context_scores(POOL, 0.0), POOL.scores)


def test_coverage_interleaves_rows_of_uncovered_threads():
    order = coverage_order(POOL, 4, context_weight=0.0, every=2)
    # Slots 0 and 2 by score, slots 1 and 3 from a thread not covered yet.
    assert order[:4] == ["a1", "b1", "a2", "c1"]
    assert sorted(order) == sorted(POOL.ids)  # the rest follows, nothing lost or repeated
    assert coverage_order(POOL, 4, 0.0, every=0)[:4] == ["a1", "a2", "a3", "b1"]


def test_coverage_answers_are_prefixes_of_larger_budgets():
    rng = np.random.default_rng(3)
    for _ in range(20):
        n = int(rng.integers(5, 40))
        pool = Pool([f"r{i}" for i in range(n)], np.sort(rng.random(n))[::-1].copy(),
                    [f"t{int(t)}" for t in rng.integers(0, 4, n)], list(rng.permutation(n)))
        full = coverage_order(pool, n, 0.3, 2)
        for budget in (1, 3, n // 2):
            assert coverage_order(pool, budget, 0.3, 2)[:budget] == full[:budget]


def with_lexical(pool: Pool, scores: list[float]) -> Pool:
    return Pool(pool.ids, pool.scores, pool.threads, pool.positions, np.array(scores))


def test_thread_priority_adds_a_vote_for_the_summed_lexical_score():
    # Thread C has two modest lexical hits whose sum (3.0) beats B's single best turn (2.5).
    pool = with_lexical(POOL, [4.0, 0.0, 0.0, 2.5, 1.5, 0.0])
    pool = Pool(pool.ids + ["c2"], np.append(pool.scores, 0.1), pool.threads + ["C"], pool.positions + [29],
                np.append(pool.lexical, 1.5))
    votes = thread_priority(pool, lexical_rows=10, gamma=1.0)
    # Fused order of threads: A, B, C, x. Lexical sums: A 4.0, C 3.0; B has one row in the
    # pool, so its 2.5 is that row's own score and casts no vote.
    assert votes["A"] == pytest.approx(1 / 1 + 1 / 1)
    assert votes["C"] == pytest.approx(1 / 3 + 1 / 2)
    assert votes["B"] == pytest.approx(1 / 2)
    assert votes[("row", 5)] == pytest.approx(1 / 4)  # unthreaded, no lexical score
    # Only the best `lexical_rows` lexical hits count: with 2 (a1 and b1), C gets no lexical vote.
    assert thread_priority(pool, lexical_rows=2, gamma=1.0)["C"] == pytest.approx(1 / 3)


def test_threads_of_one_row_keep_the_fused_order():
    # Every row its own thread (a mailbox without threading): the lexical scores must not
    # reorder the threads, or the coverage slots would simply favour BM25 over the fusion.
    pool = with_lexical(pool_of([(f"m{i}", 1.0 - i / 10, f"T{i}", i) for i in range(6)]),
                        [0.0, 0.0, 0.0, 0.0, 9.0, 8.0])
    votes = thread_priority(pool, lexical_rows=50)
    assert sorted(votes, key=lambda t: -votes[t]) == [f"T{i}" for i in range(6)]
    assert coverage_order(pool, 6, 0.0, 2, threads_by="lexical") == coverage_order(pool, 6, 0.0, 2)


def test_coverage_with_lexical_threads_fills_the_slot_from_the_first_voted_thread():
    pool = with_lexical(POOL, [0.0, 0.0, 0.0, 0.0, 5.0, 0.0])  # only C matches lexically
    pool = Pool(pool.ids + ["c2"], np.append(pool.scores, 0.1), pool.threads + ["C"], pool.positions + [29],
                np.append(pool.lexical, 1.0))  # a second row of C: a session, not a lone row
    order = coverage_order(pool, 4, 0.0, every=2, threads_by="lexical", lexical_rows=50)
    # Slot 1 goes to C (votes: C 1/5 + 1/3 > B 1/4 with gamma 3), slot 3 to B.
    assert order[:4] == ["a1", "c1", "a2", "b1"]
    assert coverage_order(pool, 4, 0.0, every=2)[:4] == ["a1", "b1", "a2", "c1"]
    with pytest.raises(ValueError, match="coverage_threads"):
        coverage_order(pool, 4, 0.0, every=2, threads_by="votes")


def test_coverage_when_every_thread_is_covered_falls_back_to_score():
    pool = pool_of([("a1", 1.0, "A", 1), ("a2", 0.9, "A", 5), ("a3", 0.8, "A", 9)])
    assert coverage_order(pool, 3, 0.0, 2)[:3] == ["a1", "a2", "a3"]


def test_select_coverage_honours_the_reserve_budget_and_reason():
    config = RetrievalConfig(selector="coverage", k=4, reserve=2, context_weight=0.0, coverage_every=2)
    order, reason = select(POOL, np.zeros(2), lambda ids: np.zeros((len(ids), 2)), config)
    assert reason == "coverage" and order[:2] == ["a1", "b1"]


def test_pursuit_order_is_pursuit_select_over_the_top_of_the_pool():
    rng = np.random.default_rng(0)
    E = rng.standard_normal((6, 8))
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    q = rng.standard_normal(8)
    vectors = dict(zip(POOL.ids, E, strict=True))
    order = pursuit_order(POOL, q, lambda ids: np.stack([vectors[i] for i in ids]), budget=3, size=5)
    expected = pursuit_select(q, E[:5], 3).order
    assert order[:3] == [POOL.ids[i] for i in expected]
    assert sorted(order) == sorted(POOL.ids)


def test_unknown_selector_is_named():
    with pytest.raises(ValueError, match="selector"):
        select(POOL, np.zeros(2), lambda ids: np.zeros((len(ids), 2)), RetrievalConfig(selector="mmr"))

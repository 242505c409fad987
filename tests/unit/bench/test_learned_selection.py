"""The learned-selection prototype (bench/learned_selection.py): its logistic fit and its greedy.
Its figures in docs/retrieval.md rest on these two functions."""

import numpy as np

from bench.learned_selection import expected_coverage_order, fit_logistic
from services.core.selection import Pool


def _pool(threads):
    n = len(threads)
    return Pool([f"r{i}" for i in range(n)], np.linspace(1.0, 0.5, n), list(threads), list(range(n)))


def test_logistic_fit_satisfies_its_optimality_condition():
    rng = np.random.default_rng(7)
    x = np.hstack([np.ones((400, 1)), rng.normal(size=(400, 3))])
    y = (rng.random(400) < 1 / (1 + np.exp(-(x @ np.array([-0.5, 2.0, -1.0, 0.0]))))).astype(float)
    w = fit_logistic(x, y, l2=1e-2)
    p = 1 / (1 + np.exp(-x @ w))
    assert np.abs(x.T @ (p - y) + 1e-2 * w).max() < 1e-8  # the regularised gradient vanishes
    assert w[1] > 1.0 and w[2] < -0.5  # the generating signs are recovered


def test_without_gain_rows_go_by_their_own_probability():
    pool = _pool(["a", "a", "b", "b", "c"])
    p_row = np.array([0.1, 0.9, 0.3, 0.2, 0.5])
    order = expected_coverage_order(pool, p_row, ["a", "b", "c"], np.array([0.5, 0.5, 0.5]),
                                    np.array([True, True, False]), gain=0.0, budget=5)
    assert order == ["r1", "r4", "r2", "r3", "r0"]


def test_gain_covers_likely_sessions_first_and_skips_one_row_threads():
    pool = _pool(["a", "a", "a", "b", "b", "c", "d", "d"])
    p_row = np.array([0.6, 0.5, 0.4, 0.1, 0.05, 0.3, 0.02, 0.01])
    p_session = np.array([0.9, 0.6, 0.9, 0.05])  # c would be likely, but it is one row: no bonus
    order = expected_coverage_order(pool, p_row, ["a", "b", "c", "d"], p_session,
                                    np.array([True, True, False, True]), gain=5.0, budget=4)
    # a's best row; then covering b is worth more than a's next row; then a's rows by p_row: d is
    # too unlikely for its bonus to count (P0 = 0.95, odds 0.053: 0.02 + 0.25 < 0.4), and c, though
    # likely, gets none (with it, c would come third).
    assert order == ["r0", "r3", "r1", "r2"]
    # A smaller budget's answer is a prefix of a larger one's.
    shorter = expected_coverage_order(pool, p_row, ["a", "b", "c", "d"], p_session,
                                      np.array([True, True, False, True]), gain=5.0, budget=2)
    assert shorter == order[:2]

"""MemPursuit selection against a brute-force reference that works in the embedding space itself
(explicit residual vectors, exhaustive enumeration of simplex supports)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import services.core.pursuit as pursuit_module
from services.core.pursuit import (
    PursuitResult,
    frank_wolfe_gap,
    pursuit_select,
    simplex_least_squares,
)

# ---------------------------------------------------------------- reference implementations


def brute_simplex(H: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float]:
    """min wᵀHw − 2bᵀw on the simplex by trying every support: on the optimal support the
    minimiser solves the bordered KKT system, and every feasible candidate bounds the minimum."""
    n = b.shape[0]
    best_w, best_f = None, np.inf
    for size in range(1, n + 1):
        for support in itertools.combinations(range(n), size):
            s = list(support)
            kkt = np.zeros((size + 1, size + 1))
            kkt[:size, :size] = H[np.ix_(s, s)]
            kkt[size, :size] = kkt[:size, size] = 1.0
            sol = np.linalg.lstsq(kkt, np.append(b[s], 1.0), rcond=None)[0][:size]
            if sol.min() < -1e-12:
                continue
            w = np.zeros(n)
            w[s] = np.clip(sol, 0.0, None)
            w /= w.sum()
            f = float(w @ H @ w - 2.0 * b @ w)
            if f < best_f - 1e-15:
                best_w, best_f = w, f
    assert best_w is not None
    return best_w, best_f


def brute_pursuit(q, E, k, ridge=0.0, bonus=None):
    """The pursuit written from its definition: residual vector r = q − E_Sᵀw in d dimensions."""
    order: list[int] = []
    w = np.zeros(0)
    errors = []
    for _ in range(min(k, len(E))):
        r = q - E[order].T @ w if order else q.copy()
        scores = E @ r + (0.0 if bonus is None else bonus)
        scores[order] = -np.inf
        order.append(int(np.argmax(scores)))
        S = E[order]
        H = S @ S.T + ridge * np.eye(len(order))
        w, _ = brute_simplex(H, S @ q)
        errors.append(float(np.sum((q - S.T @ w) ** 2)))
    return order, w, errors


def unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def check_simplex(w: np.ndarray) -> None:
    assert np.all(np.isfinite(w))
    assert w.min() >= 0.0
    assert abs(w.sum() - 1.0) <= 1e-9


def explicit_error(q, E, result: PursuitResult) -> float:
    return float(np.sum((q - E[result.order].T @ result.weights) ** 2))


# ---------------------------------------------------------------- simplex least squares


@pytest.mark.parametrize("seed", range(12))
def test_simplex_least_squares_matches_enumeration(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    E = unit_rows(rng, n, int(rng.integers(2, 12)))  # d < n gives singular G and zero weights
    q = unit_rows(rng, 1, E.shape[1])[0]
    ridge = [0.0, 0.05][seed % 2]
    H = E @ E.T + ridge * np.eye(n)
    expected_w, expected_f = brute_simplex(H, E @ q)
    w = simplex_least_squares(E @ E.T, E @ q, ridge=ridge)
    check_simplex(w)
    f = float(w @ H @ w - 2.0 * (E @ q) @ w)
    assert f == pytest.approx(expected_f, abs=1e-10)
    assert frank_wolfe_gap(H, E @ q, w) <= 1e-9
    if np.linalg.eigvalsh(H).min() > 1e-6:  # unique minimiser only when H is positive definite
        np.testing.assert_allclose(w, expected_w, atol=1e-6)


def test_simplex_least_squares_warm_start_reaches_the_same_point():
    rng = np.random.default_rng(7)
    E = unit_rows(rng, 8, 20)
    q = unit_rows(rng, 1, 20)[0]
    cold = simplex_least_squares(E @ E.T, E @ q)
    for warm in (np.ones(8), np.eye(8)[5], rng.random(8)):
        np.testing.assert_allclose(simplex_least_squares(E @ E.T, E @ q, warm=warm), cold, atol=1e-9)


def test_simplex_least_squares_from_a_start_spread_over_exact_duplicates():
    # Starting with every row free puts both copies of a row in the free set at once: its block
    # of G is singular, so the solve must go through the rank-revealing KKT path.
    rng = np.random.default_rng(15)
    base = unit_rows(rng, 4, 6)
    E = np.vstack([base, base[:2]])
    q = unit_rows(rng, 1, 6)[0]
    G, b = E @ E.T, E @ q
    w = simplex_least_squares(G, b, warm=np.ones(6))
    check_simplex(w)
    _, expected_f = brute_simplex(G, b)
    assert float(w @ G @ w - 2 * b @ w) == pytest.approx(expected_f, abs=1e-10)
    assert frank_wolfe_gap(G, b, w) <= 1e-9


def test_certificate_catches_a_wrong_fast_solve(monkeypatch):
    # Corrupt the incrementally updated inverse: the Frank-Wolfe check must notice and the cold
    # solve must still return the exact pursuit.
    rng = np.random.default_rng(16)
    E = unit_rows(rng, 8, 12)
    q = unit_rows(rng, 1, 12)[0]
    order, w, _ = brute_pursuit(q, E, 8)
    real_grow = pursuit_module._grow_inverse

    def corrupted(*args):
        inv = real_grow(*args)
        return None if inv is None else inv * 1.01

    monkeypatch.setattr(pursuit_module, "_grow_inverse", corrupted)
    result = pursuit_select(q, E, 8)
    assert result.order == order
    np.testing.assert_allclose(result.weights, w, atol=1e-6)


def test_simplex_least_squares_agrees_with_a_general_solver():
    optimize = pytest.importorskip("scipy.optimize")
    rng = np.random.default_rng(3)
    E = unit_rows(rng, 6, 10)
    q = unit_rows(rng, 1, 10)[0]
    G, b = E @ E.T, E @ q
    ours = simplex_least_squares(G, b, ridge=0.1)
    H = G + 0.1 * np.eye(6)
    general = optimize.minimize(
        lambda w: w @ H @ w - 2 * b @ w,
        np.full(6, 1 / 6),
        jac=lambda w: 2 * (H @ w - b),
        bounds=[(0, 1)] * 6,
        constraints=[{"type": "eq", "fun": lambda w: w.sum() - 1, "jac": lambda w: np.ones(6)}],
        method="SLSQP",
        options={"ftol": 1e-15, "maxiter": 500},
    )
    np.testing.assert_allclose(ours, general.x, atol=1e-6)


def test_simplex_least_squares_rejects_bad_shapes():
    with pytest.raises(ValueError, match="b: expected shape"):
        simplex_least_squares(np.eye(3), np.ones(2))
    with pytest.raises(ValueError, match="G: expected a square"):
        simplex_least_squares(np.ones((2, 3)), np.ones(2))
    with pytest.raises(ValueError, match="ridge"):
        simplex_least_squares(np.eye(2), np.ones(2), ridge=-1.0)


# ---------------------------------------------------------------- pursuit against the reference


@pytest.mark.parametrize("seed", range(16))
def test_pursuit_matches_brute_force(seed):
    rng = np.random.default_rng(100 + seed)
    P = int(rng.integers(3, 9))
    d = [4, 6, 16, 64][seed % 4]  # low d forces weights to zero and refits that drop members
    E = unit_rows(rng, P, d)
    q = unit_rows(rng, 1, d)[0]
    ridge = 0.0 if seed < 10 else 0.03
    k = int(rng.integers(1, P + 1))
    order, w, errors = brute_pursuit(q, E, k, ridge=ridge)
    result = pursuit_select(q, E, k, ridge=ridge)
    assert result.order == order
    np.testing.assert_allclose(result.weights, w, atol=1e-6)
    np.testing.assert_allclose(result.errors, errors, atol=1e-9)
    check_simplex(result.weights)


def test_first_pick_is_the_best_cosine_and_weight_is_one():
    rng = np.random.default_rng(11)
    E = unit_rows(rng, 40, 32)
    q = unit_rows(rng, 1, 32)[0]
    result = pursuit_select(q, E, 1)
    assert result.order == [int(np.argmax(E @ q))]
    np.testing.assert_array_equal(result.weights, [1.0])
    assert result.errors[0] == pytest.approx(2.0 - 2.0 * float(np.max(E @ q)), abs=1e-12)


def test_second_pick_prefers_the_complement_over_a_near_copy():
    # q = (a + c)/|a + c|; a2 is almost a. Pointwise ranking takes a then a2; pursuit takes c.
    a = np.array([1.0, 0.0, 0.0])
    c = np.array([0.0, 1.0, 0.0])
    a2 = np.array([0.99, 0.0, 0.141])
    E = np.vstack([a, a2 / np.linalg.norm(a2), c])
    q = np.array([1.0, 0.8, 0.0])
    q /= np.linalg.norm(q)
    assert np.argsort(-(E @ q))[:2].tolist() == [0, 1]
    result = pursuit_select(q, E, 2)
    assert result.order == [0, 2]
    assert result.errors[1] < result.errors[0]


def test_prefix_property():
    rng = np.random.default_rng(5)
    E = unit_rows(rng, 60, 24)
    q = unit_rows(rng, 1, 24)[0]
    short, long = pursuit_select(q, E, 3), pursuit_select(q, E, 6)
    assert long.order[:3] == short.order
    np.testing.assert_allclose(long.errors[:3], short.errors, atol=1e-12)


def test_budget_larger_than_pool_and_zero_budget():
    rng = np.random.default_rng(2)
    E = unit_rows(rng, 5, 8)
    q = unit_rows(rng, 1, 8)[0]
    result = pursuit_select(q, E, 50)
    assert sorted(result.order) == [0, 1, 2, 3, 4]
    assert len(result.errors) == 5
    check_simplex(result.weights)
    empty = pursuit_select(q, E, 0)
    assert empty.order == [] and empty.errors == [] and empty.weights.shape == (0,)
    assert pursuit_select(q, np.zeros((0, 8)), 3).order == []


@pytest.mark.parametrize("jitter", [0.0, 1e-9, 1e-6])
def test_duplicates_and_near_duplicates(jitter):
    rng = np.random.default_rng(8)
    base = unit_rows(rng, 10, 16)
    E = np.vstack([base, base[:6] + jitter * rng.standard_normal((6, 16)), base[:3]])
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    q = unit_rows(rng, 1, 16)[0]
    q = 0.5 * q + 0.5 * base[:4].mean(axis=0)  # lean on the duplicated rows
    q /= np.linalg.norm(q)
    for ridge in (0.0, 1e-3):
        result = pursuit_select(q, E, len(E), ridge=ridge)
        assert len(set(result.order)) == len(E)
        check_simplex(result.weights)
        assert np.all(np.isfinite(result.errors))
        S = E[result.order]
        H = S @ S.T + ridge * np.eye(len(S))
        assert frank_wolfe_gap(H, S @ q, result.weights) <= 1e-9 * (1.0 + ridge)
        assert explicit_error(q, E, result) == pytest.approx(result.errors[-1], abs=1e-9)
        # the minimum over the selected set cannot beat the 10 distinct directions' own minimum
        Hb = base @ base.T + ridge * np.eye(10)
        _, f_base = brute_simplex(Hb, base @ q)
        assert result.objectives[-1] <= f_base + float(q @ q) + 1e-9


def test_zero_rows_in_the_pool():
    # A zero embedding (an empty text, say) is a legal, useless row: never NaN, never preferred.
    rng = np.random.default_rng(14)
    E = np.vstack([np.zeros((2, 6)), unit_rows(rng, 5, 6)])
    q = unit_rows(rng, 1, 6)[0]
    result = pursuit_select(q, E, 7)
    check_simplex(result.weights)
    assert np.all(np.isfinite(result.errors))
    assert result.order[0] >= 2
    order, _, errors = brute_pursuit(q, E, 7)
    np.testing.assert_allclose(result.errors, errors, atol=1e-9)
    only_zero = pursuit_select(q, np.zeros((3, 6)), 3)
    assert only_zero.order == [0, 1, 2]
    assert only_zero.errors == pytest.approx([float(q @ q)] * 3, abs=1e-12)


def test_ridge_spreads_weight_and_objective_counts_it():
    rng = np.random.default_rng(9)
    E = unit_rows(rng, 30, 12)
    q = unit_rows(rng, 1, 12)[0]
    plain = pursuit_select(q, E, 8)
    ridged = pursuit_select(q, E, 8, ridge=0.5)
    check_simplex(ridged.weights)
    assert float(ridged.weights @ ridged.weights) < float(plain.weights @ plain.weights)
    assert ridged.objectives[-1] == pytest.approx(
        ridged.errors[-1] + 0.5 * float(ridged.weights @ ridged.weights), abs=1e-12
    )
    assert ridged.errors[-1] == pytest.approx(explicit_error(q, E, ridged), abs=1e-9)
    assert plain.objectives == plain.errors


def test_early_stop_at_the_first_small_relative_gain():
    rng = np.random.default_rng(4)
    E = unit_rows(rng, 80, 32)
    q = unit_rows(rng, 1, 32)[0]
    full = pursuit_select(q, E, 30)
    obj = np.array(full.objectives)
    gains = (obj[:-1] - obj[1:]) / obj[:-1]
    tau = float(np.sqrt(gains[4] * gains[5]))  # the path soon reaches the hull's floor: gain 0
    assert tau > 0.0
    stop = int(np.argmax(gains <= tau)) + 1  # index of the pick whose gain first falls to tau
    early = pursuit_select(q, E, 30, tol=tau)
    assert early.order == full.order[: stop + 1]
    assert len(early.order) < len(full.order)
    check_simplex(early.weights)


def test_early_stop_when_the_query_is_reconstructed():
    rng = np.random.default_rng(6)
    E = unit_rows(rng, 10, 8)
    result = pursuit_select(E[3], E, 10, tol=1e-6)
    assert result.order[0] == 3 and result.errors[0] == pytest.approx(0.0, abs=1e-12)
    assert len(result.order) == 2
    assert len(pursuit_select(E[3], E, 10).order) == 10  # tol = 0 never stops early


def test_score_bonus_hook():
    rng = np.random.default_rng(12)
    E = unit_rows(rng, 12, 10)
    q = unit_rows(rng, 1, 10)[0]
    bonus = rng.random(12)
    faithful = pursuit_select(q, E, 6)
    assert pursuit_select(q, E, 6, score_bonus=bonus, bonus_weight=0.0).order == faithful.order
    order, w, _ = brute_pursuit(q, E, 6, bonus=0.3 * bonus)
    hooked = pursuit_select(q, E, 6, score_bonus=bonus, bonus_weight=0.3)
    assert hooked.order == order
    np.testing.assert_allclose(hooked.weights, w, atol=1e-6)
    dominated = pursuit_select(q, E, 4, score_bonus=bonus, bonus_weight=1e6)
    assert dominated.order == np.argsort(-bonus)[:4].tolist()


def test_float32_pool_gives_the_float64_answer():
    rng = np.random.default_rng(13)
    E = unit_rows(rng, 50, 48).astype(np.float32)
    q = unit_rows(rng, 1, 48)[0].astype(np.float32)
    a = pursuit_select(q, E, 10)
    b = pursuit_select(q.astype(np.float64), E.astype(np.float64), 10)
    assert a.order == b.order
    np.testing.assert_array_equal(a.weights, b.weights)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"query": np.ones((2, 4))}, "query: expected a 1-d"),
        ({"query": np.array([0.5, np.inf, 0.5, 0.5])}, "query: values must be finite"),
        ({"pool": np.ones(4)}, "pool: expected a 2-d"),
        ({"pool": np.ones((3, 5))}, "pool: rows have dimension 5"),
        ({"pool": np.array([[1.0, 0, 0, 0], [np.nan, 0, 0, 0]])}, r"pool\[1\]: values must be finite"),
        ({"k": -1}, "k: expected a non-negative integer"),
        ({"k": 2.5}, "k: expected a non-negative integer"),
        ({"ridge": -0.1}, "ridge"),
        ({"tol": float("nan")}, "tol"),
        ({"score_bonus": np.ones(2), "bonus_weight": 1.0}, "score_bonus: expected shape"),
        ({"bonus_weight": 1.0}, "score_bonus: required"),
    ],
)
def test_bad_input_names_the_parameter(kwargs, message):
    args = {"query": np.ones(4) / 2, "pool": np.eye(4), "k": 2} | kwargs
    query, pool, k = args.pop("query"), args.pop("pool"), args.pop("k")
    with pytest.raises(ValueError, match=message):
        pursuit_select(query, pool, k, **args)


# ---------------------------------------------------------------- properties


@st.composite
def pursuit_cases(draw):
    P = draw(st.integers(1, 12))
    d = draw(st.integers(2, 8))
    raw = draw(hnp.arrays(np.float64, (P + 1, d), elements=st.floats(-1, 1, width=32)))
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    assume(bool(np.all(norms > 1e-3)))
    unit = raw / norms
    if draw(st.booleans()):  # duplicated rows: the degenerate case the solver must survive
        unit = np.vstack([unit, unit[1 : 1 + draw(st.integers(1, P))]])
    k = draw(st.integers(1, len(unit) + 2))
    ridge = draw(st.sampled_from([0.0, 0.0, 1e-4, 0.1]))
    return unit[0], unit[1:], k, ridge


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pursuit_cases())
def test_property_valid_simplex_monotone_and_certified(case):
    q, E, k, ridge = case
    result = pursuit_select(q, E, k, ridge=ridge)
    assert len(result.order) == min(k, len(E)) == len(set(result.order))
    assert result.order[0] == int(np.argmax(E @ q))
    check_simplex(result.weights)
    obj = np.array(result.objectives)
    assert np.all(np.diff(obj) <= 1e-12)  # a new member may get weight 0, so never worse
    if ridge == 0.0:
        assert np.all(np.diff(np.array(result.errors)) <= 1e-12)
    S = E[result.order]
    H = S @ S.T + ridge * np.eye(len(S))
    assert frank_wolfe_gap(H, S @ q, result.weights) <= 1e-9 * (1.0 + ridge)
    assert explicit_error(q, E, result) == pytest.approx(result.errors[-1], abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(pursuit_cases())
def test_property_prefix(case):
    q, E, _, ridge = case
    long = pursuit_select(q, E, 6, ridge=ridge)
    short = pursuit_select(q, E, 3, ridge=ridge)
    assert long.order[: len(short.order)] == short.order

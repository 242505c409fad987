"""MemPursuit: fully corrective residual pursuit on the probability simplex (MemPursuit §3.2-3.3).

The query is reconstructed as a convex combination of selected pool embeddings; each next pick is
the candidate best aligned with the residual, after which all selected weights are refitted
exactly. Everything runs on inner products: b = E q and the Gram rows of the picks, so each refit
is a small k×k problem and the pool is touched only by one matrix-vector product per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A refit is accepted once its Frank-Wolfe gap (an upper bound on the distance to the optimum of
# the objective, paper §B.4) is at most this times max(1, max_i H_ii) — 1 + ridge for unit rows.
CERTIFICATE_TOL = 1e-9


@dataclass(frozen=True)
class PursuitResult:
    order: list[int]  # pool indices in selection order; a prefix is the answer for a smaller budget
    weights: np.ndarray  # simplex weights of the final fit, aligned with `order`
    errors: list[float]  # ||q - Σ w_i e_i||² after each step, aligned with `order`
    objectives: list[float]  # errors + ridge·||w||² after each step (equal to errors when ridge = 0)


def pursuit_select(
    query: np.ndarray,
    pool: np.ndarray,
    k: int,
    *,
    ridge: float = 0.0,
    tol: float = 0.0,
    score_bonus: np.ndarray | None = None,
    bonus_weight: float = 0.0,
) -> PursuitResult:
    """Select up to `k` rows of `pool` (P, d) to reconstruct `query` (d,).

    Pick score = residual score rᵀe_j + bonus_weight · score_bonus[j]; with bonus_weight = 0 this is
    the faithful MemPursuit, whose first pick is argmax E q (the best cosine for unit vectors).
    Stops at k picks, when the pool is exhausted, or — only when tol > 0 — once a pick improves the
    objective by a relative amount ≤ tol; that last pick is kept (the paper returns every entry
    selected before termination). Ties in the score go to the lower pool index.
    """
    q, E = _check_inputs(query, pool)
    k = _check_int("k", k)
    ridge = _check_nonneg("ridge", ridge)
    tol = _check_nonneg("tol", tol)
    n_pool = E.shape[0]
    bonus = _check_bonus(score_bonus, bonus_weight, n_pool)
    budget = min(k, n_pool)
    if budget == 0:
        return PursuitResult([], np.zeros(0), [], [])

    b = E @ q
    _check_pool_products(E, b)
    qq = float(q @ q)
    # Pick scores are base − wᵀ·rows; a picked index gets −inf in base so it is never picked again.
    base = b.copy() if bonus is None else b + bonus
    rows = np.empty((budget, n_pool))  # Gram rows G[order[i], :], computed per pick, not P×P
    hss = np.empty((budget, budget))  # G + ridge·I restricted to the picks, in pick order
    b_sel = np.empty(budget)  # b restricted to the picks, in pick order
    order: list[int] = []
    picked = np.empty(budget, dtype=np.intp)  # `order` as an index array
    errors: list[float] = []
    objectives: list[float] = []
    scale = 1.0  # max(1, largest diagonal of H so far): sizes the tolerances
    fit = _Fit(np.ones(1), [0], None)
    mu = 0.0  # common gradient value wᵀ(Hw − b) on the free set of the current fit
    pick_scores = base
    for m in range(budget):
        j = int(pick_scores.argmax())
        # rᵀe_j = b_j − Σ w_i G_ij: the multiplier of the new weight is −rᵀe_j − mu.
        residual_score = float(pick_scores[j]) - (0.0 if bonus is None else float(bonus[j]))
        order.append(j)
        picked[m] = j
        base[j] = -np.inf
        np.dot(E, E[j], out=rows[m])
        hss[m, : m + 1] = rows[m, picked[: m + 1]]
        hss[: m + 1, m] = hss[m, : m + 1]
        hss[m, m] += ridge
        scale = max(scale, float(hss[m, m]))
        H = hss[: m + 1, : m + 1]
        b_sel[m] = b[j]
        b_s = b_sel[: m + 1]
        if m == 0:
            fit.inv = 1.0 / H if H[0, 0] > 0.0 else None  # a zero row has no inverse to carry
            grad = H[0] - b_s
        elif -residual_score - mu >= -_MULTIPLIER_TOL * scale:
            # The new weight would stay at zero: the current fit remains optimal on the larger set.
            fit.w = np.concatenate((fit.w, _ZERO))
            objectives.append(objectives[-1])
            errors.append(errors[-1])
            pick_scores = base - fit.w @ rows[: m + 1]
            if tol > 0.0:
                break  # zero relative improvement
            continue
        else:
            fit.w = np.concatenate((fit.w, _ZERO))
            fit, grad = _refit(H, b_s, fit, scale, release=m)
        w = fit.w
        mu = float(w @ grad)
        obj = max(qq - float(w @ b_s) + mu, 0.0)  # wᵀHw = wᵀ(Hw − b) + wᵀb
        objectives.append(obj)
        errors.append(max(obj - ridge * float(w @ w), 0.0) if ridge else obj)
        pick_scores = base - w @ rows[: m + 1]
        if tol > 0.0 and m > 0:
            prev = objectives[-2]
            gain = (prev - obj) / prev if prev > 0.0 else 0.0
            if gain <= tol:
                break
    return PursuitResult(order, fit.w / fit.w.sum(), errors, objectives)


def simplex_least_squares(
    G: np.ndarray, b: np.ndarray, ridge: float = 0.0, warm: np.ndarray | None = None
) -> np.ndarray:
    """argmin over the probability simplex of wᵀGw − 2bᵀw + ridge·||w||², for a symmetric PSD G.

    Exact up to rounding: a primal active-set method whose answer carries a Frank-Wolfe gap
    ≤ 1e-9·max(1, max_i H_ii). `warm` (any non-negative vector with a positive sum) is where the search starts.
    """
    H = np.array(G, dtype=np.float64)
    bb = np.array(b, dtype=np.float64)
    if H.ndim != 2 or H.shape[0] != H.shape[1]:
        raise ValueError(f"G: expected a square matrix, got shape {H.shape}")
    if bb.shape != (H.shape[0],):
        raise ValueError(f"b: expected shape ({H.shape[0]},), got {bb.shape}")
    if H.shape[0] == 0:
        raise ValueError("G: the simplex of an empty set is empty")
    if not (np.isfinite(H).all() and np.isfinite(bb).all()):
        raise ValueError("G, b: values must be finite")
    ridge = _check_nonneg("ridge", ridge)
    H = 0.5 * (H + H.T)
    if ridge:
        H[np.diag_indices_from(H)] += ridge
    scale = max(1.0, float(np.diag(H).max()))
    start = _best_vertex(H, bb)
    if warm is not None:
        w0 = np.array(warm, dtype=np.float64)
        if w0.shape != bb.shape or not np.isfinite(w0).all():
            raise ValueError(f"warm: expected {bb.shape[0]} finite values, got shape {w0.shape}")
        w0 = np.clip(w0, 0.0, None)
        if w0.sum() > 0.0:
            start = w0 / w0.sum()
    if bb.shape[0] == 1:
        return np.ones(1)
    fit = _Fit(start, np.flatnonzero(start > 0.0).tolist(), None)
    w = _refit(H, bb, fit, scale, release=None)[0].w
    return w / w.sum()


def frank_wolfe_gap(H: np.ndarray, b: np.ndarray, w: np.ndarray) -> float:
    """∇f(w)ᵀw − min_i ∇f(w)_i for f = wᵀHw − 2bᵀw: an upper bound on f(w) − min over the simplex
    (H here already includes any ridge), zero exactly at the optimum (paper §B.4)."""
    grad = 2.0 * (H @ w - b)
    return float(grad @ w - grad[grad.argmin()])


_ZERO = np.zeros(1)
_ONES = np.ones(256)  # reused slices; a budget beyond it allocates
_MULTIPLIER_TOL = 1e-12  # multipliers above −tol·scale count as non-negative (rounding of G, b)


class _Fit:
    """Refit state carried from one pursuit step to the next: the weights, the free set (positions
    solved for, in the order they were freed) and the inverse of H on it (None when unknown or
    ill-conditioned)."""

    __slots__ = ("w", "free", "inv")

    def __init__(self, w: np.ndarray, free: list[int], inv: np.ndarray | None):
        self.w = w
        self.free = free
        self.inv = inv


def _refit(
    H: np.ndarray, b: np.ndarray, fit: _Fit, scale: float, release: int | None
) -> tuple[_Fit, np.ndarray]:
    """Exact refit from `fit`; returns it with the half-gradient Hw − b, after checking the
    Frank-Wolfe certificate (paper §B.4): the objective is within 1e-9·scale of the optimum; a
    failed certificate (rounding, or cycling on a degenerate block) triggers a cold robust solve."""
    result = _active_set(H, b, fit, scale, release)
    grad = H @ result.w - b
    if 2.0 * (float(result.w @ grad) - float(grad[grad.argmin()])) > CERTIFICATE_TOL * scale:
        # Restart from the best vertex with the KKT solve throughout; keep the lower objective.
        vertex = _best_vertex(H, b)
        cold = _active_set(H, b, _Fit(vertex, [int(vertex.argmax())], None), scale, None, robust=True)
        if _objective(H, b, cold.w) < _objective(H, b, result.w):
            result = cold
            grad = H @ result.w - b
    return result, grad


def _active_set(
    H: np.ndarray, b: np.ndarray, fit: _Fit, scale: float, release: int | None, robust: bool = False
) -> _Fit:
    """Primal active-set method: the free set is solved for, the rest is held at zero.

    Each iteration solves the equality-constrained problem on the free set, walks towards its
    solution until a weight hits zero (which then leaves the free set), and on arriving frees the
    held coordinate whose multiplier is most negative, or stops when none is. `release` names a
    coordinate the caller already knows to have a negative multiplier at an optimal `fit`. The
    inverse of H on the free set is kept by bordering, so a typical pursuit step costs a few
    products of k×k arrays and no factorisation.
    """
    n = b.shape[0]
    w = fit.w  # owned: every caller hands over a fresh array
    free = list(fit.free)
    inv = None if robust else fit.inv
    if inv is None and not robust:
        inv = _checked_inverse(H[np.ix_(free, free)])
    eps = _MULTIPLIER_TOL * scale
    arrived = release is not None
    for _ in range(5 * n + 20):
        if arrived:
            if release is not None:
                j, release = release, None
            else:
                if len(free) == n:
                    break  # nothing is held at zero, so the equality solution is the optimum
                grad = H @ w - b
                slack = grad - float(w @ grad)  # w @ grad is the common gradient value on the free set
                slack[free] = np.inf
                j = int(slack.argmin())
                if slack[j] >= -eps:
                    break
            if inv is not None:
                inv = _grow_inverse(inv, H, free, j)
            free.append(j)
        idx = np.array(free, dtype=np.intp)
        if inv is not None:
            # Stationarity H w = b − ν·1 with Σw = 1 gives w = x + c·y, x = H⁻¹b, y = H⁻¹1, and
            # Σx = yᵀb by symmetry (dot products are much cheaper than sum() on tiny arrays here).
            bf = b[idx]
            ones = _ONES[: idx.shape[0]] if idx.shape[0] <= _ONES.shape[0] else np.ones(idx.shape[0])
            y = inv @ ones
            target = inv @ bf + ((1.0 - float(y @ bf)) / float(y @ ones)) * y
        else:
            target = _equality_qp(H[np.ix_(idx, idx)], b[idx], scale)
        if target[target.argmin()] >= 0.0:
            w[idx] = target
            arrived = True
            continue
        current = w[idx]
        step = target - current
        shrinking = step < 0.0
        ratios = np.full(step.shape, np.inf)
        ratios[shrinking] = current[shrinking] / -step[shrinking]
        alpha = float(ratios[ratios.argmin()])
        w[idx] = current + alpha * step
        for pos in sorted(np.flatnonzero(ratios <= alpha).tolist(), reverse=True):
            w[free[pos]] = 0.0
            del free[pos]
            if inv is not None:
                inv = _shrink_inverse(inv, pos)
        arrived = False
    if w[w.argmin()] < 0.0:  # rounding after a partial step; the full steps sum to 1 already
        np.maximum(w, 0.0, out=w)
        w /= w.sum()
    if inv is None:
        inv = _checked_inverse(H[np.ix_(free, free)])
    return _Fit(w, free, inv)


def _grow_inverse(inv: np.ndarray, H: np.ndarray, free: list[int], j: int) -> np.ndarray | None:
    """Inverse of H on free + [j] from the inverse on free, by the bordering (Schur) formula."""
    h = H[free, j]
    u = inv @ h
    schur = float(H[j, j] - h @ u)
    if not schur > 1e-8 * abs(float(H[j, j])):
        return None  # j is (nearly) in the span of the free set: solve the KKT system instead
    m = inv.shape[0]
    v = u / schur
    out = np.empty((m + 1, m + 1))
    np.add(inv, u[:, None] * v, out=out[:m, :m])
    out[:m, m] = out[m, :m] = -v
    out[m, m] = 1.0 / schur
    return out


def _shrink_inverse(inv: np.ndarray, pos: int) -> np.ndarray:
    """Inverse of H with row and column `pos` removed, from the inverse of H."""
    keep = np.delete(np.arange(inv.shape[0]), pos)
    c = inv[keep, pos]
    return inv[np.ix_(keep, keep)] - np.outer(c, c / inv[pos, pos])


def _checked_inverse(block: np.ndarray) -> np.ndarray | None:
    if block.shape[0] == 0:
        return np.zeros((0, 0))
    try:
        inv = np.linalg.inv(block)
    except np.linalg.LinAlgError:
        return None
    if not np.isfinite(inv).all():
        return None
    defect = np.abs(block @ inv - np.eye(block.shape[0])).max()
    return inv if defect <= 1e-8 else None


def _equality_qp(H: np.ndarray, b: np.ndarray, scale: float) -> np.ndarray:
    """argmin wᵀHw − 2bᵀw subject to Σw = 1 (no sign constraint), via the bordered KKT system."""
    m = b.shape[0]
    if m == 1:
        return np.ones(1)
    kkt = np.empty((m + 1, m + 1))
    kkt[:m, :m] = H
    kkt[m, :m] = 1.0
    kkt[:m, m] = 1.0
    kkt[m, m] = 0.0
    rhs = np.append(b, 1.0)
    try:
        sol = np.linalg.solve(kkt, rhs)
    except np.linalg.LinAlgError:
        sol = None
    if sol is not None and np.isfinite(sol).all():
        residual = float(np.abs(kkt @ sol - rhs).max())
        if residual <= 1e-10 * scale * (1.0 + float(np.abs(sol).max())):
            return sol[:m]
    # Singular block (duplicate rows at ridge 0): the system stays consistent because b lies in
    # the row space of E, so the minimum-norm solution is a true minimiser.
    return np.linalg.lstsq(kkt, rhs, rcond=1e-13)[0][:m]


def _best_vertex(H: np.ndarray, b: np.ndarray) -> np.ndarray:
    w = np.zeros(b.shape[0])
    w[int(np.argmin(np.diag(H) - 2.0 * b))] = 1.0
    return w


def _objective(H: np.ndarray, b: np.ndarray, w: np.ndarray) -> float:
    return float(w @ H @ w - 2.0 * (b @ w))


def _check_inputs(query: np.ndarray, pool: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    q = np.asarray(query, dtype=np.float64)
    E = np.asarray(pool, dtype=np.float64)
    if q.ndim != 1:
        raise ValueError(f"query: expected a 1-d vector, got shape {q.shape}")
    if E.ndim != 2:
        raise ValueError(f"pool: expected a 2-d array (P, d), got shape {E.shape}")
    if E.shape[0] and E.shape[1] != q.shape[0]:
        raise ValueError(f"pool: rows have dimension {E.shape[1]}, query has {q.shape[0]}")
    if not np.isfinite(q).all():
        raise ValueError("query: values must be finite")
    return q, np.ascontiguousarray(E)


def _check_pool_products(E: np.ndarray, b: np.ndarray) -> None:
    # A NaN or inf anywhere in row i makes b_i non-finite, so checking the P products of b = E q
    # replaces a scan of all P·d pool entries on the hot path.
    if np.isfinite(b).all():
        return
    bad_rows = np.flatnonzero(~np.isfinite(E).all(axis=1))
    if bad_rows.size:
        raise ValueError(f"pool[{int(bad_rows[0])}]: values must be finite")
    raise ValueError("pool: values too large, their inner products with the query overflow")


def _check_bonus(score_bonus: np.ndarray | None, bonus_weight: float, n_pool: int) -> np.ndarray | None:
    weight = float(bonus_weight)
    if not np.isfinite(weight):
        raise ValueError("bonus_weight: must be finite")
    if score_bonus is None:
        if weight != 0.0:
            raise ValueError("score_bonus: required when bonus_weight is non-zero")
        return None
    bonus = np.asarray(score_bonus, dtype=np.float64)
    if bonus.shape != (n_pool,):
        raise ValueError(f"score_bonus: expected shape ({n_pool},), got {bonus.shape}")
    if not np.isfinite(bonus).all():
        raise ValueError("score_bonus: values must be finite")
    return None if weight == 0.0 else weight * bonus


def _check_int(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name}: expected a non-negative integer, got {value!r}")
    return int(value)


def _check_nonneg(name: str, value: float) -> float:
    v = float(value)
    if not np.isfinite(v) or v < 0.0:
        raise ValueError(f"{name}: expected a finite number ≥ 0, got {value!r}")
    return v

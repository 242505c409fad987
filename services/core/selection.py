"""Selection: from the fused candidate list to an ordered answer (pure; no I/O).

The read path fuses the legs (weighted RRF) into one ranked list; a selector then decides the
order in which rows fill the k slots. Every selector returns an order over the whole matched
list (selected rows first), so the recency reserve can follow any of them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from services.core.fusion import Fused
from services.core.pursuit import pursuit_select

VectorsFor = Callable[[Sequence[str]], np.ndarray]  # row ids -> (n, d) embeddings, aligned


@dataclass(frozen=True)
class Pool:
    """The fused list of one query: ids best first, their fused scores, and for each row its
    thread (None when unthreaded) and ingest position (turn order inside a thread)."""

    ids: list[str]
    scores: np.ndarray
    threads: list[str | None]
    positions: list[int]
    # The lexical leg's BM25 score of each row, 0 where that leg did not return it (optional;
    # the "lexical" thread order of the coverage selector needs it).
    lexical: np.ndarray | None = None

    @classmethod
    def from_fused(cls, fused: Sequence[Fused], thread_of: Callable[[str], str | None],
                   position_of: Callable[[str], int], lexical: Mapping[str, float]) -> Pool:
        """The pool of a fused list, given each row's thread and ingest position and the lexical
        leg's scores (the read path and the harness's replay build it the same way)."""
        ids = [f.row_id for f in fused]
        return cls(ids, np.array([f.score for f in fused], dtype=np.float64), [thread_of(r) for r in ids],
                   [position_of(r) for r in ids], np.array([lexical.get(r, 0.0) for r in ids]))

    def __post_init__(self):
        n = len(self.ids)
        if not (len(self.scores) == len(self.threads) == len(self.positions) == n):
            raise ValueError("pool: ids, scores, threads and positions must have the same length")
        if self.lexical is not None and len(self.lexical) != n:
            raise ValueError("pool: lexical scores must have one value per row")


def _with_rest(pool: Pool, chosen: Sequence[int]) -> list[str]:
    taken = set(chosen)
    return [pool.ids[i] for i in chosen] + [rid for i, rid in enumerate(pool.ids) if i not in taken]


def fused_order(pool: Pool) -> list[str]:
    return list(pool.ids)


def pursuit_order(
    pool: Pool, query: np.ndarray, vectors_for: VectorsFor, budget: int, size: int,
    ridge: float = 0.0, tol: float = 0.0, bonus_weight: float = 0.0,
) -> list[str]:
    """MemPursuit over the top `size` fused rows; with bonus_weight > 0 each pick score adds
    bonus_weight × the fused score scaled to [0, 1] over the pool."""
    size = min(max(size, 1), len(pool.ids))
    if size == 0 or budget <= 0:
        return list(pool.ids)
    E = vectors_for(pool.ids[:size])
    bonus = None
    if bonus_weight:
        s = np.asarray(pool.scores[:size], dtype=np.float64)
        bonus = (s - s.min()) / (s.max() - s.min()) if s.max() > s.min() else np.ones(size)
    result = pursuit_select(query, E, budget, ridge=ridge, tol=tol, score_bonus=bonus, bonus_weight=bonus_weight)
    return _with_rest(pool, result.order)


def context_scores(pool: Pool, weight: float, window: int = 1) -> np.ndarray:
    """Fused scores plus `weight` × the best fused score among the row's thread neighbours:
    matched rows of the same thread at most `window` ingest positions away. A turn that answers
    the turn before it (or is answered by the next) inherits part of that turn's match."""
    scores = np.asarray(pool.scores, dtype=np.float64)
    if weight == 0.0 or window <= 0:
        return scores.copy()
    # Plain floats and a dict: this runs on every query, and numpy's per-element access costs
    # more than the arithmetic here.
    plain = scores.tolist()
    at = {(t, p): i for i, (t, p) in enumerate(zip(pool.threads, pool.positions, strict=True)) if t is not None}
    offsets = [d for d in range(-window, window + 1) if d]
    out = list(plain)
    for i, (t, p) in enumerate(zip(pool.threads, pool.positions, strict=True)):
        if t is None:
            continue
        neighbours = [plain[j] for j in (at.get((t, p + d)) for d in offsets) if j is not None]
        if neighbours:
            out[i] += weight * max(neighbours)
    return np.array(out, dtype=np.float64)


def thread_priority(pool: Pool, lexical_rows: int, gamma: float = 3.0) -> dict:
    """Threads ordered by two votes, fused like RRF (`1/(gamma + rank)` each): the thread's best
    fused row, and the sum of the BM25 scores of its rows among the `lexical_rows` best lexical
    hits. The sum sees a session whose turns each match a few of the query's words, where no
    single turn ranks high (LoCoMo's multi-session questions).

    Only threads with at least two rows in the pool get the second vote. A thread of one row has
    no session to find: its "sum" is that row's own BM25 score, and voting on it would only
    re-weight the fusion towards BM25 (a mailbox whose messages are each their own thread lost
    a question of 28 to that on Enron)."""
    threads = thread_keys(pool)
    votes: dict = {}
    for rank, thread in enumerate(dict.fromkeys(threads)):  # the pool is in fused order
        votes[thread] = 1.0 / (gamma + rank)
    if pool.lexical is not None:
        lexical = np.asarray(pool.lexical, dtype=np.float64)
        sizes = Counter(threads)
        sums: dict = {}
        for i in np.argsort(-lexical, kind="stable")[:lexical_rows]:
            if lexical[i] > 0 and sizes[threads[i]] > 1:
                sums[threads[i]] = sums.get(threads[i], 0.0) + lexical[i]
        for rank, thread in enumerate(sorted(sums, key=lambda t: -sums[t])):
            votes[thread] += 1.0 / (gamma + rank)
    return votes


def coverage_order(pool: Pool, budget: int, context_weight: float, every: int, window: int = 1,
                   threads_by: str = "fused", lexical_rows: int = 50) -> list[str]:
    """Thread-coverage selection: rows by context score (see `context_scores`), except that every
    `every`-th slot goes to the best row of a thread not represented yet (while one remains).
    Which thread: the one of the best remaining row ("fused"), or the first uncovered thread by
    `thread_priority` ("lexical"). Greedy slot by slot, so the answer for a smaller budget is a
    prefix of the larger one."""
    n = len(pool.ids)
    scores = context_scores(pool, context_weight, window)
    by_score = np.argsort(-scores, kind="stable").tolist()  # stable: ties keep the fused order
    threads = thread_keys(pool)
    best_row: dict = {}
    for i in by_score:  # each thread's rows, best first; threads in the order of their best row
        best_row.setdefault(threads[i], []).append(i)
    if threads_by == "lexical":
        votes = thread_priority(pool, lexical_rows)
        ranked_threads = sorted(best_row, key=lambda t: -votes[t])  # stable: ties by best row
    elif threads_by == "fused":
        ranked_threads = list(best_row)
    else:
        raise ValueError(f"coverage_threads: expected fused or lexical, got {threads_by!r}")
    taken = [False] * n
    covered: set = set()
    chosen: list[int] = []
    cursor = 0  # by_score[:cursor] are all taken
    for slot in range(min(budget, n)):
        pick = None
        if every > 0 and slot % every == every - 1:
            thread = next((t for t in ranked_threads if t not in covered), None)
            if thread is not None:
                pick = next(i for i in best_row[thread] if not taken[i])  # uncovered: none taken
        if pick is None:
            while taken[by_score[cursor]]:
                cursor += 1
            pick = by_score[cursor]
        taken[pick] = True
        covered.add(threads[pick])
        chosen.append(pick)
    return _with_rest(pool, chosen)


def thread_keys(pool: Pool) -> list:
    """Each row's thread; an unthreaded row is a thread of its own."""
    return [t if t is not None else ("row", i) for i, t in enumerate(pool.threads)]


def select(pool: Pool, query: np.ndarray, vectors_for: VectorsFor, config) -> tuple[list[str], str]:
    """The order `config.selector` gives the pool, and the reason recorded on its lead rows.
    `config` is a RetrievalConfig; the lead budget is k minus the recency reserve."""
    budget = max(config.k - config.reserve, 0)
    if len(pool.ids) <= 1 or config.selector == "rrf":
        return fused_order(pool), "fused"
    if config.selector == "pursuit":
        order = pursuit_order(pool, query, vectors_for, budget, config.pursuit_pool, config.pursuit_ridge,
                              config.pursuit_tol, config.pursuit_bonus)
        return order, "pursuit"
    if config.selector == "coverage":
        order = coverage_order(pool, budget, config.context_weight, config.coverage_every, config.context_window,
                               config.coverage_threads, config.coverage_lexical_rows)
        return order, "coverage"
    raise ValueError(f"selector: unknown selector {config.selector!r}")

"""A lead, not a selector: learned row and session probabilities, and a greedy that trades them.

    .venv/bin/python -m bench.learned_selection [--gains 0.5 1 1.3 1.6 2 3]

Two logistic models are fitted on LoCoMo's tuning half (conversations 0-4) from the harness's
cached candidates (`orgmem bench retrieval --dataset locomo` builds them):

- p_row: is this pooled row a gold turn? Nine features of its leg ranks and scores, its best
  thread neighbour, and its thread's rank by `thread_priority`'s two votes.
- p_session: is this session (thread) a gold session? Ten features: its rank by best fused row
  and by summed BM25, the summed BM25 and best fused score over the query's best, its best and
  top-3 cosine under the query's best, its rows among the 50 best lexical and vector hits, and
  whether it has more than one pooled row.

Then each slot takes the row with the highest p_row + b x P0 x p_s / (1 - p_s) when its session
is not covered yet (p_row alone otherwise), where P0 is the product of (1 - p_s) over the
uncovered sessions: under independent sessions, that is how much covering s raises the chance
that every gold session is covered. b trades turn recall against complete coverage. Figures are
printed for the tuning half, the held-out half and the other datasets, next to the best RRF of
the harness's grid (per metric, picked on the very questions it is scored on).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from bench.retrieval.datasets import load
from bench.retrieval.harness import GroupIndex, evaluate, question_pool
from bench.retrieval.metrics import Scores, score_question
from bench.retrieval.runner import split_groups
from bench.retrieval.store import cached_candidates
from bench.retrieval.variants import VARIANTS
from services.core import selection

WORK = Path(__file__).resolve().parent / "out" / "eval"
CONFIG = VARIANTS["coverage-sessions"].config  # RRF 1:1, γ 5, C 200: the pool both models see
RRF = [name for name in VARIANTS if name.startswith("rrf")]


def features(q, pool):
    """(row features, session keys, session features) of one question's pool."""
    lex_hits, vec_hits = q.legs.get("lex", [])[: CONFIG.candidates], q.legs.get("vec", [])[: CONFIG.candidates]
    lex_rank = {rid: i for i, (rid, _) in enumerate(lex_hits)}
    vec_rank = {rid: i for i, (rid, _) in enumerate(vec_hits)}
    lex_score, cos = dict(lex_hits), dict(vec_hits)
    lex_max = max(lex_score.values(), default=1.0) or 1.0
    cos_max = max(cos.values(), default=1.0)
    threads = selection.thread_keys(pool)
    votes = selection.thread_priority(pool, CONFIG.coverage_lexical_rows)
    vote_rank = {t: i for i, t in enumerate(sorted(dict.fromkeys(threads), key=lambda t: -votes[t]))}
    fused_max = max(pool.scores)
    neighbour = selection.context_scores(pool, 1.0) - pool.scores
    rows = np.array([[1.0, 1 / (5 + lex_rank[r]) if r in lex_rank else 0.0, 1 / (5 + vec_rank[r]) if r in vec_rank else 0.0,
                      lex_score.get(r, 0.0) / lex_max, cos[r] - cos_max if r in cos else -0.5, float(r in cos),
                      neighbour[i] / fused_max, 1 / (3 + vote_rank[threads[i]]), pool.scores[i] / fused_max]
                     for i, r in enumerate(pool.ids)])

    sizes = Counter(threads)
    lexical = np.asarray(pool.lexical, dtype=np.float64)
    mass, lex_rows, vec_rows, best_fused, cosines = Counter(), Counter(), Counter(), {}, {}
    for i in np.argsort(-lexical, kind="stable")[:50]:
        if lexical[i] > 0:
            mass[threads[i]] += lexical[i]
            lex_rows[threads[i]] += 1
    top_vec = {rid for rid, _ in vec_hits[:50]}
    for i, (rid, t) in enumerate(zip(pool.ids, threads, strict=True)):
        best_fused.setdefault(t, pool.scores[i])  # the pool is in fused order
        if rid in cos:
            cosines.setdefault(t, []).append(cos[rid])
        vec_rows[t] += rid in top_vec
    sessions = list(best_fused)
    mass_rank = {t: i for i, t in enumerate(sorted(mass, key=lambda t: -mass[t]))}
    mass_max = max(mass.values(), default=1.0) or 1.0
    session_rows = []
    for rank, t in enumerate(sessions):
        c = sorted(cosines.get(t, []), reverse=True)
        session_rows.append([1.0, 1 / (3 + rank), 1 / (3 + mass_rank[t]) if t in mass_rank else 0.0, mass[t] / mass_max,
                             best_fused[t] / fused_max, c[0] - cos_max if c else -0.5,
                             float(np.mean(c[:3])) - cos_max if c else -0.5, lex_rows[t] / 10, vec_rows[t] / 10,
                             float(sizes[t] > 1)])
    return rows, sessions, np.array(session_rows)


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-2, steps: int = 50) -> np.ndarray:
    """Weights of an L2-regularised logistic regression, by Newton steps."""
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-x @ w))
        hessian = (x * (p * (1 - p))[:, None]).T @ x + l2 * np.eye(len(w))
        w -= np.linalg.solve(hessian, x.T @ (p - y) + l2 * w)
    return w


def expected_coverage_order(pool, p_row, sessions, p_session, multi_row, gain: float, budget: int) -> list[str]:
    """Greedy: p_row + gain x P0 x odds(session) for rows of uncovered sessions (see the module)."""
    threads = selection.thread_keys(pool)
    p = dict(zip(sessions, np.clip(p_session, 0.0, 0.999), strict=True))
    # A one-row thread has no session to cover.
    counted = {t for t, many in zip(sessions, multi_row, strict=True) if many}
    log_p0 = sum(np.log1p(-p[t]) for t in counted)
    odds = np.array([p[t] / (1 - p[t]) if t in counted else 0.0 for t in threads])
    uncovered = np.ones(len(threads), dtype=bool)
    taken = np.zeros(len(threads), dtype=bool)
    chosen: list[int] = []
    for _ in range(min(budget, len(threads))):
        value = p_row + gain * np.exp(log_p0) * odds * uncovered
        value[taken] = -np.inf
        i = int(np.argmax(value))
        taken[i] = True
        chosen.append(i)
        if uncovered[i]:
            uncovered[[j for j, t in enumerate(threads) if t == threads[i]]] = False
            if threads[i] in counted:
                log_p0 -= np.log1p(-p[threads[i]])
    return [pool.ids[i] for i in chosen]


class Prepared:
    """One dataset's questions with their pools and features, computed once."""

    def __init__(self, dataset: str):
        folder = WORK / dataset
        self.candidates = cached_candidates(load(dataset, work_dir=folder), folder, CONFIG.candidates)
        indexes = {key: GroupIndex(rows) for key, rows in self.candidates.groups.items()}
        self.items = []
        for q in self.candidates.questions:
            index = indexes[q.group]
            pool = question_pool(q, index, CONFIG)
            gold_threads = {index.rows.threads[index.at[g]] for g in q.gold if g in index.at}
            self.items.append((q, pool, *features(q, pool), gold_threads))

    def training_set(self, groups):
        x, y, s, z = [], [], [], []
        for q, pool, rows, sessions, session_rows, gold_threads in self.items:
            if q.group in groups:
                gold = set(q.gold)
                x.append(rows)
                y.append([r in gold for r in pool.ids])
                s.append(session_rows)
                z.append([t in gold_threads for t in sessions])
        return np.vstack(x), np.concatenate(y).astype(float), np.vstack(s), np.concatenate(z).astype(float)

    def score(self, w_row, w_session, gain, ks, groups) -> Scores:
        threads = {key: dict(zip(rows.ids, rows.threads, strict=True)) for key, rows in self.candidates.groups.items()}
        scores = Scores()
        for q, pool, rows, sessions, session_rows, _ in self.items:
            if groups is None or q.group in groups:
                p_row = 1 / (1 + np.exp(-rows @ w_row))
                p_session = 1 / (1 + np.exp(-session_rows @ w_session))
                multi_row = session_rows[:, -1] > 0  # the last session feature
                order = expected_coverage_order(pool, p_row, sessions, p_session, multi_row, gain, max(ks))
                scores.add(q.category, score_question(order, q.gold, ks, threads[q.group]))
        return scores


def cells(scores: Scores, coverage: bool, ks) -> dict[str, float]:
    """recall@k (and, on LoCoMo, coverage@k overall and for multi-hop, category 1)."""
    out = {f"recall@{k}": scores.mean("all", f"recall@{k}") for k in ks}
    if coverage:
        multi_hop = next(c for c in scores.categories() if c.startswith("1"))
        out.update({f"coverage@{k}": scores.mean("all", f"coverage@{k}") for k in ks})
        out.update({f"multi-hop coverage@{k}": scores.mean(multi_hop, f"coverage@{k}") for k in ks})
    return out


def best_rrf(prepared: Prepared, coverage: bool, ks, groups) -> dict[str, float]:
    """Per figure, the best RRF setting of the harness's grid on these very questions."""
    runs = [cells(evaluate(prepared.candidates, VARIANTS[n].config, ks, groups), coverage, ks) for n in RRF]
    return {m: max(r[m] for r in runs) for m in runs[0]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gains", type=float, nargs="+", default=[0.5, 1.0, 1.3, 1.6, 2.0, 3.0])
    parser.add_argument("--datasets", nargs="+", default=["locomo", "beam", "enron", "qmsum"])
    args = parser.parse_args(argv)
    locomo = Prepared("locomo")
    tune, held = split_groups(locomo.candidates, "tune"), split_groups(locomo.candidates, "held-out")
    x, y, s, z = locomo.training_set(tune)
    w_row, w_session = fit_logistic(x, y), fit_logistic(s, z)
    print("row weights", np.round(w_row, 2), "\nsession weights", np.round(w_session, 2))
    sets = [("locomo-tune", locomo, tune, True), ("locomo-held-out", locomo, held, True)]
    sets += [(d, Prepared(d), None, False) for d in args.datasets if d != "locomo"]
    ks = (10, 20)
    bars = {name: best_rrf(prepared, coverage, ks, groups) for name, prepared, groups, coverage in sets}
    print("each figure: value (value - the best RRF's)")
    for gain in args.gains:
        for name, prepared, groups, coverage in sets:
            figures = cells(prepared.score(w_row, w_session, gain, ks, groups), coverage, ks)
            print(f"b {gain:g} {name:16s}", " ".join(f"{m} {v:.3f} ({v - bars[name][m]:+.3f})" for m, v in figures.items()),
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

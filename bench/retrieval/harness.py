"""Replay the read path offline over cached candidates and score it per category.

`replay_question` does what `Retriever.retrieve` does after the legs have answered — weighted RRF,
the configured selector (`services.core.selection.select`, the very function the retriever
calls), then the recency reserve — so a variant costs milliseconds per question instead of a
query through the indexes. The integration test checks that replay and `Memory.query` agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bench.retrieval.metrics import Scores, score_question
from bench.retrieval.store import Candidates, GroupRows, QuestionCandidates
from services.core.fusion import weighted_rrf
from services.core.reserve import with_recency_reserve
from services.core.retrieval_config import RetrievalConfig
from services.core.selection import Pool, select

# The plain reference pipeline of ../shared/data/README.md: no tag leg, no recency reserve,
# disjunctive BM25, C = 200, γ = 60; w_lex = 1, w_vec = 2 unless a variant says otherwise.
REFERENCE = RetrievalConfig(
    weights={"lex": 1.0, "tag": 0.0, "vec": 2.0}, candidates=200, k=20, gamma=60.0, reserve=0,
    conjunctive=False, selector="rrf",
)


@dataclass(frozen=True)
class Variant:
    name: str
    config: RetrievalConfig


class _GroupIndex:
    """Lookups into one group's rows: position, thread, recency and vectors by row id."""

    def __init__(self, rows: GroupRows):
        self.rows = rows
        self.at = {rid: i for i, rid in enumerate(rows.ids)}

    def vectors_for(self, ids: Sequence[str]) -> np.ndarray:
        return self.rows.vectors[[self.at[r] for r in ids]]


def question_pool(q: QuestionCandidates, index: _GroupIndex, config: RetrievalConfig) -> Pool:
    """The fused pool the read path would hand its selector for `q` under `config`."""
    legs = {leg: [rid for rid, _ in hits[: config.candidates] if rid in index.at] for leg, hits in q.legs.items()}
    rows = index.rows
    fused = weighted_rrf(legs, config.weights, config.gamma, {rid: rows.recency[index.at[rid]][1] for ids in legs.values() for rid in ids})
    return Pool.from_fused(fused, lambda rid: rows.threads[index.at[rid]], lambda rid: rows.recency[index.at[rid]][1],
                           dict(q.legs.get("lex", [])[: config.candidates]))


def replay_question(q: QuestionCandidates, index: _GroupIndex, config: RetrievalConfig, k: int) -> list[str]:
    """The first k rows the read path would return for `q` under `config` (reserve included)."""
    pool = question_pool(q, index, config)
    rows = index.rows
    run = config.with_overrides(k=k)
    ordered, reason = select(pool, q.query, index.vectors_for, run)
    if run.reserve <= 0:
        return ordered[:k]
    matched = set(pool.ids)
    unmatched = [rid for rid in reversed(rows.ids) if rid not in matched][: run.reserve]
    recency = {rid: rows.recency[index.at[rid]] for rid in (*pool.ids, *unmatched)}
    picks = with_recency_reserve(ordered, pool.ids, k, run.reserve, recency, unmatched, reason)
    return [p.row_id for p in picks]


def evaluate(candidates: Candidates, config: RetrievalConfig, ks: Sequence[int] = (10, 20),
             groups: set[str] | None = None) -> Scores:
    """Per-category recall@k and complete coverage@k of `config` over the cached questions
    (optionally only those of `groups`)."""
    indexes = {key: _GroupIndex(rows) for key, rows in candidates.groups.items()}
    threads: dict[str, Mapping[str, str | None]] = {
        key: dict(zip(rows.ids, rows.threads)) for key, rows in candidates.groups.items()
    }
    scores = Scores()
    top = max(ks)
    for q in candidates.questions:
        if groups is not None and q.group not in groups:
            continue
        if config.reserve <= 0:
            # Without a reserve every selector's answer for a smaller k is a prefix of the larger one.
            selected = replay_question(q, indexes[q.group], config, top)
            values = score_question(selected, q.gold, ks, threads[q.group])
        else:
            values = {}
            for k in ks:
                values.update(score_question(replay_question(q, indexes[q.group], config, k), q.gold, [k], threads[q.group]))
        scores.add(q.category, values)
    return scores


def evaluate_variants(candidates: Candidates, variants: Sequence[Variant], ks: Sequence[int] = (10, 20),
                      groups: set[str] | None = None) -> dict[str, Scores]:
    return {v.name: evaluate(candidates, v.config, ks, groups) for v in variants}

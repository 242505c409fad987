"""Replay the read path offline over cached candidates and score it per category.

`replay_question` ranks a question's cached legs with `services.core.ranking.rank`, the very
function `Retriever.retrieve` calls after its legs have answered, so a variant costs milliseconds
per question instead of a query through the indexes. The integration test checks that replay and
`Memory.query` agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from bench.retrieval.lexical_legs import legs_for
from bench.retrieval.metrics import Scores, score_question
from bench.retrieval.store import Candidates, GroupRows, QuestionCandidates
from services.core.ranking import (
    PEOPLE_LEG,
    RowFields,
    fuse,
    order_versions,
    pool_of,
    rank,
    version_rows,
    with_people_leg,
)
from services.core.retrieval_config import RetrievalConfig
from services.core.selection import Pool

# The plain reference pipeline of ../shared/data/README.md: no tag leg, no recency reserve,
# disjunctive BM25, C = 200, γ = 60; w_lex = 1, w_vec = 2 unless a variant says otherwise.
REFERENCE = RetrievalConfig(
    weights={"lex": 1.0, "tag": 0.0, "vec": 2.0}, candidates=200, k=20, gamma=60.0, reserve=0,
    lexical_match="any", selector="rrf",
)


@dataclass(frozen=True)
class Variant:
    name: str
    config: RetrievalConfig


class GroupIndex:
    """Lookups into one group's rows: position, ranking fields and vectors by row id."""

    def __init__(self, rows: GroupRows):
        self.rows = rows
        self.at = {rid: i for i, rid in enumerate(rows.ids)}
        self.fields = {rid: RowFields(thread, recency[1], recency)
                       for rid, thread, recency in zip(rows.ids, rows.threads, rows.recency, strict=True)}
        self.kinds = dict(zip(rows.ids, rows.kinds or [None] * len(rows.ids), strict=True))

    def vectors_for(self, ids: Sequence[str]) -> np.ndarray:
        return self.rows.vectors[[self.at[r] for r in ids]]


def question_pool(q: QuestionCandidates, index: GroupIndex, config: RetrievalConfig) -> Pool:
    """The fused pool the read path would hand its selector for `q` under `config`."""
    config = with_people_leg(config, bool(q.legs.get(PEOPLE_LEG)))
    return pool_of(fuse(legs_for(q, config), index.fields, config), index.fields)


def replay_question(q: QuestionCandidates, index: GroupIndex, config: RetrievalConfig, k: int) -> list[str]:
    """The first k rows the read path would return for `q` under `config` (reserve and version
    order included)."""
    # A dated question's reserve may only fall back on rows of its scope, as the row store's is.
    scope = index.rows.ids if q.scope_ids is None else [r for r in q.scope_ids if r in index.at]
    # A question whose people rule named someone (candidates fetched with --rules): their leg
    # takes part, as the read path adds it.
    run = with_people_leg(config.with_overrides(k=k), bool(q.legs.get(PEOPLE_LEG)))
    ranking = rank(legs_for(q, config), index.fields, q.query, index.vectors_for, run, reversed(scope))
    picks = ranking.picks
    if wanted := version_rows(picks, run, ranking.following):
        asked_for = {rid for rid, _ in q.legs.get(PEOPLE_LEG, ())}  # as the read path: the named persons' rows
        picks = order_versions(picks, index.fields, index.vectors_for(wanted), index.kinds, run, ranking.following,
                               asked_for)
    return [p.row_id for p in picks]


def evaluate(candidates: Candidates, config: RetrievalConfig, ks: Sequence[int] = (10, 20),
             groups: set[str] | None = None, questions: set[str] | None = None) -> Scores:
    """Per-category metrics@k (`score_question`) of `config` over the cached questions, optionally
    only those of `groups` and only those whose id is in `questions`."""
    indexes = {key: GroupIndex(rows) for key, rows in candidates.groups.items()}
    threads: dict[str, Mapping[str, str | None]] = {
        key: dict(zip(rows.ids, rows.threads, strict=True)) for key, rows in candidates.groups.items()
    }
    scores = Scores()
    top = max(ks)
    for q in candidates.questions:
        if (groups is not None and q.group not in groups) or (questions is not None and q.qid not in questions):
            continue
        versions = {"version": q.version, "superseded": q.superseded}
        if config.reserve <= 0 and config.version_similarity <= 0:
            # Without a reserve or the version order (both reorder within k), every selector's
            # answer for a smaller k is a prefix of the larger one.
            selected = replay_question(q, indexes[q.group], config, top)
            values = score_question(selected, q.gold, ks, threads[q.group], **versions)
        else:
            values = {}
            for k in ks:
                values.update(score_question(replay_question(q, indexes[q.group], config, k), q.gold, [k],
                                             threads[q.group], **versions))
        scores.add(q.category, values)
    return scores


def evaluate_variants(candidates: Candidates, variants: Sequence[Variant], ks: Sequence[int] = (10, 20),
                      groups: set[str] | None = None, questions: set[str] | None = None) -> dict[str, Scores]:
    return {v.name: evaluate(candidates, v.config, ks, groups, questions) for v in variants}

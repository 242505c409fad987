"""Weighted reciprocal rank fusion (Mem++ Eq. 5): score(r) = Σ_l w_l / (γ + rank_l(r)), rank from 0."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Fused:
    row_id: str
    score: float
    ranks: dict[str, int] = field(default_factory=dict)


def weighted_rrf(
    legs: Mapping[str, Sequence[str]],
    weights: Mapping[str, float],
    gamma: float,
    ingest_order: Mapping[str, int],
) -> list[Fused]:
    """Fuse ranked lists of row ids. A row absent from a leg gets nothing from it.

    Ties go to the most recently ingested row (higher ingest position first), so the order is
    total and a replay of the log gives the same order.
    """
    scores: dict[str, float] = {}
    ranks: dict[str, dict[str, int]] = {}
    for leg, row_ids in legs.items():
        weight = weights.get(leg, 0.0)
        for rank, row_id in enumerate(row_ids):
            if row_id in ranks and leg in ranks[row_id]:
                continue  # a leg lists a row once; keep its best rank
            ranks.setdefault(row_id, {})[leg] = rank
            scores[row_id] = scores.get(row_id, 0.0) + weight / (gamma + rank)
    order = sorted(scores, key=lambda rid: (-scores[rid], -ingest_order.get(rid, -1), rid))
    return [Fused(rid, scores[rid], ranks[rid]) for rid in order]

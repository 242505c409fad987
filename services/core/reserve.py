"""Selection of the k evidence rows with the recency reserve (Mem++ Algorithm 1, lines 25-27)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

RecencyKey = tuple[datetime, int]  # (event time, or ingest time where undated; ingest position)


@dataclass(frozen=True)
class Pick:
    row_id: str
    reason: str  # "fused" | "pursuit" | "coverage" | "reserve" | "reserve_fill" | "newer_version" | "named" (services.core.ranking)


def with_recency_reserve(
    ordered: Sequence[str],
    matched: Sequence[str],
    k: int,
    reserve: int,
    recency: Mapping[str, RecencyKey],
    unmatched_recent: Sequence[str],
    lead_reason: str = "fused",
) -> list[Pick]:
    """The first k - R rows of `ordered`, then the R latest-dated remaining matched rows, then,
    if fewer than R remained, the most recently ingested unmatched rows.

    `ordered` is the selector's order over the matched rows; `unmatched_recent` lists rows of the
    scope that no leg matched, most recently ingested first.
    """
    if k <= 0:
        return []
    slots = min(reserve, k)
    lead = [Pick(rid, lead_reason) for rid in ordered[: k - slots]]
    if slots == 0:
        return lead
    taken = {p.row_id for p in lead}
    remaining = [rid for rid in dict.fromkeys(matched) if rid not in taken]
    remaining.sort(key=lambda rid: recency[rid], reverse=True)
    tail = [Pick(rid, "reserve") for rid in remaining[:slots]]
    taken.update(p.row_id for p in tail)
    for rid in unmatched_recent:
        if len(tail) >= slots:
            break
        if rid not in taken:
            tail.append(Pick(rid, "reserve_fill"))
            taken.add(rid)
    return lead + tail

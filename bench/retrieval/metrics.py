"""Retrieval metrics with no language model: gold-row recall and complete gold-thread coverage."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

ALL = "all"


def recall_at(selected: Sequence[str], gold: Sequence[str], k: int) -> float:
    """Share of the gold rows among the first k selected rows."""
    if not gold:
        raise ValueError("gold: a question without gold rows has no recall")
    if k < 0:
        raise ValueError(f"k: expected ≥ 0, got {k}")
    top = set(selected[:k])
    return sum(1 for g in set(gold) if g in top) / len(set(gold))


def complete_coverage_at(selected: Sequence[str], gold: Sequence[str], k: int, thread_of: Mapping[str, str | None]) -> float:
    """1.0 when every thread (session) holding a gold row has at least one of the first k selected
    rows, else 0.0. Rows without a thread count as their own thread."""
    if not gold:
        raise ValueError("gold: a question without gold rows has no coverage")
    def key(rid: str) -> str:
        t = thread_of.get(rid)
        return t if t is not None else f"row:{rid}"
    wanted = {key(g) for g in gold}
    reached = {key(r) for r in selected[:k]}
    return 1.0 if wanted <= reached else 0.0


@dataclass
class Scores:
    """Per-category means of one metric family over questions; `ALL` is the mean over questions."""

    sums: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, category: str, values: Mapping[str, float]) -> None:
        for cat in (category, ALL):
            self.counts[cat] += 1
            for name, v in values.items():
                self.sums[cat][name] += v

    def mean(self, category: str, name: str) -> float:
        n = self.counts.get(category, 0)
        return self.sums[category][name] / n if n else float("nan")

    def categories(self) -> list[str]:
        return sorted(c for c in self.counts if c != ALL) + [ALL]


def score_question(selected: Sequence[str], gold: Sequence[str], ks: Sequence[int], thread_of: Mapping[str, str | None]) -> dict[str, float]:
    out = {}
    for k in ks:
        out[f"recall@{k}"] = recall_at(selected, gold, k)
        out[f"coverage@{k}"] = complete_coverage_at(selected, gold, k, thread_of)
    return out

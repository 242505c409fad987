"""Retrieval metrics with no language model: gold-row recall, complete gold-thread coverage, every
gold row found, and whether the version that holds is found above the versions it replaced."""

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


def complete_at(selected: Sequence[str], gold: Sequence[str], k: int) -> float:
    """1.0 when every gold row is among the first k selected rows, else 0.0."""
    if not gold:
        raise ValueError("gold: a question without gold rows cannot be complete")
    return 1.0 if set(gold) <= set(selected[:k]) else 0.0


def version_correct_at(selected: Sequence[str], version: str, superseded: Sequence[str], k: int) -> float:
    """1.0 when the version that holds is among the first k selected rows and no version it
    superseded ranks above it, else 0.0 (a superseded version below it, or absent, is fine)."""
    top = list(selected[:k])
    if version not in top:
        return 0.0
    above = set(top[: top.index(version)])
    return 0.0 if above & set(superseded) else 1.0


def first_gold_at(selected: Sequence[str], gold: Sequence[str], k: int) -> float:
    """1 / the rank of the first gold row among the first k selected rows, 0 when none is there
    (averaged: MRR@k). Recall and coverage at k ignore the order inside the k rows; this does not."""
    wanted = set(gold)
    return next((1.0 / rank for rank, rid in enumerate(selected[:k], start=1) if rid in wanted), 0.0)


@dataclass
class Scores:
    """Per-category means of metrics over questions; `ALL` is the mean over questions. A metric
    that only some questions have (version@k) is averaged over those."""

    sums: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    scored: dict[str, dict[str, int]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(int)))

    def add(self, category: str, values: Mapping[str, float]) -> None:
        for cat in dict.fromkeys((category, ALL)):  # a category named "all" is counted once
            self.counts[cat] += 1
            for name, v in values.items():
                self.sums[cat][name] += v
                self.scored[cat][name] += 1

    def count(self, category: str, name: str) -> int:
        """Questions of the category that have the metric."""
        return self.scored[category][name] if category in self.scored else 0

    def mean(self, category: str, name: str) -> float:
        n = self.count(category, name)
        return self.sums[category][name] / n if n else float("nan")

    def categories(self) -> list[str]:
        return sorted(c for c in self.counts if c != ALL) + [ALL]


def score_question(selected: Sequence[str], gold: Sequence[str], ks: Sequence[int], thread_of: Mapping[str, str | None],
                   version: str | None = None, superseded: Sequence[str] = ()) -> dict[str, float]:
    out = {}
    for k in ks:
        out[f"recall@{k}"] = recall_at(selected, gold, k)
        out[f"coverage@{k}"] = complete_coverage_at(selected, gold, k, thread_of)
        out[f"complete@{k}"] = complete_at(selected, gold, k)
        out[f"mrr@{k}"] = first_gold_at(selected, gold, k)
        if version is not None:
            out[f"version@{k}"] = version_correct_at(selected, version, superseded, k)
    return out

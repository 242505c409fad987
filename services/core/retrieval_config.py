"""Retrieval settings as data: a frozen config with named presets (Mem++ Table 6)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

Selector = Literal["rrf", "pursuit", "coverage"]


@dataclass(frozen=True)
class RetrievalConfig:
    weights: dict[str, float] = field(default_factory=lambda: {"lex": 1.0, "tag": 1.0, "vec": 4.0})
    candidates: int = 50  # C: rows per leg
    k: int = 50
    gamma: float = 60.0
    reserve: int = 3
    conjunctive: bool = True
    selector: Selector = "rrf"
    pursuit_pool: int = 50
    pursuit_ridge: float = 0.0
    pursuit_tol: float = 0.0
    pursuit_bonus: float = 0.0  # β: weight of the [0, 1]-scaled fused score added to each pick score
    # selector "coverage" (services.core.selection.coverage_order; tuned on LoCoMo, docs/retrieval.md):
    context_weight: float = 0.25  # share of the best thread neighbour's fused score a row inherits
    context_window: int = 1  # neighbours: same thread, at most this many ingest positions away
    coverage_every: int = 2  # every n-th slot goes to the best row of a not yet covered thread
    # which uncovered thread: that of the best remaining row ("fused"), or the thread ranked by
    # its best row and its summed BM25 over the best `coverage_lexical_rows` lexical hits ("lexical")
    coverage_threads: Literal["fused", "lexical"] = "fused"
    coverage_lexical_rows: int = 50

    def with_overrides(self, **changes) -> RetrievalConfig:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


PRESETS: dict[str, RetrievalConfig] = {
    # Mem++ Table 6, OrgMemBench column: the default for organizational records.
    "paper-orgmembench": RetrievalConfig(),
    # Mem++ Table 6, LoCoMo column (disjunctive, C = 200, vector weight 2).
    "conversational": RetrievalConfig(
        weights={"lex": 1.0, "tag": 1.0, "vec": 2.0}, candidates=200, conjunctive=False
    ),
    # Thread-coverage selection as measured on LoCoMo held out (docs/retrieval.md): no tag leg,
    # lex:vec 1:1, γ = 5, disjunctive, C = 200, no recency reserve; uncovered sessions ordered by
    # their best row and their summed BM25 (harness variant "coverage-sessions").
    "conversational-coverage": RetrievalConfig(
        weights={"lex": 1.0, "tag": 0.0, "vec": 1.0}, candidates=200, gamma=5.0, reserve=0, conjunctive=False,
        selector="coverage", context_weight=0.25, context_window=1, coverage_every=2,
        coverage_threads="lexical", coverage_lexical_rows=50,
    ),
}

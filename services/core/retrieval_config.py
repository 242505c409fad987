"""Retrieval settings as data: a frozen config with named presets (Mem++ Table 6)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

Selector = Literal["rrf", "pursuit"]


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

    def with_overrides(self, **changes) -> "RetrievalConfig":
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


PRESETS: dict[str, RetrievalConfig] = {
    # Mem++ Table 6, OrgMemBench column: the default for organizational records.
    "paper-orgmembench": RetrievalConfig(),
    # Mem++ Table 6, LoCoMo column (disjunctive, C = 200, vector weight 2).
    "conversational": RetrievalConfig(
        weights={"lex": 1.0, "tag": 1.0, "vec": 2.0}, candidates=200, conjunctive=False
    ),
}

"""Named read-path variants the harness compares (each a RetrievalConfig)."""

from __future__ import annotations

from bench.retrieval.harness import REFERENCE, Variant


def _v(name: str, **changes) -> tuple[str, Variant]:
    weights = changes.pop("weights", None)
    config = REFERENCE.with_overrides(**changes)
    if weights is not None:
        config = config.with_overrides(weights={"lex": 0.0, "tag": 0.0, "vec": 0.0, **weights})
    return name, Variant(name, config)


# The rows of ../shared/data/README.md's reference table, in its order (tag weight 0, reserve 0).
REFERENCE_SET = dict([
    _v("vector", weights={"vec": 1.0}),
    _v("bm25", weights={"lex": 1.0}),
    _v("rrf-1-2", weights={"lex": 1.0, "vec": 2.0}),
    _v("rrf-1-1", weights={"lex": 1.0, "vec": 1.0}),
    _v("rrf-2-1", weights={"lex": 2.0, "vec": 1.0}),
    _v("pursuit-30", weights={"lex": 1.0, "vec": 2.0}, selector="pursuit", pursuit_pool=30),
    _v("pursuit-120", weights={"lex": 1.0, "vec": 2.0}, selector="pursuit", pursuit_pool=120),
    _v("pursuit-bonus", weights={"lex": 1.0, "vec": 1.0}, selector="pursuit",
       pursuit_pool=50, pursuit_bonus=2.0),
])

# RRF with other weights and γ: the bar is the best RRF found, not only the reference rows.
RRF_GRID = dict(
    _v(f"rrf-{lex:g}-{vec:g}-g{gamma:g}", weights={"lex": float(lex), "vec": float(vec)}, gamma=float(gamma))
    for lex, vec in ((1, 1), (2, 1), (3, 1)) for gamma in (3, 5, 10, 30)
)

# Thread-coverage selection (selector "coverage") and its two halves as ablations.
_COVERAGE = {"weights": {"lex": 1.0, "vec": 1.0}, "gamma": 5.0, "selector": "coverage"}
COVERAGE_SET = dict([
    _v("coverage", **_COVERAGE, context_weight=0.25, coverage_every=2),
    _v("coverage-context-only", **_COVERAGE, context_weight=0.25, coverage_every=0),
    _v("coverage-interleave-only", **_COVERAGE, context_weight=0.0, coverage_every=2),
    # Uncovered threads ordered by their best fused row and their summed BM25 (thread_priority).
    _v("coverage-sessions", **_COVERAGE, context_weight=0.25, coverage_every=2, coverage_threads="lexical"),
    _v("coverage-sessions-every-3", **_COVERAGE, context_weight=0.25, coverage_every=3, coverage_threads="lexical"),
])

VARIANTS: dict[str, Variant] = {**REFERENCE_SET, **RRF_GRID, **COVERAGE_SET}
DEFAULT_SET = [*REFERENCE_SET, "rrf-1-1-g5", "rrf-2-1-g10", *COVERAGE_SET]

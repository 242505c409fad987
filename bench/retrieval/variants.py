"""Named read-path variants the harness compares (each a RetrievalConfig)."""

from __future__ import annotations

from dataclasses import replace

from bench.retrieval.harness import REFERENCE, Variant
from services.core.retrieval_config import PRESETS


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

# Term-match rules of the lexical leg (services.core.term_match): the cached candidates' leg is
# disjunctive ("any"); the other rules' legs are fetched once per rule (bench.retrieval.lexical_legs).
_SESSIONS = {**_COVERAGE, "context_weight": 0.25, "coverage_every": 2, "coverage_threads": "lexical"}
TERM_MATCH_SET = dict([
    _v("bm25-all", weights={"lex": 1.0}, lexical_match="all"),
    _v("bm25-adaptive", weights={"lex": 1.0}, lexical_match="adaptive"),
    _v("rrf-1-1-g5-adaptive", weights={"lex": 1.0, "vec": 1.0}, gamma=5.0, lexical_match="adaptive"),
    _v("coverage-sessions-all", **_SESSIONS, lexical_match="all"),
    _v("coverage-sessions-adaptive", **_SESSIONS, lexical_match="adaptive"),
])
# The adaptive rule's shape: all terms up to a (1-2 content terms), then a share falling by s per term to a floor f.
ADAPTIVE_GRID = dict(
    _v(f"coverage-sessions-adaptive-{a}-{s:g}-{f:g}", **_SESSIONS, lexical_match="adaptive", lexical_all_up_to=a,
       lexical_share_step=s, lexical_share_floor=f)
    for a, s, f in [*((a, s, f) for a in (2, 3) for s in (0.1, 0.15, 0.25) for f in (0.2, 0.3, 0.5)),
                    *((2, s, f) for s in (0.35, 0.5) for f in (0.1, 0.2, 0.3))]
)
# The server's presets as they are (tag leg, C, reserve and all), k set by the harness.
PRESET_SET = {f"preset-{name}": Variant(f"preset-{name}", config) for name, config in PRESETS.items()}

VARIANTS.update({**TERM_MATCH_SET, **ADAPTIVE_GRID, **PRESET_SET})
# The same rules under thread coverage that follows the fused order ("coverage") or interleaves every third slot.
_FUSED_COVERAGE = {**_COVERAGE, "context_weight": 0.25, "coverage_every": 2}
_RULES = {f"{a}-{s:g}-{f:g}": {"lexical_match": "adaptive", "lexical_all_up_to": a, "lexical_share_step": s,
                               "lexical_share_floor": f}
          for a, s, f in ((2, 0.15, 0.3), (2, 0.25, 0.3), (2, 0.1, 0.5), (3, 0.1, 0.5))}
COMBINED_GRID = dict([
    *(_v(f"coverage-adaptive-{key}", **_FUSED_COVERAGE, **rule) for key, rule in _RULES.items()),
    *(_v(f"coverage-sessions-every-3-adaptive-{key}", **{**_SESSIONS, "coverage_every": 3}, **rule)
      for key, rule in _RULES.items()),
])
VARIANTS.update(COMBINED_GRID)
# Around the chosen rule (2-0.25-0.3) under coverage-sessions: the tag leg, the recency reserve, more vector weight.
_CHOSEN = {**_SESSIONS, **_RULES["2-0.25-0.3"]}
AROUND_DEFAULT = dict([
    _v("coverage-sessions-adaptive-tag", **{**_CHOSEN, "weights": {"lex": 1.0, "tag": 1.0, "vec": 1.0}}),
    _v("coverage-sessions-adaptive-reserve-3", **_CHOSEN, reserve=3),
    _v("coverage-sessions-adaptive-vec-2", **{**_CHOSEN, "weights": {"lex": 1.0, "vec": 2.0}}),
    _v("coverage-sessions-adaptive-g10", **{**_CHOSEN, "gamma": 10.0}),
])
VARIANTS.update(AROUND_DEFAULT)
# The default with fewer rows per leg (query time grows with C).
AROUND_DEFAULT.update(dict(_v(f"coverage-sessions-adaptive-c{c}", **_CHOSEN, candidates=c) for c in (100, 150)))
VARIANTS.update(AROUND_DEFAULT)
AROUND_DEFAULT.update(dict(_v(f"coverage-sessions-adaptive-c100-g{g:g}", **{**_CHOSEN, "gamma": float(g)}, candidates=100)
                           for g in (3, 10)))
VARIANTS.update(AROUND_DEFAULT)
# The default preset with newer versions first at other similarities (0: off; services.core.version_order).
VERSION_ORDER = {
    f"default-versions-{s:g}": Variant(f"default-versions-{s:g}", replace(PRESETS["default"], version_similarity=s))
    for s in (0.0, 0.6, 0.65, 0.7, 0.75, 0.8)
}
VARIANTS.update(VERSION_ORDER)
# ... and over fewer of the first rows (each costs a vector read on the read path).
VERSION_ORDER.update({
    f"default-versions-rows-{n}": Variant(f"default-versions-rows-{n}", replace(PRESETS["default"], version_rows=n))
    for n in (5, 10, 20, 50)
})
VARIANTS.update(VERSION_ORDER)
# The default preset with other numbers of rows per leg (its C = 50 was chosen against 75 and 100).
AROUND_DEFAULT.update({
    f"default-c-{c}": Variant(f"default-c-{c}", replace(PRESETS["default"], candidates=c)) for c in (75, 100, 150, 200)
})
VARIANTS.update(AROUND_DEFAULT)
# ... and its reach: how many rows past the first ten, how close a restatement must be to come in.
VERSION_ORDER.update({
    f"default-reach-{r}-{s:g}": Variant(f"default-reach-{r}-{s:g}", replace(
        PRESETS["default"], version_reach=r, version_reach_similarity=s))
    for r in (0, 3, 5, 8, 10) for s in (0.65, 0.75, 0.8, 0.85, 0.9)
})
VARIANTS.update(VERSION_ORDER)
# The default preset with common terms (in more than this share of the rows) only scoring (1: every term counts).
AROUND_DEFAULT.update({
    f"default-common-{s:g}": Variant(f"default-common-{s:g}", replace(PRESETS["default"], lexical_common_share=s))
    for s in (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)
})
# The default preset with chat turns matching as every other row does, or by another rule.
AROUND_DEFAULT.update({
    f"default-turns-{m}": Variant(f"default-turns-{m}", replace(PRESETS["default"], lexical_turn_match=m))
    for m in ("adaptive", "any", "all")
})
# The default preset without the rows a question names by source id first (named_rows).
AROUND_DEFAULT["default-named-off"] = Variant("default-named-off", replace(PRESETS["default"], named_rows=False))
VARIANTS.update(AROUND_DEFAULT)

"""Retrieval settings as data: a frozen config with named presets (Mem++ Table 6)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from services.core.term_match import LexicalMatch, TermMatch
from services.errors import Invalid

Selector = Literal["rrf", "pursuit", "coverage"]


@dataclass(frozen=True)
class RetrievalConfig:
    weights: dict[str, float] = field(default_factory=lambda: {"lex": 1.0, "tag": 1.0, "vec": 4.0})
    candidates: int = 50  # C: rows per leg
    k: int = 50
    gamma: float = 60.0
    reserve: int = 3
    # How many of the question's content terms a lexical hit must contain (services.core.term_match):
    # "all" (conjunctive), "any" (disjunctive) or "adaptive" (all of a short question's, a falling
    # share of a long one's). `conjunctive` is accepted by with_overrides as an alias: True is "all".
    lexical_match: LexicalMatch = "all"
    lexical_all_up_to: int = 2
    lexical_share_step: float = 0.25
    lexical_share_floor: float = 0.3
    lexical_common_share: float = 1.0  # terms in more of the rows only score (1: every term counts)
    # How a chat turn matches, where not as every other row (None): one turn seldom holds a share
    # of a long question's terms, its session does. A request naming lexical_match alone names
    # the rule for every row (with_overrides).
    lexical_turn_match: LexicalMatch | None = None
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
    # Newer versions first (services.core.version_order): two returned rows whose embeddings are
    # at least this cosine apart restate one thing, and the later goes above the earlier; 0: off.
    version_similarity: float = 0.0
    version_rows: int = 10  # ... among the first this many returned rows (each costs a vector read)
    # ... and a row among the next `version_reach` of the selector's order (returned or not) that
    # restates one of those first rows at least this closely, later, moves up into them; 0: none.
    version_reach: int = 0
    version_reach_similarity: float = 0.85
    # Rows whose source id the query names exactly (a Message-ID, a ticket key; services.core.text.
    # named_source_ids) come first, before the selector's rows: a connector keeps such an id as the
    # row's source_id, not in its text, so no leg finds the row by it.
    named_rows: bool = False
    # The people rule's leg (a query with people_rules naming a known person): its RRF weight.
    people_weight: float = 1.0

    def __post_init__(self) -> None:
        self.term_match  # noqa: B018 - a bad lexical setting fails when the config is made, not at query time
        if not 0.0 <= self.version_similarity <= 1.0:
            raise Invalid(f"version_similarity: expected a cosine in [0, 1] (0: off), got {self.version_similarity}")
        if self.version_rows < 0:
            raise Invalid(f"version_rows: expected rows >= 0, got {self.version_rows}")
        if self.version_reach < 0:
            raise Invalid(f"version_reach: expected rows >= 0, got {self.version_reach}")
        if not 0.0 <= self.version_reach_similarity <= 1.0:
            raise Invalid(f"version_reach_similarity: expected a cosine in [0, 1], got {self.version_reach_similarity}")

    @property
    def term_match(self) -> TermMatch:
        return TermMatch(self.lexical_match, self.lexical_all_up_to, self.lexical_share_step, self.lexical_share_floor,
                         self.lexical_common_share, self.lexical_turn_match)

    def with_overrides(self, **changes) -> RetrievalConfig:
        conjunctive = changes.pop("conjunctive", None)
        if conjunctive is not None:
            alias = "all" if conjunctive else "any"
            if changes.get("lexical_match") not in (None, alias):
                raise Invalid(f"conjunctive: {conjunctive} contradicts lexical_match={changes['lexical_match']!r}")
            changes["lexical_match"] = alias
        changes = {k: v for k, v in changes.items() if v is not None}
        if changes.get("lexical_match") in ("all", "any") and "lexical_turn_match" not in changes:
            changes["lexical_turn_match"] = None  # either end of the rule, asked for, holds for every row
        return replace(self, **changes)


def weights_problem(weights: dict[str, float]) -> str | None:
    """Why these leg weights cannot rank anything, if they cannot: a leg of weight 0 does not run
    (`services.core.ranking.fuse`), so at least one needs a weight above 0."""
    if any(weight > 0 for weight in weights.values()):
        return None
    return "weights: every leg has weight 0; give at least one of lex, tag, vec a weight above 0"


# The field defaults above are the paper's settings (preset "paper-orgmembench"); the server reads
# with DEFAULT_PRESET unless told otherwise.
DEFAULT_PRESET = "default"

PRESETS: dict[str, RetrievalConfig] = {
    # The default read path, the best measured one (docs/retrieval.md, "The default read path"):
    # thread coverage as in "conversational-coverage", with the adaptive lexical match (all of 1-2
    # content terms, then a share falling by 25 points a term to a 30% floor; terms in more than
    # half of the rows only score; a chat turn needs one term), C = 50; newer versions first among
    # the first 10 rows at a cosine of 0.65, and a closer (0.85) newer version among the next 3 rows
    # moves up into them (both tuned on the synthetic organisation); rows the question names by
    # their source id first.
    DEFAULT_PRESET: RetrievalConfig(
        weights={"lex": 1.0, "tag": 0.0, "vec": 1.0}, candidates=50, gamma=5.0, reserve=0, lexical_match="adaptive",
        lexical_all_up_to=2, lexical_share_step=0.25, lexical_share_floor=0.3, lexical_common_share=0.5,
        lexical_turn_match="any", selector="coverage", context_weight=0.25, context_window=1, coverage_every=2,
        coverage_threads="lexical", coverage_lexical_rows=50, version_similarity=0.65,
        version_reach=3, version_reach_similarity=0.85, named_rows=True,
    ),
    # Mem++ Table 6, OrgMemBench column (the default before the measurements above).
    "paper-orgmembench": RetrievalConfig(),
    # Mem++ Table 6, LoCoMo column (disjunctive, C = 200, vector weight 2).
    "conversational": RetrievalConfig(
        weights={"lex": 1.0, "tag": 1.0, "vec": 2.0}, candidates=200, lexical_match="any"
    ),
    # Thread-coverage selection as measured on LoCoMo held out (docs/retrieval.md): no tag leg,
    # lex:vec 1:1, γ = 5, disjunctive, C = 200, no recency reserve; uncovered sessions ordered by
    # their best row and their summed BM25 (harness variant "coverage-sessions").
    "conversational-coverage": RetrievalConfig(
        weights={"lex": 1.0, "tag": 0.0, "vec": 1.0}, candidates=200, gamma=5.0, reserve=0, lexical_match="any",
        selector="coverage", context_weight=0.25, context_window=1, coverage_every=2,
        coverage_threads="lexical", coverage_lexical_rows=50,
    ),
}

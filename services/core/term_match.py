"""How many of a question's content terms a row must contain to be a lexical match.

"all" (conjunctive) and "any" (disjunctive) are the two ends. A long natural question almost
never has every content term in one row, so "all" finds nothing for it; one common term alone
matches rows that have nothing to do with the question, and those fill the lexical leg's tail.
"adaptive" asks every term of a short question and a share of a long one's, the share falling
with the question's length down to a floor. Both lexical adapters apply the rule to the number
of terms they can match (after analysis), so every profile matches the same rows.

A common term (in more than `common_share` of the index's rows) neither counts towards the
required number nor is required: it only adds its score to the rows the other terms match, as
Lucene's CommonTermsQuery does. It says little about which rows answer (its idf is low), and a
minimum-should-match query walks the union of its terms' postings, so one common term makes the
leg read most of the index (at 100k rows: 5.4 ms in place of 0.8 for a conjunctive query).

A chat turn (`schemas.documents.TURN_KINDS`) may match by its own rule (`turns`): one utterance
seldom holds a share of a long question's terms, while its session does, and the coverage
selector's session vote sums the BM25 of the session's matched turns. "any" for turns, chosen on
LoCoMo's tuning half, gained 1.2 / 1.5 points of session coverage at K = 10 / 20 held out
(docs/retrieval.md); a row of any other kind (a whole mail, ticket or document) is still held to
the question's share.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, get_args

from services.errors import Invalid

LexicalMatch = Literal["all", "any", "adaptive"]
LEXICAL_MATCHES: tuple[str, ...] = get_args(LexicalMatch)


@dataclass(frozen=True)
class TermMatch:
    """A minimum-should-match rule. With "adaptive": questions of at most `all_up_to` terms
    need all of them; past that, the share of terms needed falls by `share_step` per further
    term, never below `share_floor`, rounded up to whole terms. Terms in more than
    `common_share` of the rows only score (`counted_terms`); 1.0: every term counts. Chat turns
    match by `turns` where it is set (None: as every other row)."""

    mode: LexicalMatch = "adaptive"
    all_up_to: int = 2
    share_step: float = 0.25
    share_floor: float = 0.3
    common_share: float = 1.0
    turns: LexicalMatch | None = None

    def __post_init__(self) -> None:
        if self.mode not in LEXICAL_MATCHES:
            raise Invalid(f"lexical_match: expected one of {', '.join(LEXICAL_MATCHES)}, got {self.mode!r}")
        if self.turns is not None and self.turns not in LEXICAL_MATCHES:
            raise Invalid(f"lexical_turn_match: expected one of {', '.join(LEXICAL_MATCHES)} or null, "
                          f"got {self.turns!r}")
        if self.all_up_to < 1:
            raise Invalid(f"lexical_all_up_to: expected at least 1, got {self.all_up_to}")
        if not 0.0 <= self.share_step <= 1.0:
            raise Invalid(f"lexical_share_step: expected 0 to 1, got {self.share_step}")
        if not 0.0 < self.share_floor <= 1.0:
            raise Invalid(f"lexical_share_floor: expected more than 0 and at most 1, got {self.share_floor}")
        if not 0.0 < self.common_share <= 1.0:
            raise Invalid(f"lexical_common_share: expected more than 0 and at most 1 (1: every term counts), "
                          f"got {self.common_share}")

    def required(self, terms: int) -> int:
        return required_terms(terms, self)

    @property
    def turn_rule(self) -> TermMatch | None:
        """The rule chat turns match by, where it differs from every other row's; else None."""
        if self.turns is None or self.turns == self.mode:
            return None
        return replace(self, mode=self.turns, turns=None)

    def counted_terms(self, row_counts: Sequence[int], total_rows: int) -> list[bool]:
        return counted_terms(row_counts, total_rows, self)


ALL_TERMS = TermMatch("all")
ANY_TERM = TermMatch("any")


def required_terms(terms: int, rule: TermMatch) -> int:
    """How many of `terms` matchable terms a row must contain: between 1 and `terms` (0 when
    there is no term). The number a row may miss never shrinks as the question grows."""
    if terms <= 0:
        return 0
    if rule.mode == "any":
        return 1
    if rule.mode == "all" or terms <= rule.all_up_to:
        return terms
    share = max(rule.share_floor, 1.0 - rule.share_step * (terms - rule.all_up_to))
    # The epsilon keeps a whole product (0.3 × 10) from rounding up past itself in floating point.
    return max(1, min(terms, math.ceil(share * terms - 1e-9)))


def counted_terms(row_counts: Sequence[int], total_rows: int, rule: TermMatch) -> list[bool]:
    """Which terms count towards (and may be required by) the rule, given how many of
    `total_rows` rows contain each: those in at most `common_share` of them. When every term is
    common, every term counts (a question of common words still matches on them)."""
    counted = [count <= rule.common_share * total_rows for count in row_counts]
    return counted if any(counted) else [True] * len(counted)

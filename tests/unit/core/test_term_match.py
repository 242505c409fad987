"""The minimum-should-match rule of the lexical leg, and the presets that choose it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.core.retrieval_config import DEFAULT_PRESET, PRESETS, RetrievalConfig
from services.core.term_match import ALL_TERMS, ANY_TERM, TermMatch, required_terms
from services.errors import Invalid

ADAPTIVE = TermMatch("adaptive")


def test_the_two_ends():
    assert [ALL_TERMS.required(n) for n in range(5)] == [0, 1, 2, 3, 4]
    assert [ANY_TERM.required(n) for n in range(5)] == [0, 1, 1, 1, 1]


def test_adaptive_asks_all_of_a_short_question_and_a_falling_share_of_a_long_one():
    # 1-2 terms: all; 3: 75% of 3; 4: 50% of 4; from 5 on the 30% floor, rounded up.
    assert [ADAPTIVE.required(n) for n in range(1, 13)] == [1, 2, 3, 2, 2, 2, 3, 3, 3, 3, 4, 4]
    assert ADAPTIVE.required(20) == 6 and ADAPTIVE.required(40) == 12
    # A whole product stays whole: 30% of 10 is 3, not 4 by floating-point rounding.
    assert required_terms(10, TermMatch("adaptive", share_step=1.0, share_floor=0.3)) == 3
    assert required_terms(6, TermMatch("adaptive", all_up_to=3, share_step=0.25, share_floor=0.5)) == 3


@given(n=st.integers(0, 200), a=st.integers(1, 6), step=st.floats(0.0, 1.0), floor=st.floats(0.01, 1.0))
def test_adaptive_is_between_the_ends_and_allows_more_misses_as_questions_grow(n, a, step, floor):
    rule = TermMatch("adaptive", a, step, floor)
    need = rule.required(n)
    assert ANY_TERM.required(n) <= need <= ALL_TERMS.required(n)
    if n <= a:
        assert need == n
    # The terms a row may miss never shrink when the question gains a term.
    assert (n + 1) - rule.required(n + 1) >= n - need


@pytest.mark.parametrize("changes", [
    {"mode": "some"}, {"all_up_to": 0}, {"share_step": -0.1}, {"share_step": 1.5}, {"share_floor": 0.0},
    {"share_floor": 1.01}, {"common_share": 0.0}, {"common_share": 1.5}, {"turns": "some"}, {"turns": ["any"]},
])
def test_bad_rules_are_refused(changes):
    with pytest.raises(Invalid):
        TermMatch(**changes)
    fields = {"mode": "lexical_match", "all_up_to": "lexical_all_up_to", "share_step": "lexical_share_step",
              "share_floor": "lexical_share_floor", "common_share": "lexical_common_share",
              "turns": "lexical_turn_match"}
    with pytest.raises(Invalid):  # when the config is made, not when a query runs
        RetrievalConfig(**{fields[k]: v for k, v in changes.items()})


def test_conjunctive_stays_an_alias_of_all_and_any():
    base = RetrievalConfig(lexical_match="adaptive")
    assert base.with_overrides(conjunctive=True).lexical_match == "all"
    assert base.with_overrides(conjunctive=False).lexical_match == "any"
    assert base.with_overrides(conjunctive=None).lexical_match == "adaptive"
    assert base.with_overrides(conjunctive=True, lexical_match="all").term_match == ALL_TERMS
    with pytest.raises(Invalid, match="contradicts"):
        base.with_overrides(conjunctive=True, lexical_match="adaptive")
    assert RetrievalConfig().term_match == ALL_TERMS  # the field defaults are the paper's: conjunctive


def test_paper_preset_keeps_the_papers_settings():
    paper = PRESETS["paper-orgmembench"]
    assert paper == RetrievalConfig()
    assert (paper.weights, paper.candidates, paper.k, paper.gamma, paper.reserve, paper.lexical_match,
            paper.selector) == ({"lex": 1.0, "tag": 1.0, "vec": 4.0}, 50, 50, 60.0, 3, "all", "rrf")


def test_the_default_preset_is_coverage_with_the_adaptive_lexical_match():
    default = PRESETS[DEFAULT_PRESET]
    assert default.selector == "coverage" and default.coverage_threads == "lexical"
    assert default.lexical_match == "adaptive"
    assert default != PRESETS["paper-orgmembench"]


def test_common_terms_do_not_count_unless_every_term_is_common():
    rule = TermMatch("adaptive", common_share=0.5)
    assert rule.counted_terms([10, 600, 500, 0], 1000) == [True, False, True, True]  # 500 is not more than half
    assert rule.counted_terms([900, 700], 1000) == [True, True]  # all common: all count
    assert TermMatch("adaptive").counted_terms([999, 1000], 1000) == [True, True]  # share 1: every term counts
    assert rule.counted_terms([], 0) == []
    assert RetrievalConfig(lexical_common_share=0.2).term_match.common_share == 0.2


def test_the_default_preset_lets_terms_in_most_rows_only_score():
    assert PRESETS[DEFAULT_PRESET].term_match.common_share == 0.5
    assert PRESETS["paper-orgmembench"].term_match.common_share == 1.0


def test_chat_turns_have_a_rule_of_their_own_only_where_it_differs():
    rule = TermMatch("adaptive", common_share=0.5, turns="any")
    assert rule.turn_rule == TermMatch("any", common_share=0.5)  # the rest of the rule is kept
    assert TermMatch("adaptive").turn_rule is None
    assert TermMatch("adaptive", turns="adaptive").turn_rule is None
    assert RetrievalConfig(lexical_match="adaptive", lexical_turn_match="all").term_match.turn_rule == TermMatch("all")


def test_a_request_naming_either_end_of_the_rule_names_it_for_turns_too():
    base = RetrievalConfig(lexical_match="adaptive", lexical_turn_match="any")
    assert base.with_overrides(conjunctive=True).term_match.turn_rule is None
    assert base.with_overrides(lexical_match="all").lexical_turn_match is None
    assert base.with_overrides(lexical_match="any", lexical_turn_match="all").term_match.turn_rule == TermMatch("all")
    # Asking the adaptive rule, or nothing about the rule, keeps the turns' own.
    assert base.with_overrides(lexical_match="adaptive").lexical_turn_match == "any"
    assert base.with_overrides(k=5).lexical_turn_match == "any"

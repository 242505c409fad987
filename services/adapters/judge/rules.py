"""The offline judge: cosine thresholds and dates, like the papers' rule baselines (RuleSim).

No model, no network, deterministic: the same rows always get the same answer. It is the
judge when no chat endpoint is configured, and the baseline a model judge is measured against.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from difflib import SequenceMatcher
from itertools import combinations

from schemas.rows import Row
from services.core.maintenance.judging import (
    MERGED_MAX_TOKENS,
    GroupLabel,
    PairDecision,
    clip_tokens,
)
from services.core.text import content_terms

_NUMBER = re.compile(r"\d+(?:[.,:/]\d+)*")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_NON_WORD = re.compile(r"[^0-9a-z\u00c0-\uffff]+")


def normalise(text: str) -> str:
    """Lower case, punctuation and spacing dropped: what 'the same words' compares."""
    return " ".join(_NON_WORD.sub(" ", text.lower()).split())


def numbers(text: str) -> frozenset[str]:
    """The figures a text states (amounts, dates, versions); thousands commas do not count."""
    return frozenset(re.sub(r"(?<=\d),(?=\d{3}\b)", "", m.group(0)) for m in _NUMBER.finditer(text))


def _versions(a: Row, b: Row) -> bool:
    """Two dated rows from different days stating different figures: a value that changed."""
    if a.event_time is None or b.event_time is None:
        return False
    return a.event_time.date() != b.event_time.date() and numbers(a.text) != numbers(b.text)


def information_key(row: Row) -> tuple:
    """Orders rows from least to most informative: fewer distinct content terms, then fewer
    characters, then older (undated counts as oldest), then earlier ingested, then row id."""
    when = row.event_time.timestamp() if row.event_time is not None else float("-inf")
    return (len(set(content_terms(row.text))), len(row.text.strip()), when, row.ingest_position, row.row_id)


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def merge_texts(rows: Sequence[Row], max_tokens: int = MERGED_MAX_TOKENS) -> str:
    """The longest text, then each sentence of the others that it does not already contain,
    in row order; clipped to `max_tokens` whitespace tokens."""
    base = max(rows, key=lambda r: (len(r.text.strip()), r.ingest_position, r.row_id))
    parts = [base.text.strip()]
    seen = normalise(base.text)
    for row in rows:
        if row is base:
            continue
        for sentence in _sentences(row.text):
            norm = normalise(sentence)
            if norm and norm not in seen:
                parts.append(sentence)
                seen += " " + norm
    return clip_tokens(" ".join(parts), max_tokens)


class RuleJudge:
    """similarity >= similarity_delete: archive the less informative row (`information_key`);
    >= similarity_merge: merge deterministically (`merge_texts`), or archive a row whose every
    sentence the other already holds; below: preserve. Dated rows
    from different days with different figures are versions of a fact and are always preserved.
    Groups: near-identical normalised text with the same figures is a restatement; rows from
    different days with different figures are a conflict; anything else is distinct."""

    name = "rule"

    def __init__(
        self,
        similarity_delete: float = 0.95,
        similarity_merge: float = 0.9,
        near_identical: float = 0.95,
    ):
        if not 0.0 <= similarity_merge <= similarity_delete <= 1.0:
            raise ValueError("thresholds: need 0 <= similarity_merge <= similarity_delete <= 1")
        if not 0.0 < near_identical <= 1.0:
            raise ValueError(f"near_identical: must be in (0, 1], got {near_identical}")
        self.similarity_delete = similarity_delete
        self.similarity_merge = similarity_merge
        self.near_identical = near_identical

    def __repr__(self) -> str:
        return f"RuleJudge(delete>={self.similarity_delete}, merge>={self.similarity_merge})"

    def _near_identical(self, a: Row, b: Row) -> bool:
        if numbers(a.text) != numbers(b.text):
            return False
        wa, wb = normalise(a.text).split(), normalise(b.text).split()
        return wa == wb or SequenceMatcher(None, wa, wb, autojunk=False).ratio() >= self.near_identical

    def label_group(self, rows: Sequence[Row]) -> GroupLabel:
        if len(rows) < 2:
            raise ValueError(f"rows: a group needs two or more rows, got {len(rows)}")
        pairs = list(combinations(rows, 2))
        if all(self._near_identical(a, b) for a, b in pairs):
            return GroupLabel("restatement", "near-identical text with the same figures")
        changed = [(a, b) for a, b in pairs if _versions(a, b)]
        if changed:
            a, b = changed[0]
            return GroupLabel("conflict", f"{a.row_id} and {b.row_id} state different figures on different dates")
        return GroupLabel("distinct", "similar wording, no shared or changed figures")

    def merge(self, rows: Sequence[Row], max_tokens: int = MERGED_MAX_TOKENS) -> str:
        if not rows:
            raise ValueError("rows: nothing to merge")
        return merge_texts(rows, max_tokens)

    def judge_pair(self, a: Row, b: Row, similarity: float) -> PairDecision:
        if _versions(a, b):
            return PairDecision("preserve", reason="different figures on different dates: versions of a fact")
        if similarity >= self.similarity_delete:
            less, more = sorted((a, b), key=information_key)
            return PairDecision(
                "delete", keep=more.row_id, archive=less.row_id,
                reason=f"cosine {similarity:.3f} >= {self.similarity_delete}: near duplicate",
            )  # fmt: skip
        if similarity >= self.similarity_merge:
            merged = merge_texts([a, b])
            for whole, part in ((a, b), (b, a)):
                if normalise(merged) == normalise(whole.text):
                    # The other row adds no sentence of its own: it is redundant, not complementary.
                    return PairDecision(
                        "delete", keep=whole.row_id, archive=part.row_id,
                        reason=f"cosine {similarity:.3f}: {part.row_id} is contained in {whole.row_id}",
                    )  # fmt: skip
            return PairDecision(
                "merge", merged_text=merged, reason=f"cosine {similarity:.3f} >= {self.similarity_merge}: overlapping"
            )
        return PairDecision("preserve", reason=f"cosine {similarity:.3f} < {self.similarity_merge}")

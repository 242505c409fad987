"""The judge that maintenance asks: what a group of similar rows is, and what to do with a pair.

Two implementations live in `services/adapters/judge/`: an offline rule judge and any
OpenAI-compatible chat-completions endpoint. The policies in this package only see this
Protocol and the two decision types, so a job can swap judges without touching a policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from schemas.rows import Row

GroupLabelKind = Literal["conflict", "restatement", "distinct"]
PairAction = Literal["delete", "merge", "preserve"]

# Mem++ caps a model-written merged row at 220 tokens. We count whitespace-separated tokens:
# every judge and every store counts them the same way, unlike a model's own tokenizer.
MERGED_MAX_TOKENS = 220


@dataclass(frozen=True)
class GroupLabel:
    """What a group of similar rows is (Mem++ Eq. 6).

    conflict: one fact took a new value over time; restatement: the rows say the same thing;
    distinct: the rows only look alike.
    """

    label: GroupLabelKind
    reason: str = ""

    def __post_init__(self) -> None:
        if self.label not in get_args(GroupLabelKind):
            raise ValueError(f"label: expected one of {get_args(GroupLabelKind)}, got {self.label!r}")


@dataclass(frozen=True)
class PairDecision:
    """What to do with one candidate pair (MemRefine).

    delete: `archive` names the less informative row and `keep` the other;
    merge: `merged_text` replaces both rows; preserve: both stay and the pair is remembered.
    """

    action: PairAction
    keep: str | None = None
    archive: str | None = None
    merged_text: str | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.action not in get_args(PairAction):
            raise ValueError(f"action: expected one of {get_args(PairAction)}, got {self.action!r}")
        if self.action == "delete" and not (self.keep and self.archive and self.keep != self.archive):
            raise ValueError("delete: needs two different row ids in keep and archive")
        if self.action == "merge" and not (self.merged_text or "").strip():
            raise ValueError("merge: merged_text is empty")

    def check_pair(self, a: Row, b: Row) -> None:
        """A decision about (a, b) may only name a and b."""
        if self.action == "delete" and {self.keep, self.archive} != {a.row_id, b.row_id}:
            raise ValueError(
                f"delete: keep/archive ({self.keep}, {self.archive}) must be the pair ({a.row_id}, {b.row_id})"
            )


class Judge(Protocol):
    name: str  # "rule", "openai:<model>": recorded with every run

    def label_group(self, rows: Sequence[Row]) -> GroupLabel:
        """Label a group of two or more rows; raise JudgeFailed when no usable label came back."""

    def merge(self, rows: Sequence[Row], max_tokens: int = MERGED_MAX_TOKENS) -> str:
        """One text that keeps every fact of the rows, at most `max_tokens` whitespace tokens."""

    def judge_pair(self, a: Row, b: Row, similarity: float) -> PairDecision:
        """Delete the less informative row, merge the two, or preserve both."""


def clip_tokens(text: str, max_tokens: int = MERGED_MAX_TOKENS) -> str:
    """At most `max_tokens` whitespace tokens; text within the cap is returned unchanged."""
    tokens = text.split()
    if len(tokens) <= max_tokens:
        return text.strip()
    return " ".join(tokens[:max_tokens])

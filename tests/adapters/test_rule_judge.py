"""The offline rule judge: group labels from text and dates, pair decisions from cosine bands."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from schemas.events import RowDerived, RowSuperseded
from schemas.rows import Row
from services.adapters.judge.rules import (
    RuleJudge,
    information_key,
    merge_texts,
    numbers,
)
from services.core.maintenance import GroupLabel, group_rows, plan_group

T0 = datetime(2024, 5, 1, tzinfo=UTC)


def mk(rid: str, pos: int, text: str, days: int | None = None, **kw) -> Row:
    when = None if days is None else T0 + timedelta(days=days)
    return Row(row_id=rid, tenant="acme", text=text, event_time=when, ingest_position=pos,
               ingested_at=T0 + timedelta(minutes=pos), **kw)  # fmt: skip


judge = RuleJudge()


def test_numbers_are_read_as_written():
    assert numbers("Budget 12,000 EUR by 2024-06-30, v1.2") == {"12000", "2024", "06", "30", "1.2"}


def test_labels():
    restated = [mk("a", 1, "The release is on Friday, 14:00.", 0), mk("b", 2, "the release is on friday 14:00", 3)]
    assert judge.label_group(restated).label == "restatement"
    changed = [mk("a", 1, "Team budget is 10,000 EUR.", 0), mk("b", 2, "Team budget is now 12,500 EUR.", 20)]
    label = judge.label_group(changed)
    assert label.label == "conflict" and "a" in label.reason and "b" in label.reason
    # Different figures but no dates to order them: not a conflict anyone can settle.
    undated = [mk("a", 1, "Team budget is 10,000 EUR."), mk("b", 2, "Team budget is now 12,500 EUR.")]
    assert judge.label_group(undated).label == "distinct"
    # Same day, different figures: still no change over time.
    same_day = [mk("a", 1, "Room 101 booked.", 2), mk("b", 2, "Room 102 booked.", 2)]
    assert judge.label_group(same_day).label == "distinct"
    alike = [mk("a", 1, "Onboarding checklist for new hires.", 0), mk("b", 2, "Offboarding checklist for leavers.", 9)]
    assert judge.label_group(alike).label == "distinct"
    with pytest.raises(ValueError, match="two or more"):
        judge.label_group(alike[:1])


def test_pair_bands_and_the_less_informative_row():
    short = mk("s", 1, "Deploy freeze starts Monday.", 1)
    long = mk("l", 2, "Deploy freeze starts Monday. Hotfixes need approval from Dana.", 0)
    decision = judge.judge_pair(short, long, 0.97)
    assert (decision.action, decision.archive, decision.keep) == ("delete", "s", "l")
    assert judge.judge_pair(long, short, 0.97) == decision  # order of the pair does not matter
    # Same content terms and length: the older row is the less informative.
    older, newer = mk("o", 5, "Standup moves to 9.", 1), mk("n", 4, "Standup moves to 9!", 4)
    assert information_key(older) < information_key(newer)
    assert judge.judge_pair(newer, older, 0.99).archive == "o"
    # In the merge band, a row wholly contained in the other is archived rather than merged.
    contained = judge.judge_pair(short, long, 0.92)
    assert (contained.action, contained.archive) == ("delete", "s")
    other = mk("x", 3, "Deploy freeze starts Monday. Ask Sam for exceptions.", 2)
    merged = judge.judge_pair(other, long, 0.92)
    assert merged.action == "merge" and merged.merged_text is not None
    assert "Ask Sam for exceptions." in merged.merged_text and "approval from Dana" in merged.merged_text
    assert judge.judge_pair(short, long, 0.5).action == "preserve"


def test_versions_of_a_fact_are_always_preserved():
    v1, v2 = mk("v1", 1, "Price is 10 EUR.", 0), mk("v2", 2, "Price is 12 EUR.", 30)
    assert judge.judge_pair(v1, v2, 0.99).action == "preserve"


def test_merged_text_keeps_new_sentences_once_and_respects_the_cap():
    a = mk("a", 1, "Venue is hall B. Catering by Lee.")
    b = mk("b", 2, "Venue is hall B. Budget approved by Kim. Catering by Lee!")
    text = merge_texts([a, b])
    assert text.startswith(b.text)  # the longer text leads
    assert text.count("Venue is hall B") == 1 and "Budget approved by Kim" in text
    c = mk("c", 3, "Extra fact here.")
    assert merge_texts([a, c]) == "Venue is hall B. Catering by Lee. Extra fact here."
    many = mk("m", 4, " ".join(f"w{i}" for i in range(500)))
    assert len(judge.merge([many, c]).split()) == 220
    assert len(judge.merge([many, c], max_tokens=40).split()) == 40


def test_thresholds_are_checked():
    with pytest.raises(ValueError, match="thresholds"):
        RuleJudge(similarity_delete=0.8, similarity_merge=0.9)
    assert RuleJudge(0.99, 0.8).judge_pair(mk("a", 1, "x y."), mk("b", 2, "x z."), 0.95).action == "merge"


def test_consolidation_end_to_end_with_the_rule_judge():
    rng = np.random.default_rng(5)
    topic_a, topic_b = rng.normal(size=24), rng.normal(size=24)
    rows = [
        mk("p1", 1, "Office rent is 4,000 per month.", 0), mk("q1", 2, "The wiki lives at wiki.acme.", 1),
        mk("p2", 3, "Office rent is 4,400 per month.", 40), mk("q2", 4, "The wiki lives at wiki.acme!", 2),
    ]  # fmt: skip
    noise = {r.row_id: rng.normal(scale=0.05, size=24) for r in rows}
    vectors = {r.row_id: (topic_a if r.row_id.startswith("p") else topic_b) + noise[r.row_id] for r in rows}
    vectors = {k: v / np.linalg.norm(v) for k, v in vectors.items()}

    def neighbours(row_id: str) -> list[tuple[str, float]]:
        return [(r.row_id, float(vectors[row_id] @ vectors[r.row_id])) for r in rows if r.row_id != row_id]

    groups = group_rows(rows, neighbours)
    assert [[r.row_id for r in g] for g in groups] == [["p1", "p2"], ["q1", "q2"]]
    labels = [judge.label_group(g) for g in groups]
    assert [lab.label for lab in labels] == ["conflict", "restatement"]
    conflict = plan_group(groups[0], labels[0], None, "run1", judge=judge.name)
    assert [(type(e), e.row_id, e.superseded_by) for e in conflict] == [(RowSuperseded, "p1", "p2")]
    merged = judge.merge(groups[1])
    restated = plan_group(groups[1], labels[1], merged, "run1", judge=judge.name)
    assert isinstance(restated[0], RowDerived) and restated[0].document.date == T0 + timedelta(days=1)
    assert GroupLabel("distinct") != labels[1]

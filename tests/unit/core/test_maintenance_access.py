"""Maintenance never narrows who can read a fact and never moves text across access lists.

Attacks from the hardening issue (finding 4), each on a public row and a finance-only row with
near-identical text: a consolidation group that mixes them (a supersede from the public row to the
hidden one, a merge into a finance-only row, a judge's reason quoting both), and a MemRefine pair
that mixes them (a merge that archives the public row into a finance-only derived row).
"""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

import pytest

from schemas.events import RowDerived, RowSuperseded
from schemas.rows import Row
from services.core.maintenance import (
    Budget,
    GroupLabel,
    PairDecision,
    RefinePlanner,
    access_key,
    combined_acl,
    group_rows,
    plan_group,
    same_access,
)
from services.errors import IncompatibleAccess

T0 = datetime(2024, 1, 1, tzinfo=UTC)
TEXT = "The Q3 marketing budget is 40,000 EUR, approved by Dana."


def mk(rid: str, pos: int, text: str = TEXT, **kw) -> Row:
    return Row(row_id=rid, tenant="acme", text=text, ingest_position=pos,
               ingested_at=T0 + timedelta(minutes=pos), **kw)  # fmt: skip


def everyone_close(rows: list[Row], cosine: float = 0.99):
    """Every row is a near duplicate of every other: only the access rule can keep them apart."""

    def neighbours(row_id: str) -> list[tuple[str, float]]:
        return [(r.row_id, cosine) for r in rows if r.row_id != row_id]

    return neighbours


def drive(planner: RefinePlanner, decide) -> tuple[list, list]:
    events, seen = [], []
    while (candidate := planner.next_pair()) is not None:
        seen.append(candidate)
        events += planner.apply(candidate, decide(candidate))
    return events, seen


# -- the rule ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "a,b,same",
    [
        ([], [], True), ([], ["*"], True), ([], ["finance", "*"], True),  # "*" admits everyone
        (["Finance"], [" finance"], True), (["eng", "ops"], ["ops", "eng", "OPS"], True),
        ([], ["finance"], False), (["finance"], ["finance", "eng"], False), (["finance"], ["hr"], False),
    ],
)  # fmt: skip
def test_rows_share_access_only_with_the_same_effective_readers(a, b, same):
    assert same_access([mk("a", 1, acl=a), mk("b", 2, acl=b)]) is same
    assert (access_key(a) == access_key(b)) is same


# -- consolidation -----------------------------------------------------------------------------


def test_consolidation_forms_no_group_of_a_public_and_a_finance_row():
    public, finance = mk("pub", 1), mk("fin", 2, TEXT.replace("40,000", "55,000"), acl=["finance"])
    assert group_rows([public, finance], everyone_close([public, finance])) == []


def test_consolidation_groups_split_by_access_list():
    rows = [mk("p1", 1), mk("f1", 2, acl=["finance"]), mk("p2", 3), mk("f2", 4, acl=["Finance"]),
            mk("e1", 5, acl=["finance", "eng"]), mk("p3", 6, acl=["*"])]  # fmt: skip
    groups = group_rows(rows, everyone_close(rows))
    assert [[r.row_id for r in g] for g in groups] == [["p1", "p2", "p3"], ["f1", "f2"]]
    assert all(same_access(g) for g in groups)


def test_a_supersede_never_points_from_a_public_row_to_a_restricted_one():
    old = mk("pub", 1, event_time=T0)
    new = mk("fin", 2, TEXT.replace("40,000", "55,000"), event_time=T0 + timedelta(days=30), acl=["finance"])
    for label in ("conflict", "restatement", "distinct"):
        with pytest.raises(IncompatibleAccess):
            plan_group([old, new], GroupLabel(label, f"fin said {new.text!r}"), "merged", "r")


def test_a_merge_of_rows_that_share_a_list_keeps_that_list():
    finance = [mk("f1", 1, acl=["Finance"]), mk("f2", 2, acl=["finance"])]
    derived = plan_group(finance, GroupLabel("restatement"), "merged", "r")[0]
    assert isinstance(derived, RowDerived) and derived.document.acl == ["Finance"]
    public = [mk("p1", 1), mk("p2", 2, acl=["*"])]
    assert plan_group(public, GroupLabel("restatement"), "merged", "r")[0].document.acl == []
    # The old intersection is gone: lists that differ are refused, never narrowed.
    for rows in ([mk("p", 1), mk("f", 2, acl=["finance"])], [mk("a", 1, acl=["eng", "ops"]), mk("b", 2, acl=["ops"])]):
        with pytest.raises(IncompatibleAccess):
            combined_acl(rows)


def test_no_random_grouping_mixes_lists_or_supersedes_across_them():
    rng = random.Random(5)
    lists = [[], ["*"], ["finance"], ["Finance"], ["hr"], ["finance", "hr"]]
    rows = [mk(f"r{i:02d}", i, event_time=T0 + timedelta(days=rng.randint(0, 9)), acl=rng.choice(lists))
            for i in range(40)]  # fmt: skip
    by_id = {r.row_id: r for r in rows}
    for group in group_rows(rows, everyone_close(rows)):
        assert same_access(group)
        for event in plan_group(group, GroupLabel("conflict"), None, "r"):
            assert isinstance(event, RowSuperseded)
            assert access_key(by_id[event.row_id].acl) == access_key(by_id[event.superseded_by].acl)


# -- MemRefine ---------------------------------------------------------------------------------


def test_refine_never_proposes_a_public_and_a_finance_row_and_counts_the_pair():
    rows = [mk("pub", 1), mk("fin", 2, TEXT + " Code Bluefin.", acl=["finance"])]
    planner = RefinePlanner(rows, everyone_close(rows), Budget(max_bytes=0), "r")
    assert planner.next_pair() is None  # no judge call is spent on it
    report = planner.report()
    assert (report.pairs_judged, report.pairs_skipped_access, report.stop_reason) == (0, 1, "no_candidates")
    assert report.as_dict()["pairs_skipped_access"] == 1


def test_refine_pairs_only_rows_of_one_list_and_a_merge_keeps_it():
    rows = [mk("p1", 1), mk("f1", 2, acl=["finance"]), mk("p2", 3, TEXT + " Venue: hall B."),
            mk("f2", 4, TEXT + " Code Bluefin.", acl=["FINANCE"])]  # fmt: skip
    planner = RefinePlanner(rows, everyone_close(rows), Budget(max_bytes=0), "r")
    events, seen = drive(planner, lambda c: PairDecision("merge", merged_text=f"{c.a.text} {c.b.text}"))
    assert sorted(c.key for c in seen) == [("f1", "f2"), ("p1", "p2")]
    assert all(same_access([c.a, c.b]) for c in seen)
    derived = {tuple(e.sources): e.document.acl for e in events if isinstance(e, RowDerived)}
    assert derived == {("p1", "p2"): [], ("f1", "f2"): ["finance"]}
    assert planner.report().pairs_skipped_access == 4
    # A merged row offered again pairs only with rows of its own list.
    merged_public = next(e.row_id for e in events if isinstance(e, RowDerived) and not e.document.acl)
    merged_finance = next(e.row_id for e in events if isinstance(e, RowDerived) and e.document.acl)
    planner.offer(merged_public, [(merged_finance, 0.99)])
    assert planner.next_pair() is None and planner.report().pairs_skipped_access == 5


def test_refine_candidates_on_random_lists_always_share_a_list():
    rng = random.Random(9)
    lists = [[], ["*"], ["finance"], ["hr"], ["finance", "hr"]]
    rows = [mk(f"r{i:02d}", i, f"{TEXT} {i}", acl=rng.choice(lists)) for i in range(30)]
    planner = RefinePlanner(rows, everyone_close(rows), Budget(max_bytes=0), "r")
    _, seen = drive(planner, lambda c: PairDecision("preserve"))
    assert seen and all(access_key(c.a.acl) == access_key(c.b.acl) for c in seen)
    mixed = sum(1 for a, b in itertools.combinations(rows, 2) if access_key(a.acl) != access_key(b.acl))
    assert planner.report().pairs_skipped_access == mixed
    assert len(seen) == len(list(itertools.combinations(rows, 2))) - mixed

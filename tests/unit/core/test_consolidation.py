"""Consolidation (Mem++ Algorithm 2): greedy grouping and the events each label becomes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from schemas.events import (
    RowArchived,
    RowDerived,
    RowSuperseded,
    event_from_json,
    event_to_json,
)
from schemas.rows import Row
from services.core.maintenance import (
    GroupLabel,
    combined_acl,
    group_rows,
    is_protected,
    plan_group,
)
from services.core.write_rules import derived_row_id
from services.errors import IncompatibleAccess

T0 = datetime(2024, 1, 1, tzinfo=UTC)


def mk(rid: str, pos: int, text: str = "", **kw) -> Row:
    return Row(row_id=rid, tenant=kw.pop("tenant", "acme"), text=text or f"text of {rid}",
               ingest_position=pos, ingested_at=T0 + timedelta(minutes=pos), **kw)  # fmt: skip


def scripted(table: dict[str, list[tuple[str, float]]]):
    calls: list[str] = []

    def neighbours(row_id: str) -> list[tuple[str, float]]:
        calls.append(row_id)
        return table.get(row_id, [])

    neighbours.calls = calls  # type: ignore[attr-defined]
    return neighbours


def brute_force(rows: list[Row], vectors: dict[str, np.ndarray]):
    """A neighbour function over unit vectors: every other row with its cosine (any tenant, any state),
    so the grouping itself must filter."""

    def neighbours(row_id: str) -> list[tuple[str, float]]:
        v = vectors[row_id]
        return [(r.row_id, float(v @ vectors[r.row_id])) for r in rows if r.row_id != row_id]

    return neighbours


def ids(groups: list[list[Row]]) -> list[list[str]]:
    return [[r.row_id for r in g] for g in groups]


def test_tau_is_inclusive_and_just_below_is_out():
    rows = [mk("a", 1), mk("b", 2), mk("c", 3)]
    groups = group_rows(rows, scripted({"a": [("b", 0.85), ("c", 0.8499)]}), tau=0.85)
    assert ids(groups) == [["a", "b"]]


def test_greedy_in_ingest_order_and_members_sorted():
    # a~b and b~c but not a~c: a opens first and takes b, so c is left alone (no chaining).
    table = {"a": [("b", 0.9), ("c", 0.5)], "b": [("a", 0.9), ("c", 0.9)], "c": [("b", 0.9)]}
    rows = [mk("c", 3), mk("a", 1), mk("b", 2)]  # input order must not matter
    assert ids(group_rows(rows, scripted(table))) == [["a", "b"]]
    # Members follow ingest order whatever order the index returns them in.
    table2 = {"a": [("d", 0.95), ("b", 0.9), ("c", 0.99)]}
    rows2 = [mk("a", 1), mk("b", 2), mk("c", 3), mk("d", 4)]
    assert ids(group_rows(rows2, scripted(table2))) == [["a", "b", "c", "d"]]


def test_grouped_rows_are_not_asked_again():
    table = {"a": [("b", 0.9)], "b": [("a", 0.9)], "c": []}
    neighbours = scripted(table)
    group_rows([mk("a", 1), mk("b", 2), mk("c", 3)], neighbours)
    assert neighbours.calls == ["a", "c"]  # b joined a's group; no index query for it


@pytest.mark.parametrize(
    "tags,protected",
    [
        (["Pinned"], True), (["confidential "], True), (["label:pinned"], True),
        (["sensitivity=Confidential"], True), (["labels/PINNED"], True),
        (["unpinned"], False), (["pinned-later"], False), (["label:public"], False), ([], False),
    ],
)  # fmt: skip
def test_protected_tags(tags, protected):
    assert is_protected(mk("a", 1, tags=tags)) is protected


def test_pinned_confidential_superseded_archived_are_not_grouped():
    rows = [
        mk("a", 1), mk("p", 2, tags=["label:pinned"]), mk("c", 3, tags=["Confidential"]),
        mk("s", 4, superseded_by="a"), mk("x", 5, state="archived"), mk("b", 6),
    ]  # fmt: skip
    everything = [(r.row_id, 0.99) for r in rows]
    groups = group_rows(rows, scripted({r.row_id: everything for r in rows}))
    assert ids(groups) == [["a", "b"]]


def test_tenants_never_mix():
    rng = np.random.default_rng(7)
    base = rng.normal(size=8)
    base /= np.linalg.norm(base)
    rows = [mk("a1", 1, tenant="t1"), mk("b1", 2, tenant="t2"), mk("a2", 3, tenant="t1"), mk("b2", 4, tenant="t2")]
    vectors = {r.row_id: base for r in rows}  # identical text across tenants
    groups = group_rows(rows, brute_force(rows, vectors))
    assert ids(groups) == [["a1", "a2"], ["b1", "b2"]]
    assert all(len({r.tenant for r in g}) == 1 for g in groups)


def test_groups_hold_the_greedy_invariants_on_random_clusters():
    rng = np.random.default_rng(11)
    centres = rng.normal(size=(5, 16))
    rows, vectors = [], {}
    for i in range(60):
        v = centres[i % 5] + rng.normal(scale=0.35, size=16)
        rows.append(mk(f"r{i:02d}", i))
        vectors[f"r{i:02d}"] = v / np.linalg.norm(v)
    tau = 0.85
    groups = group_rows(rows, brute_force(rows, vectors), tau=tau)
    assert groups, "clusters this tight must produce groups"
    seen: set[str] = set()
    for group in groups:
        first = group[0]
        members = {r.row_id for r in group}
        assert not members & seen
        seen |= members
        assert all(first.ingest_position < r.ingest_position for r in group[1:])
        assert all(vectors[first.row_id] @ vectors[r.row_id] >= tau for r in group[1:])
    # Maximal: a candidate close to a group's first row is in that group, or was taken by a
    # group that opened earlier.
    opened_at = {r.row_id: g[0].ingest_position for g in groups for r in g}
    for group in groups:
        first, members = group[0], {r.row_id for r in group}
        for row in rows:
            if row.row_id not in members and vectors[first.row_id] @ vectors[row.row_id] >= tau:
                assert opened_at.get(row.row_id, 10**9) < first.ingest_position


def test_conflict_supersedes_every_older_row_by_the_latest_dated():
    group = [
        mk("old", 1, event_time=T0), mk("undated", 2),
        mk("new", 3, event_time=T0 + timedelta(days=30)), mk("mid", 4, event_time=T0 + timedelta(days=3)),
    ]  # fmt: skip
    events = plan_group(group, GroupLabel("conflict", "price changed"), None, "run1", judge="rule")
    assert all(isinstance(e, RowSuperseded) for e in events)
    assert sorted(e.row_id for e in events) == ["mid", "old", "undated"]
    assert {e.superseded_by for e in events} == {"new"}
    assert all(e.run_id == "run1" and e.tenant == "acme" and "price changed" in e.reason for e in events)


def test_conflict_on_the_same_date_goes_to_the_later_ingested_row():
    group = [mk("x", 7, event_time=T0), mk("y", 2, event_time=T0)]
    events = plan_group(group, GroupLabel("conflict"), None, "run1")
    assert [(e.row_id, e.superseded_by) for e in events] == [("y", "x")]


def test_restatement_derives_one_row_and_archives_the_originals():
    group = [
        mk("a", 1, author="Ann", event_time=T0 + timedelta(days=5), kind="email", thread="budget", tags=["q3"]),
        mk("b", 2, author="Bob", event_time=T0 + timedelta(days=1), kind="ticket", tags=["q3", "fin"]),
        mk("c", 3, author="Ann", tags=["ops"]),
    ]  # fmt: skip
    long_text = " ".join(f"w{i}" for i in range(300))
    events = plan_group(group, GroupLabel("restatement", "same budget"), long_text, "run9")
    derived, *archived = events
    assert isinstance(derived, RowDerived)
    assert derived.row_id == derived_row_id("run9", ["a", "b", "c"])
    assert derived.sources == ["a", "b", "c"]
    doc = derived.document
    assert len(doc.text.split()) == 220
    assert doc.date == T0 + timedelta(days=1)  # the earliest date in the group
    assert doc.author == "Ann, Bob"
    assert {"author:Ann", "author:Bob", "q3", "fin", "ops"} == set(doc.tags)
    assert (doc.kind, doc.thread) == ("email", "budget")
    assert [e.row_id for e in archived] == ["a", "b", "c"]
    assert all(isinstance(e, RowArchived) and derived.row_id in e.reason for e in archived)
    assert all(e.run_id == "run9" and e.tenant == "acme" and e.reason for e in events)
    # Every event survives the log's serialisation unchanged.
    assert [event_from_json(event_to_json(e)) for e in events] == events


def test_distinct_changes_nothing():
    assert plan_group([mk("a", 1), mk("b", 2)], GroupLabel("distinct"), None, "r") == []


def test_acl_of_a_merged_row_is_its_sources_shared_list_and_never_narrows_or_widens():
    open_row, eng, eng2, ops = mk("o", 1), mk("e", 2, acl=["eng", "Ops"]), mk("f", 3, acl=["ops", "ENG"]), mk("p", 4, acl=["ops"])
    assert combined_acl([open_row, open_row]) == []
    assert combined_acl([eng, eng2]) == ["eng", "Ops"]  # one list, spelled as the first row does
    for mixed in ([open_row, eng], [eng, ops], [eng, mk("h", 5, acl=["hr"])]):
        with pytest.raises(IncompatibleAccess):
            combined_acl(mixed)
        with pytest.raises(IncompatibleAccess):
            plan_group(mixed, GroupLabel("restatement"), "merged", "r")
    events = plan_group([eng, eng2], GroupLabel("restatement"), "merged", "r")
    assert events[0].document.acl == ["eng", "Ops"]


def test_bad_groups_are_refused_with_the_problem_named():
    with pytest.raises(ValueError, match="two or more"):
        plan_group([mk("a", 1)], GroupLabel("conflict"), None, "r")
    with pytest.raises(ValueError, match="one tenant"):
        plan_group([mk("a", 1), mk("b", 2, tenant="other")], GroupLabel("conflict"), None, "r")
    with pytest.raises(ValueError, match="merged_text"):
        plan_group([mk("a", 1), mk("b", 2)], GroupLabel("restatement"), "  ", "r")
    with pytest.raises(ValueError, match="label"):
        GroupLabel("unsure")  # type: ignore[arg-type]

"""MemRefine planner: size accounting, budgets, the candidate queue, the preserve cache,
stop reasons, and reverting a run."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from schemas.events import Event, RowArchived, RowDerived, RowRestored, RowSuperseded
from schemas.rows import Row
from services.adapters.judge.rules import RuleJudge
from services.core.maintenance import (
    Budget,
    GroupLabel,
    PairDecision,
    RefinePlanner,
    inverse_events,
    pair_key,
    plan_group,
    row_size_bytes,
)

T0 = datetime(2024, 3, 1, tzinfo=UTC)


def mk(rid: str, pos: int, text: str = "", **kw) -> Row:
    return Row(row_id=rid, tenant=kw.pop("tenant", "acme"), text=text or f"text of {rid}",
               ingest_position=pos, ingested_at=T0 + timedelta(minutes=pos), **kw)  # fmt: skip


def table_neighbours(pairs: dict[tuple[str, str], float]):
    def neighbours(row_id: str) -> list[tuple[str, float]]:
        out = [(b, s) for (a, b), s in pairs.items() if a == row_id]
        return out + [(a, s) for (a, b), s in pairs.items() if b == row_id]

    return neighbours


def drive(planner: RefinePlanner, decide) -> tuple[list[Event], list[tuple[str, str]]]:
    events, seen = [], []
    while (candidate := planner.next_pair()) is not None:
        seen.append(candidate.key)
        events += planner.apply(candidate, decide(candidate))
    return events, seen


def preserve(_candidate) -> PairDecision:
    return PairDecision("preserve", reason="distinct facts")


# -- size and budget ---------------------------------------------------------------------------


def test_row_size_is_the_json_bytes_of_the_content_fields():
    row = mk("a", 1, "café", author="Zoë", event_time=T0, tags=["x"])
    expected = {
        "row_id": "a", "text": "café", "author": "Zoë", "event_time": T0.isoformat(), "kind": "doc",
        "thread": None, "title": None, "tags": ["x"], "participants": [], "acl": [], "source": None,
        "source_id": None,
    }  # fmt: skip
    assert row_size_bytes(row) == len(json.dumps(expected, ensure_ascii=False, sort_keys=True).encode())
    # Non-ASCII counts in UTF-8 bytes; bookkeeping fields do not count.
    assert row_size_bytes(mk("a", 1, "cafe", author="Zoë", event_time=T0, tags=["x"])) == row_size_bytes(row) - 1
    assert row_size_bytes(row.model_copy(update={"ingest_position": 99, "state": "archived"})) == row_size_bytes(row)
    assert row_size_bytes(mk("a", 1, "x" * 100)) - row_size_bytes(mk("a", 1, "x" * 10)) == 90


def test_budget_targets():
    assert Budget(fraction=0.5).target_bytes(1001) == 500
    assert Budget(fraction=1.0).target_bytes(1000) == 1000
    assert Budget(max_bytes=300).target_bytes(1000) == 300
    for bad in [{}, {"fraction": 0.5, "max_bytes": 3}, {"fraction": 0.0}, {"fraction": 1.5}, {"max_bytes": -1}]:
        with pytest.raises(ValueError, match="budget"):
            Budget(**bad)


# -- the queue and the preserve cache ----------------------------------------------------------


def test_pairs_come_most_similar_first_and_preserved_pairs_never_return():
    rows = [mk(c, i) for i, c in enumerate("abcd")]
    sims = {("a", "b"): 0.7, ("a", "c"): 0.95, ("b", "d"): 0.8, ("c", "d"): 0.6}
    planner = RefinePlanner(rows, table_neighbours(sims), Budget(max_bytes=0), "run1")
    events, seen = drive(planner, preserve)
    assert events == []
    assert seen == [("a", "c"), ("b", "d"), ("a", "b"), ("c", "d")]  # each pair once, by cosine
    report = planner.report()
    assert (report.stop_reason, report.pairs_judged, report.decisions) == ("no_candidates", 4, {"preserve": 4})
    # The next run starts from the cache: nothing is judged again.
    again = RefinePlanner(rows, table_neighbours(sims), Budget(max_bytes=0), "run2", preserved=planner.preserved_pairs)
    assert again.next_pair() is None
    assert again.report().stop_reason == "no_candidates" and again.calls == 0


def test_protected_superseded_and_foreign_rows_are_never_proposed():
    rows = [mk("a", 1), mk("p", 2, tags=["pinned"]), mk("s", 3, superseded_by="a"), mk("b", 4)]
    sims = {("a", "p"): 0.99, ("a", "s"): 0.98, ("a", "b"): 0.5, ("a", "zz-other-tenant"): 0.999}
    _, seen = drive(RefinePlanner(rows, table_neighbours(sims), Budget(max_bytes=0), "r"), preserve)
    assert seen == [("a", "b")]
    with pytest.raises(ValueError, match="one tenant"):
        RefinePlanner([mk("a", 1), mk("b", 2, tenant="other")], table_neighbours({}), Budget(max_bytes=0), "r")


# -- decisions and accounting ------------------------------------------------------------------


def test_delete_archives_the_named_row_and_its_pairs_drop_out():
    rows = [mk("a", 1, "short"), mk("b", 2, "a longer text"), mk("c", 3)]
    sims = {("a", "b"): 0.99, ("a", "c"): 0.9, ("b", "c"): 0.5}
    planner = RefinePlanner(rows, table_neighbours(sims), Budget(max_bytes=0), "run1", judge="rule")
    first = planner.next_pair()
    assert first is not None and first.key == ("a", "b")
    events = planner.apply(first, PairDecision("delete", keep="b", archive="a", reason="same fact"))
    assert [type(e) for e in events] == [RowArchived] and events[0].row_id == "a"
    assert events[0].run_id == "run1" and "rule" in events[0].reason
    assert planner.active_bytes == planner.start_bytes - row_size_bytes(rows[0])
    second = planner.next_pair()
    assert second is not None and second.key == ("b", "c")  # (a, c) went with a
    planner.apply(second, PairDecision("preserve"))
    assert planner.next_pair() is None and planner.stop_reason == "no_candidates"


def test_merge_derives_one_row_and_counts_its_size():
    rows = [mk("a", 1, "Budget is set.", author="Ann", event_time=T0), mk("b", 2, "Owner is Bob.", author="Bob")]
    planner = RefinePlanner(rows, table_neighbours({("a", "b"): 0.9}), Budget(max_bytes=0), "run3")
    candidate = planner.next_pair()
    events = planner.apply(candidate, PairDecision("merge", merged_text="Budget is set. Owner is Bob."))
    derived, *archived = events
    assert isinstance(derived, RowDerived) and derived.sources == ["a", "b"]
    assert derived.document.author == "Ann, Bob" and derived.document.date == T0
    assert [(type(e), e.row_id) for e in archived] == [(RowArchived, "a"), (RowArchived, "b")]
    derived_row = mk(derived.row_id, 0, derived.document.text, author="Ann, Bob", event_time=T0,
                     tags=derived.document.tags, source="maintenance:refine")  # fmt: skip
    assert planner.active_bytes == planner.start_bytes - sum(map(row_size_bytes, rows)) + row_size_bytes(derived_row)
    # A merged row can be paired again once the job offers its neighbours.
    planner2 = RefinePlanner([*rows, mk("c", 3)], table_neighbours({("a", "b"): 0.9}), Budget(max_bytes=0), "r")
    merged = planner2.apply(planner2.next_pair(), PairDecision("merge", merged_text="x y"))[0]
    planner2.offer(merged.row_id, [("c", 0.97)])
    assert planner2.next_pair().key == pair_key(merged.row_id, "c")


def test_pairs_of_different_access_lists_are_never_proposed():
    # Archiving the open row b in favour of eng-only a would take b's fact from everyone else;
    # merging a and c would leave no reader of the merged row. Neither pair reaches a judge.
    rows = [mk("a", 1, acl=["eng"]), mk("b", 2), mk("c", 3, acl=["hr"]), mk("d", 4, acl=["ENG"])]
    sims = {("a", "b"): 0.99, ("a", "c"): 0.98, ("a", "d"): 0.5}
    planner = RefinePlanner(rows, table_neighbours(sims), Budget(max_bytes=0), "r")
    candidate = planner.next_pair()
    assert candidate is not None and candidate.key == ("a", "d")
    events = planner.apply(candidate, PairDecision("merge", merged_text="both"))
    assert events[0].document.acl == ["eng"]
    assert planner.next_pair() is None
    report = planner.report()
    assert (report.pairs_judged, report.pairs_skipped_access, report.decisions) == (1, 2, {"merge": 1})


def test_decisions_must_name_the_pair_and_follow_next_pair():
    rows = [mk("a", 1), mk("b", 2)]
    planner = RefinePlanner(rows, table_neighbours({("a", "b"): 0.9}), Budget(max_bytes=0), "r")
    candidate = planner.next_pair()
    with pytest.raises(RuntimeError):
        planner.next_pair()
    with pytest.raises(ValueError, match="pair"):
        planner.apply(candidate, PairDecision("delete", keep="a", archive="zz"))
    planner.fail(candidate, "timeout")
    assert planner.next_pair() is None and planner.report().decisions == {"failed": 1}


# -- stop reasons ------------------------------------------------------------------------------


def test_stop_reasons():
    rows = [mk(c, i, "words " * (i + 1)) for i, c in enumerate("abcdef")]
    sims = {(x, y): 0.9 + 0.01 * i for i, (x, y) in enumerate(zip("abcde", "bcdef", strict=True))}
    neighbours = table_neighbours(sims)
    # Already within budget: no judge call at all.
    loose = RefinePlanner(rows, neighbours, Budget(fraction=1.0), "r")
    assert loose.next_pair() is None and loose.report().stop_reason == "budget_reached" and loose.calls == 0
    # One delete of the biggest row meets a budget just under the start size.
    tight = RefinePlanner(rows, neighbours, Budget(max_bytes=sum(map(row_size_bytes, rows)) - 1), "r")
    events, seen = drive(tight, lambda c: PairDecision("delete", keep=c.a.row_id, archive=c.b.row_id))
    report = tight.report()
    assert (report.stop_reason, report.pairs_judged, len(events)) == ("budget_reached", 1, 1)
    assert report.realised_bytes <= report.target_bytes < report.start_bytes
    # The call cap holds even with pairs left.
    capped = RefinePlanner(rows, neighbours, Budget(max_bytes=0), "r", max_calls=2)
    _, seen = drive(capped, preserve)
    assert len(seen) == 2 and capped.report().stop_reason == "call_cap"


def test_refine_with_the_rule_judge_on_embeddings():
    rng = np.random.default_rng(3)
    base = rng.normal(size=32)
    texts = ["Launch is on Friday.", "Launch is on Friday. Venue: hall B.", "Hiring plan for Q3.", "Canteen menu."]
    vectors = [base, base + rng.normal(scale=0.05, size=32), rng.normal(size=32), rng.normal(size=32)]
    vectors = [v / np.linalg.norm(v) for v in vectors]
    rows = [mk(f"r{i}", i, t) for i, t in enumerate(texts)]
    matrix = np.stack(vectors)

    def neighbours(row_id: str) -> list[tuple[str, float]]:
        i = int(row_id[1:])
        sims = matrix @ matrix[i]
        return [(f"r{j}", float(sims[j])) for j in np.argsort(-sims)[:3] if j != i]

    judge = RuleJudge()
    planner = RefinePlanner(rows, neighbours, Budget(fraction=0.8), "run7", judge=judge.name)
    events, _ = drive(planner, lambda c: judge.judge_pair(c.a, c.b, c.similarity))
    assert [(type(e).__name__, e.row_id) for e in events] == [("RowArchived", "r0")]  # the less informative
    report = planner.report()
    assert report.decisions["delete"] == 1 and report.stop_reason in {"budget_reached", "no_candidates"}


# -- revert ------------------------------------------------------------------------------------


def fold(state: dict[str, tuple[str, str | None]], events: list[Event]) -> dict[str, tuple[str, str | None]]:
    """A tiny projection: row id -> (state, superseded_by)."""
    state = dict(state)
    for event in events:
        if isinstance(event, RowDerived):
            state[event.row_id] = ("active", None)
        elif isinstance(event, RowArchived):
            state[event.row_id] = ("archived", state[event.row_id][1])
        elif isinstance(event, RowSuperseded):
            state[event.row_id] = ("active", event.superseded_by)
        elif isinstance(event, RowRestored):
            state[event.row_id] = ("active", None)
    return state


def test_a_run_followed_by_its_inverse_leaves_the_store_as_before():
    rows = [
        mk("v1", 1, "Price is 10 EUR.", event_time=T0),
        mk("v2", 2, "Price is 12 EUR.", event_time=T0 + timedelta(days=9)),
        mk("s1", 3, "Standup at nine."), mk("s2", 4, "Standup at nine!"),
        mk("m1", 5, "Alpha ships."), mk("m2", 6, "Beta ships."), mk("d1", 7, "Gamma."), mk("d2", 8, "Gamma!"),
        mk("old", 9, "Kept as archived.", state="archived"),
    ]  # fmt: skip
    before = {r.row_id: (r.state, r.superseded_by) for r in rows}
    run: list[Event] = []
    run += plan_group(rows[0:2], GroupLabel("conflict"), None, "run1")
    run += plan_group(rows[2:4], GroupLabel("restatement"), "Standup at nine.", "run1")
    sims = {("m1", "m2"): 0.93, ("d1", "d2"): 0.97}
    planner = RefinePlanner(rows[4:], table_neighbours(sims), Budget(max_bytes=0), "run1")
    decisions = {("d1", "d2"): PairDecision("delete", keep="d1", archive="d2"),
                 ("m1", "m2"): PairDecision("merge", merged_text="Alpha and Beta ship.")}  # fmt: skip
    run += drive(planner, lambda c: decisions[c.key])[0]
    derived_ids = [e.row_id for e in run if isinstance(e, RowDerived)]
    # Then a later step of the same run archives one of its own merged rows.
    run.append(RowArchived(tenant="acme", row_id=derived_ids[0], run_id="run1", reason="test"))

    def active(state: dict[str, tuple[str, str | None]]) -> dict[str, str | None]:
        return {rid: sup for rid, (st, sup) in state.items() if st == "active"}

    after = fold(before, run)
    assert active(after) != active(before)  # the run did change things
    assert after["v1"] == ("active", "v2") and after["d2"][0] == "archived"
    undo = inverse_events(run, "revert1")
    assert all(e.run_id == "revert1" and e.tenant == "acme" and e.reason for e in undo)
    restored = fold(after, undo)
    assert active(restored) == active(before)
    assert all(restored[d][0] == "archived" for d in derived_ids)

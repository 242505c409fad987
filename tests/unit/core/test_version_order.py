"""Newer versions first (services.core.version_order) and its place in the read path's ranking, and
the reach: a closer, later restatement just past the first rows comes in."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from services.core.ranking import NEWER_VERSION_REASON, RowFields, order_versions, rank, version_rows
from services.core.retrieval_config import PRESETS, RetrievalConfig
from services.core.version_order import COPY_SIMILARITY, newer_versions_first, with_reached_versions
from services.errors import Invalid


def unit(*angles_deg: float) -> np.ndarray:
    """Unit vectors in the plane at the given angles: cosine = cos(angle difference)."""
    radians = np.radians(angles_deg)
    return np.stack([np.cos(radians), np.sin(radians)], axis=1).astype(np.float32)


def when(year: int, position: int = 0) -> tuple[datetime, int]:
    return (datetime(year, 1, 1, tzinfo=UTC), position)


def test_a_newer_restatement_moves_up_to_the_slot_of_the_version_it_replaced():
    # v1 (2020) ranks first, v3 (2024) restates it at rank 3; "x" is unrelated and keeps its slot.
    ids = ["v1", "x", "v3"]
    order = newer_versions_first(ids, {"v1": when(2020), "x": when(2010), "v3": when(2024)}, unit(0, 90, 10), 0.9)
    assert order == ["v3", "v1", "x"]


def test_unrelated_rows_keep_the_selectors_order_even_when_newer():
    ids = ["old", "new"]
    # cos(60 degrees) = 0.5, under the similarity: not versions of one statement.
    assert newer_versions_first(ids, {"old": when(2019), "new": when(2025)}, unit(0, 60), 0.9) == ["old", "new"]
    # A similarity above every cosine links nothing, however dated.
    assert newer_versions_first(ids, {"old": when(2019), "new": when(2025)}, unit(0, 0), 1.01) == ["old", "new"]


def test_a_chain_of_three_versions_comes_out_newest_first_and_every_linked_pair_is_in_date_order():
    ids = ["v2", "a", "v1", "b", "v3"]
    recency = {"v2": when(2021), "a": when(2000), "v1": when(2020), "b": when(2001), "v3": when(2022)}
    vectors = unit(5, 90, 0, 180, 10)  # v1, v2, v3 within 10 degrees; a and b far from them and each other
    order = newer_versions_first(ids, recency, vectors, 0.95)
    assert order == ["v3", "v2", "a", "v1", "b"]
    cosines = vectors @ vectors.T
    for i, first in enumerate(ids):
        for j, second in enumerate(ids):
            if i != j and cosines[i, j] >= 0.95 and recency[first] > recency[second]:
                assert order.index(first) < order.index(second)


def test_ties_in_date_break_by_ingest_position_so_the_later_ingested_goes_first():
    ids = ["first-ingested", "later-ingested"]
    recency = {"first-ingested": when(2024, 1), "later-ingested": when(2024, 2)}
    assert newer_versions_first(ids, recency, unit(0, 0), 0.9) == ["later-ingested", "first-ingested"]


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="twice"):
        newer_versions_first(["a", "a"], {"a": when(2020)}, unit(0, 0), 0.9)
    with pytest.raises(ValueError, match="one per row"):
        newer_versions_first(["a", "b"], {"a": when(2020), "b": when(2021)}, unit(0), 0.9)
    assert newer_versions_first([], {}, np.zeros((0, 2)), 0.9) == []


@pytest.mark.parametrize("changes", [{"version_similarity": -0.1}, {"version_similarity": 1.5}, {"version_rows": -1}])
def test_the_config_refuses_settings_outside_their_range(changes):
    with pytest.raises(Invalid):
        RetrievalConfig(**changes)


ROWS = {rid: RowFields(None, pos, when(year, pos)) for rid, pos, year in
        (("v1", 1, 2020), ("x", 2, 2018), ("v2", 3, 2024), ("w", 4, 2017))}
VECTORS = {"v1": unit(0)[0], "x": unit(90)[0], "v2": unit(3)[0], "w": unit(200)[0]}
LEGS = {"lex": [("v1", 9.0), ("x", 8.0), ("v2", 7.0), ("w", 6.0)]}


def vectors_for(ids):
    return np.stack([VECTORS[r] for r in ids])


def ranked(kinds=None, asked_for=frozenset(), **changes) -> list[tuple[str, str]]:
    run = RetrievalConfig(weights={"lex": 1.0, "tag": 0.0, "vec": 0.0}, k=3, reserve=0, **changes)
    picks = rank(LEGS, ROWS, None, vectors_for, run, []).picks
    if wanted := version_rows(picks, run):
        picks = order_versions(picks, ROWS, vectors_for(wanted), kinds or {}, run, asked_for=asked_for)
    return [(p.row_id, p.reason) for p in picks]


def test_the_read_path_orders_newer_versions_first_only_when_asked_and_keeps_each_picks_reason():
    assert version_rows(rank(LEGS, ROWS, None, vectors_for, RetrievalConfig(k=3), []).picks, RetrievalConfig()) == []
    assert ranked() == [("v1", "fused"), ("x", "fused"), ("v2", "fused")]
    assert ranked(version_similarity=0.99) == [("v2", "fused"), ("v1", "fused"), ("x", "fused")]


def test_only_the_first_version_rows_are_reordered_and_the_rest_stay_as_ranked():
    # v1 and v2 are versions of one statement; with only the first two rows looked at, v2 (third) stays put.
    assert ranked(version_similarity=0.99, version_rows=2) == [("v1", "fused"), ("x", "fused"), ("v2", "fused")]
    assert ranked(version_similarity=0.99, version_rows=3) == [("v2", "fused"), ("v1", "fused"), ("x", "fused")]


def test_a_chat_turn_is_nobodys_version():
    # A later turn on the same subject goes on talking: it keeps its place.
    assert ranked({"v1": "chat", "v2": "chat"}, version_similarity=0.99) == [("v1", "fused"), ("x", "fused"), ("v2", "fused")]
    assert ranked({"v1": "email", "v2": "chat"}, version_similarity=0.99)[0] == ("v1", "fused")
    assert ranked({"v1": "email", "v2": "meeting"}, version_similarity=0.99)[0] == ("v2", "fused")


def test_linkable_leaves_an_unlinkable_row_in_its_place():
    ids = ["v1", "x", "v2"]
    recency = {"v1": when(2020), "x": when(2010), "v2": when(2024)}
    assert newer_versions_first(ids, recency, unit(0, 90, 1), 0.9, [True, True, False]) == ids
    with pytest.raises(ValueError, match="linkable"):
        newer_versions_first(ids, recency, unit(0, 90, 1), 0.9, [True])


def test_the_default_preset_orders_versions_and_the_paper_preset_does_not():
    assert PRESETS["default"].version_similarity > 0
    assert PRESETS["paper-orgmembench"].version_similarity == 0
    assert PRESETS["conversational-coverage"].version_similarity == 0


def test_a_close_later_restatement_past_the_window_moves_up_above_the_version_it_restates():
    # old (2020) is in the window of 2; new (2024) restates it at cos(20 degrees) = 0.94, just past it.
    ids = ["old", "x", "new", "far"]
    recency = {"old": when(2020), "x": when(2010), "new": when(2024), "far": when(2025)}
    order = with_reached_versions(ids, 2, recency, unit(0, 90, 20, 200), 0.65, 0.85)
    assert order == ["new", "old", "x", "far"]
    # Under the reach's own similarity it stays where the selector put it.
    assert with_reached_versions(ids, 2, recency, unit(0, 90, 40, 200), 0.65, 0.85) == ids


def test_the_reach_takes_neither_an_older_restatement_nor_a_chat_turn_nor_a_copy():
    ids = ["row", "x", "candidate"]
    older = {"row": when(2024), "x": when(2010), "candidate": when(2020)}
    assert with_reached_versions(ids, 2, older, unit(0, 90, 20), 0.65, 0.85) == ids
    newer = {"row": when(2020), "x": when(2010), "candidate": when(2024)}
    assert with_reached_versions(ids, 2, newer, unit(0, 90, 20), 0.65, 0.85, [True, True, False]) == ids
    # The same text again (a forward, the same mail in two mailboxes) repeats the row: not brought in.
    assert np.cos(np.radians(1)) >= COPY_SIMILARITY
    assert with_reached_versions(ids, 2, newer, unit(0, 90, 1), 0.65, 0.85) == ids


def test_of_two_copies_past_the_window_only_the_first_comes_in():
    ids = ["old", "x", "copy-a", "copy-b"]
    recency = {"old": when(2020), "x": when(2010), "copy-a": when(2024), "copy-b": when(2024, 1)}
    assert with_reached_versions(ids, 2, recency, unit(0, 90, 20, 20), 0.65, 0.85) == ["copy-a", "old", "x", "copy-b"]


def test_the_reach_refuses_a_window_it_does_not_have():
    with pytest.raises(ValueError, match="window"):
        with_reached_versions(["a"], 2, {"a": when(2020)}, unit(0), 0.65, 0.85)


REACH_ROWS = {rid: RowFields(None, pos, when(year, pos)) for rid, pos, year in
              (("v1", 1, 2020), ("x", 2, 2018), ("y", 3, 2017), ("v2", 4, 2024))}
REACH_VECTORS = {"v1": unit(0)[0], "x": unit(90)[0], "y": unit(200)[0], "v2": unit(20)[0]}
REACH_LEGS = {"lex": [("v1", 9.0), ("x", 8.0), ("y", 7.0), ("v2", 6.0)]}


def reached(k: int, asked_for=frozenset(), **changes) -> list[tuple[str, str]]:
    run = RetrievalConfig(weights={"lex": 1.0, "tag": 0.0, "vec": 0.0}, k=k, reserve=0, version_similarity=0.65,
                          version_rows=2, **changes)
    ranking = rank(REACH_LEGS, REACH_ROWS, None, lambda ids: np.stack([REACH_VECTORS[r] for r in ids]), run, [])
    picks = ranking.picks
    if wanted := version_rows(picks, run, ranking.following):
        picks = order_versions(picks, REACH_ROWS, np.stack([REACH_VECTORS[r] for r in wanted]), {}, run,
                               ranking.following, asked_for)
    return [(p.row_id, p.reason) for p in picks]


def test_the_read_path_brings_a_newer_version_in_from_past_k_and_keeps_k_rows():
    # v2 restates v1 (cos 0.94, four years later) at rank 4: out of reach with reach 1, in with reach 2.
    assert reached(3, version_reach=1) == [("v1", "fused"), ("x", "fused"), ("y", "fused")]
    assert reached(3, version_reach=2) == [("v2", NEWER_VERSION_REASON), ("v1", "fused"), ("x", "fused")]
    # Already among the k rows, it moves up and keeps its own reason; without a reach it stays put.
    assert reached(4, version_reach=2) == [("v2", "fused"), ("v1", "fused"), ("x", "fused"), ("y", "fused")]
    assert reached(4) == [("v1", "fused"), ("x", "fused"), ("y", "fused"), ("v2", "fused")]
    # One row asked for: the version in force is the one row returned.
    assert reached(1, version_reach=3) == [("v2", NEWER_VERSION_REASON)]
    assert reached(3, version_reach=2, version_reach_similarity=0.95) == [("v1", "fused"), ("x", "fused"), ("y", "fused")]


def test_a_row_asked_for_by_its_author_keeps_its_place_and_is_never_pushed_out():
    # "What did v1's author decide": v1 is what was asked, not history to put below v2.
    assert ranked(version_similarity=0.99) == [("v2", "fused"), ("v1", "fused"), ("x", "fused")]
    assert ranked(version_similarity=0.99, asked_for={"v1"}) == [("v1", "fused"), ("x", "fused"), ("v2", "fused")]
    # Nor does a newer version restating it come in from past k.
    assert reached(3, version_reach=2, asked_for={"v1"}) == [("v1", "fused"), ("x", "fused"), ("y", "fused")]
    # Another row asked for, pushed out by v2 coming in for v1: it comes back and v2 makes way.
    assert reached(3, version_reach=2) == [("v2", NEWER_VERSION_REASON), ("v1", "fused"), ("x", "fused")]
    assert reached(3, version_reach=2, asked_for={"y"}) == [("v1", "fused"), ("x", "fused"), ("y", "fused")]
    # Rows asked for that are no pick change nothing.
    assert reached(3, version_reach=2, asked_for={"elsewhere"}) == reached(3, version_reach=2)


@pytest.mark.parametrize("changes", [{"version_reach": -1}, {"version_reach_similarity": 1.2}])
def test_the_config_refuses_a_reach_outside_its_range(changes):
    with pytest.raises(Invalid):
        RetrievalConfig(**changes)


def test_the_default_preset_reaches_three_rows_at_a_cosine_of_085():
    assert (PRESETS["default"].version_reach, PRESETS["default"].version_reach_similarity) == (3, 0.85)
    assert PRESETS["paper-orgmembench"].version_similarity == 0.0  # the paper's read path has no version order

from datetime import UTC, datetime

from services.core.reserve import with_recency_reserve


def key(year, pos):
    return (datetime(year, 1, 1, tzinfo=UTC), pos)


def test_k_minus_three_by_order_then_three_latest_dated_remaining():
    ordered = ["a", "b", "c", "d", "e", "f", "g"]
    recency = {"a": key(2020, 1), "b": key(2021, 2), "c": key(2019, 3), "d": key(2018, 4),
               "e": key(2025, 5), "f": key(2024, 6), "g": key(2023, 7)}
    picks = with_recency_reserve(ordered, ordered, k=5, reserve=3, recency=recency, unmatched_recent=[])
    assert [p.row_id for p in picks] == ["a", "b", "e", "f", "g"]
    assert [p.reason for p in picks] == ["fused", "fused", "reserve", "reserve", "reserve"]


def test_reserve_filled_from_unmatched_when_few_matched_remain():
    recency = {"a": key(2020, 1), "b": key(2021, 2), "c": key(2022, 3)}
    picks = with_recency_reserve(["a", "b", "c"], ["a", "b", "c"], k=5, reserve=3, recency=recency,
                                 unmatched_recent=["u9", "a", "u8", "u7"])
    assert [p.row_id for p in picks] == ["a", "b", "c", "u9", "u8"]
    assert [p.reason for p in picks][-2:] == ["reserve_fill", "reserve_fill"]


def test_small_k_is_all_reserve_and_zero_k_is_empty():
    recency = {"a": key(2020, 1), "b": key(2021, 2)}
    assert [p.row_id for p in with_recency_reserve(["a", "b"], ["a", "b"], 2, 3, recency, [])] == ["b", "a"]
    assert with_recency_reserve(["a"], ["a"], 0, 3, recency, []) == []


def test_undated_rows_use_ingest_time_in_the_key():
    # The caller builds the key from event time or, for undated rows, ingest time; ties by position.
    recency = {"x": key(2024, 1), "y": key(2024, 2)}
    picks = with_recency_reserve([], ["x", "y"], 3, 3, recency, [])
    assert [p.row_id for p in picks] == ["y", "x"]

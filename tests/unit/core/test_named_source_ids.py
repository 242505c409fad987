"""A query that names a document by its source id (services.core.text.named_source_ids) and the
ranking that puts those rows first (services.core.ranking.with_named_first)."""

from __future__ import annotations

from datetime import UTC, datetime

from services.core.ranking import NAMED_LEG, NAMED_REASON, RowFields, rank
from services.core.retrieval_config import PRESETS, RetrievalConfig
from services.core.text import MAX_NAMED_IDS, named_source_ids


def test_message_ids_ticket_keys_and_addresses_are_named_as_written():
    asked = ("Open the email with Message-ID <11700608.1075840047233.JavaMail.evans@thyme> (inbox). "
             "Was OPS-142 closed on 2025-09-03, as ann@corp.example said in May 2023? See 'PRJ-7'.")
    assert named_source_ids(asked) == ["11700608.1075840047233.JavaMail.evans@thyme", "OPS-142", "2025-09-03",
                                       "ann@corp.example", "PRJ-7"]


def test_words_years_and_short_numbers_are_not_ids():
    assert named_source_ids("What did the team decide in 2023 about the 3 vendors and Q3?") == []


def test_hostile_queries_name_a_bounded_number_of_bounded_strings():
    assert named_source_ids("") == [] and named_source_ids("<>") == [] and named_source_ids("@@@@") == ["@@@@"]
    many = named_source_ids(" ".join(f"T-{i}" for i in range(10_000)))
    assert many == [f"T-{i}" for i in range(10, 10 + MAX_NAMED_IDS)]  # T-0 … T-9 are three characters
    assert named_source_ids("9" * 100_000) == []  # longer than any source id a connector writes
    assert named_source_ids("x1\u0000y2 \u202eA-12") == ["x1\u0000y2", "\u202eA-12"]  # looked up as is, never run


ROWS = {rid: RowFields(None, pos, (datetime(2025, 1, pos, tzinfo=UTC), pos))
        for rid, pos in (("a", 1), ("b", 2), ("c", 3), ("n", 4), ("m", 5))}


def picks(named, k=3, on=True) -> list[tuple[str, str]]:
    config = RetrievalConfig(weights={"lex": 1.0, "tag": 0.0, "vec": 1.0}, k=k, reserve=0, named_rows=on)
    legs = {"lex": [("a", 3.0), ("b", 2.0), ("n", 1.0)], "vec": [("c", 0.9)], NAMED_LEG: named}
    return [(p.row_id, p.reason) for p in rank(legs, ROWS, None, lambda ids: None, config, []).picks]


def test_named_rows_come_first_once_and_k_rows_in_all():
    fused = [rid for rid, _ in picks([], k=4)]
    assert sorted(fused) == ["a", "b", "c", "n"]
    rest = [rid for rid in fused if rid != "n"]  # "n" was fused too: it is not returned twice
    assert picks([("n", 1.0), ("m", 1.0)], k=4) == [("n", NAMED_REASON), ("m", NAMED_REASON),
                                                     (rest[0], "fused"), (rest[1], "fused")]
    assert picks([("n", 1.0), ("m", 1.0), ("a", 1.0), ("b", 1.0)]) == [("n", "named"), ("m", "named"), ("a", "named")]


def test_a_named_row_without_ranking_fields_or_with_the_rule_off_changes_nothing():
    assert picks([("ghost", 1.0)]) == picks([])  # the store no longer admits it
    assert picks([("m", 1.0)], on=False) == picks([])
    assert "named" not in {reason for _, reason in picks([], k=5)}


def test_only_the_default_preset_names_rows():
    assert PRESETS["default"].named_rows
    assert not any(config.named_rows for name, config in PRESETS.items() if name != "default")

"""The pure part of the MCP tools: a thread's versions and the changes in a window."""

from __future__ import annotations

from datetime import UTC, datetime

from schemas.rows import Row, RowChange
from services.mcp import timeline

T0 = datetime(2026, 1, 1, tzinfo=UTC)  # ingest time of every row below


def row(row_id: str, date: str | None, position: int, **fields) -> Row:
    event_time = datetime.fromisoformat(date).replace(tzinfo=UTC) if date else None
    fields = {"text": f"text of {row_id}", "author": f"{row_id}@x.example", "thread": "th", **fields}
    return Row(row_id=row_id, tenant="t", event_time=event_time, ingest_position=position, ingested_at=T0, **fields)


def at(date: str) -> datetime:
    return datetime.fromisoformat(date).replace(tzinfo=UTC)


def test_versions_are_the_active_rows_in_date_order_and_archived_rows_are_listed_without_a_number():
    rows = [row("c", "2025-09-01", 3), row("a", "2025-03-01", 1), row("b", "2025-06-01", 2, state="archived"),
            row("u", None, 4)]  # undated: at its ingest time, after every 2025 row
    listed = timeline.versions(rows)
    assert [v["row_id"] for v in listed] == ["a", "b", "c", "u"]
    assert [v["version"] for v in listed] == [1, None, 2, 3] and {v["of"] for v in listed} == {3}
    assert listed[0]["superseded_by"] == "c" and listed[0]["superseded_on"].startswith("2025-09-01")
    assert listed[1]["superseded_by"] is None and listed[1]["state"] == "archived"
    assert [v["latest"] for v in listed] == [False, False, False, True]


def test_long_texts_are_clipped_and_say_so():
    long = row("a", "2025-01-01", 1, text="x" * (timeline.VERSION_TEXT_CHARS + 1))
    (listed,) = timeline.versions([long])
    assert len(listed["text"]) == timeline.VERSION_TEXT_CHARS and listed["text_truncated"]


def test_changes_in_a_window_and_a_contradiction_by_a_row_the_caller_cannot_read():
    a, b = row("a", "2025-03-01", 1), row("b", "2025-06-01", 2)
    histories = {"a": [RowChange(position=1, at=T0, change="observed", state="active"),
                       RowChange(position=9, at=at("2026-02-01"), change="superseded", state="active",
                                 superseded_by="hidden", reason="conflict")]}
    june = timeline.changes([a, b], histories, {"a": a, "b": b}, at("2025-05-01"), at("2025-07-01"))
    assert [(c["change"], c["row_id"]) for c in june] == [("added", "b"), ("superseded", "a")]
    assert june[0]["supersedes"] == "a" and june[1]["superseded_by"] == "b"
    # "hidden" is not readable: the contradiction is dated when it was recorded, its author unnamed.
    february = timeline.changes([a, b], histories, {"a": a, "b": b}, at("2026-01-15"), at("2026-03-01"))
    assert [(c["change"], c["contradicted_by"], c["contradicted_by_author"]) for c in february] == \
        [("contradicted", "hidden", None)]
    assert timeline.changes([a, b], histories, {"a": a, "b": b}, at("2024-01-01"), at("2025-01-01")) == []

"""A query reads the ranking fields (RowHead) of about a hundred candidate rows. In the embedded
row store they come from the covering index `rows_heads`, never from the wide rows: the text lies
before them in each record, and reaching past a text that spilled into overflow pages walks them
(the lexical leg's rows cost 8 ms at 100k rows with the page cache cold)."""

from __future__ import annotations

import sqlite3

from services.adapters.row_store.sqlite import SqliteRowStore
from tests.contract.test_row_store import make_row, observed


def statements_of(store: SqliteRowStore, call) -> list[str]:
    seen: list[str] = []
    store._conn.set_trace_callback(seen.append)
    try:
        call()
    finally:
        store._conn.set_trace_callback(None)
    return [s for s in seen if s.lstrip().upper().startswith("SELECT")]


def test_heads_are_read_from_the_covering_index_even_for_rows_with_long_texts(tmp_path):
    store = SqliteRowStore(tmp_path / "rows.sqlite")
    long = "word " * 40_000  # 200 kB: dozens of overflow pages
    rows = [make_row(i, text=long if i % 2 else "short", thread=f"th{i % 3}") for i in range(1, 9)]
    store.apply([observed(row) for row in rows], [], 8)
    wanted = ["r1", "r2", "r7", "nowhere"]

    heads = store.heads(wanted)
    assert set(heads) == {"r1", "r2", "r7"}
    for row in rows:
        if row.row_id in heads:
            head = heads[row.row_id]
            assert (head.thread, head.ingest_position, head.event_time, head.ingested_at) == (
                row.thread, row.ingest_position, row.event_time, row.ingested_at)

    [statement] = statements_of(store, lambda: store.heads(wanted))
    plan = " ".join(str(step[-1]) for step in store._conn.execute(f"EXPLAIN QUERY PLAN {statement}"))
    assert "COVERING INDEX rows_heads" in plan, plan
    store.close()


def test_a_store_written_before_the_index_gains_it_when_opened(tmp_path):
    path = tmp_path / "rows.sqlite"
    store = SqliteRowStore(path)
    store.apply([observed(make_row(1)), observed(make_row(2))], [], 2)
    store.close()
    old = sqlite3.connect(path)
    old.execute("DROP INDEX rows_heads")
    old.commit()
    old.close()

    reopened = SqliteRowStore(path)
    assert set(reopened.heads(["r1", "r2"])) == {"r1", "r2"}
    reopened.close()

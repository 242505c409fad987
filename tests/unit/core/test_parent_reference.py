"""A document's `parent` (the source id of the message or ticket it came inside) and the row's
`parent` (that document's row id): validated on the way in, computed at write time, replayed from
logs written before the field, stored by SQLite stores created before the column."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from schemas.documents import MAX_SOURCE_ID_CHARS, DocumentIn
from schemas.events import DocumentObserved, LoggedEvent, event_from_json, event_to_json
from services.core.write_path import RowChange, RowMutation, plan_batch
from services.core.write_rules import parent_row_id, row_id_for
from tests.unit.core.test_write_path import FakeRows

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _attachment(**fields) -> DocumentIn:
    return DocumentIn(text="minutes of the board", source="email", source_id="m1@x#attachment/1/a.txt",
                      parent="m1@x", **fields)


def test_parent_needs_a_source_id_and_is_never_the_document_itself():
    with pytest.raises(ValidationError, match="parent: only with source_id"):
        DocumentIn(text="x", source="email", parent="m1@x")
    with pytest.raises(ValidationError, match="its own parent"):
        DocumentIn(text="x", source="email", source_id="m1@x", parent="m1@x")
    with pytest.raises(ValidationError):
        DocumentIn(text="x", source="email", source_id="a", parent="")
    with pytest.raises(ValidationError):
        DocumentIn(text="x", source="email", source_id="a", parent="p" * (MAX_SOURCE_ID_CHARS + 1))
    assert _attachment().parent == "m1@x"


def test_the_row_names_its_parents_row_id_whether_or_not_that_row_is_stored():
    doc = _attachment()
    event = DocumentObserved(tenant="acme", row_id=row_id_for("acme", doc), document=doc)
    plan = plan_batch([LoggedEvent(position=1, appended_at=T0, event=event)], FakeRows())
    (row,) = plan.new_rows
    message = DocumentIn(text="the message", source="email", source_id="m1@x")
    assert row.parent == row_id_for("acme", message) == parent_row_id("acme", doc)
    # Same parent source id in another source is another row.
    assert parent_row_id("acme", doc.model_copy(update={"source": "jira"})) != row.parent


def test_a_log_event_written_before_the_field_replays_with_no_parent():
    doc = DocumentIn(text="old mail", source="email", source_id="old@x")
    data = json.loads(event_to_json(DocumentObserved(tenant="acme", row_id=row_id_for("acme", doc), document=doc)))
    del data["document"]["parent"]  # as an earlier orgmem wrote it
    event = event_from_json(json.dumps(data))
    plan = plan_batch([LoggedEvent(position=1, appended_at=T0, event=event)], FakeRows())
    assert plan.new_rows[0].parent is None and plan.new_rows[0].source_id == "old@x"


def _stored_row(position: int, doc: DocumentIn):
    event = DocumentObserved(tenant="acme", row_id=row_id_for("acme", doc), document=doc)
    plan = plan_batch([LoggedEvent(position=position, appended_at=T0, event=event)], FakeRows())
    return plan.new_rows[0]


def test_a_sqlite_store_from_before_the_column_opens_and_reads_its_rows_without_parent(tmp_path):
    from services.adapters.row_store.sqlite import SqliteRowStore

    path = tmp_path / "rows.sqlite"
    old = _stored_row(1, DocumentIn(text="old mail", source="email", source_id="old@x"))
    store = SqliteRowStore(path)
    store.apply([RowMutation(old, RowChange(position=1, at=T0, change="observed", state="active"))], [], 1)
    store.close()
    conn = sqlite3.connect(path)  # the rows table as an earlier orgmem made it
    conn.executescript("ALTER TABLE rows DROP COLUMN parent;")
    assert "parent" not in {c[1] for c in conn.execute("PRAGMA table_info(rows)")}
    conn.close()
    store = SqliteRowStore(path)
    try:
        assert store.get(old.row_id).parent is None and store.get(old.row_id).text == "old mail"
        new = _stored_row(2, _attachment())
        store.apply([RowMutation(new, RowChange(position=2, at=T0, change="observed", state="active"))], [], 2)
        assert store.get(new.row_id).parent == new.parent is not None
        assert store.get_many([new.row_id])[new.row_id].parent == new.parent
    finally:
        store.close()


def test_parquet_exports_carry_the_parent_column(tmp_path):
    import pyarrow.parquet as pq

    from services.adapters.data_folder.export_files import ParquetFile
    from services.app.export import export_record

    row = _stored_row(1, _attachment())
    sink = ParquetFile(tmp_path / "rows.parquet")
    sink.write([export_record(row, [])])
    sink.close()
    table = pq.read_table(tmp_path / "rows.parquet")
    assert table.column("parent").to_pylist() == [row.parent]

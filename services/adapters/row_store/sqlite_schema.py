"""The embedded row store's tables, its checkpoint keys, and the migrations of a store written by an
earlier orgmem.

Opened once per store: the tables and indexes are created if missing, erased bytes are zeroed
where they lay (`secure_delete`), and a store from before a column existed gains it, filled in
from what it already holds.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from services.adapters.sqlite_common import open_with_schema, translated
from services.core.positions import lane_of

# Driver errors are the storage failing: BackendUnavailable(COMPONENT), answered 503.
COMPONENT = "row store (sqlite)"

SCHEMA = """
CREATE TABLE IF NOT EXISTS rows (
    row_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, text TEXT NOT NULL, author TEXT NOT NULL,
    author_scope TEXT NOT NULL, content_hash TEXT NOT NULL, event_time TEXT, kind TEXT NOT NULL,
    thread TEXT, title TEXT, tags TEXT NOT NULL, participants TEXT NOT NULL, acl TEXT NOT NULL,
    source TEXT, source_id TEXT, ingest_position INTEGER NOT NULL, ingested_at TEXT NOT NULL,
    state TEXT NOT NULL, superseded_by TEXT, derived_from TEXT NOT NULL,
    state_position INTEGER NOT NULL DEFAULT 0, parent TEXT
);
CREATE INDEX IF NOT EXISTS rows_recent ON rows(tenant, ingest_position);
CREATE INDEX IF NOT EXISTS rows_text ON rows(tenant, author_scope, content_hash, state);
CREATE INDEX IF NOT EXISTS rows_thread ON rows(tenant, thread);
-- Covers what versions_of reads of a thread's rows, so that a query's versions never load the wide
-- rows (their texts): a third of the time for the ~700 rows of a k = 50 answer's threads.
CREATE INDEX IF NOT EXISTS rows_versions ON rows(tenant, thread, event_time, ingested_at, ingest_position, state,
    superseded_by, acl, row_id);
-- Covers a RowHead (row_store/sqlite.py heads()), so that the ranking fields of a query's ~100
-- candidates never load the wide rows: the text lies before them in each record, and a text that
-- spills into overflow pages is walked to reach the columns after it.
CREATE INDEX IF NOT EXISTS rows_heads ON rows(row_id, thread, ingest_position, event_time, ingested_at);
CREATE UNIQUE INDEX IF NOT EXISTS rows_source ON rows(tenant, source, source_id) WHERE source_id IS NOT NULL;
-- A query that names a source id of any source (a Message-ID, a ticket key) finds its rows:
-- row_store/sqlite.py named().
CREATE INDEX IF NOT EXISTS rows_source_id ON rows(tenant, source_id) WHERE source_id IS NOT NULL;
CREATE TABLE IF NOT EXISTS row_acl (row_id TEXT NOT NULL, token TEXT NOT NULL, PRIMARY KEY (row_id, token));
CREATE INDEX IF NOT EXISTS row_acl_token ON row_acl(token, row_id);
CREATE TABLE IF NOT EXISTS history (
    row_id TEXT NOT NULL, position INTEGER NOT NULL, at TEXT NOT NULL, change TEXT NOT NULL,
    state TEXT NOT NULL, superseded_by TEXT, run_id TEXT, reason TEXT NOT NULL,
    PRIMARY KEY (row_id, position)
);
CREATE INDEX IF NOT EXISTS history_changes ON history(change, row_id);
CREATE TABLE IF NOT EXISTS skipped (
    row_id TEXT NOT NULL, position INTEGER NOT NULL, reason TEXT NOT NULL, duplicate_of TEXT, tenant TEXT,
    PRIMARY KEY (row_id, position)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def open_row_store(path: Path) -> sqlite3.Connection:
    """A connection to the store at `path`, its tables current."""
    conn = open_with_schema(path, SCHEMA, COMPONENT)
    with translated(COMPONENT):
        # An erased row's bytes are zeroed where they lay, not left in a free page (erase()).
        conn.execute("PRAGMA secure_delete=ON")
        _add_skip_tenants(conn)
        _add_state_positions(conn)
        _add_parents(conn)
    return conn


def _add_skip_tenants(conn: sqlite3.Connection) -> None:
    """A store written before skips carried their tenant gains the column; a repeat takes the
    tenant of the row it repeats. An old empty skip keeps none (counted only over all tenants;
    `orgmem rebuild` attributes it)."""
    columns = {c[1] for c in conn.execute("PRAGMA table_info(skipped)")}
    if "tenant" not in columns:
        conn.executescript(
            "BEGIN; ALTER TABLE skipped ADD COLUMN tenant TEXT; UPDATE skipped SET tenant = "
            "(SELECT r.tenant FROM rows r WHERE r.row_id = skipped.duplicate_of); COMMIT;")


def _add_state_positions(conn: sqlite3.Connection) -> None:
    """A store written before rows carried the position of their state gains the column: the
    position of each row's last step, or its ingest position."""
    columns = {c[1] for c in conn.execute("PRAGMA table_info(rows)")}
    if "state_position" not in columns:
        conn.executescript(
            "BEGIN; ALTER TABLE rows ADD COLUMN state_position INTEGER NOT NULL DEFAULT 0; "
            "UPDATE rows SET state_position = COALESCE((SELECT MAX(h.position) FROM history h "
            "WHERE h.row_id = rows.row_id), ingest_position); COMMIT;")


def _add_parents(conn: sqlite3.Connection) -> None:
    """A store written before rows named their parent (the message or ticket an attachment came
    in) gains the column, empty: no row from before then was an attachment document."""
    columns = {c[1] for c in conn.execute("PRAGMA table_info(rows)")}
    if "parent" not in columns:
        conn.execute("ALTER TABLE rows ADD COLUMN parent TEXT")


# The checkpoint only moves forward. Both sides are integers: SQLite orders any text above any
# integer, so MAX(integer, text) kept the text, and a late writer moved the checkpoint back.
# One checkpoint per lane of the log (services.core.positions): lane 0 keeps the key it always had.
_ADVANCE_CHECKPOINT = ("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                       "SET value = MAX(CAST(value AS INTEGER), CAST(excluded.value AS INTEGER))")
CHECKPOINT_KEY = "applied_position"


def checkpoint_key(lane: int) -> str:
    return CHECKPOINT_KEY if lane == 0 else f"{CHECKPOINT_KEY}:{lane}"


def advance(conn: sqlite3.Connection, position: int) -> None:
    conn.execute(_ADVANCE_CHECKPOINT, (checkpoint_key(lane_of(position)), str(position)))

"""The embedded row store: rows, their state history and the projection checkpoint in SQLite.

A projected batch and the log position it reaches commit in one transaction, so after a crash
the store is exactly at some position and the indexer resumes from there.

Each row keeps the log position of the event that produced its state (`state_position`); a
write replaces a row's state only with one from a higher position, and never brings back a row
erased at a later position: a stalled indexer that wakes after another has applied newer events
(two indexers over one store, as in the cluster tests) cannot put an older state back. The
checkpoint only moves forward.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path

from schemas.rows import Row, RowChange
from services.adapters.row_store.sqlite_schema import (
    CHECKPOINT_KEY,
    COMPONENT,
    advance,
    checkpoint_key,
    open_row_store,
)
from services.adapters.row_store.sqlite_records import head_from, json_list, row_from, scope_sql
from services.adapters.row_store.sqlite_thread_cache import ThreadFieldsCache
from services.adapters.sqlite_common import (
    decode_time,
    encode_time,
    rollback_quietly,
    translated,
)
from services.core.positions import Checkpoints, lane_start
from services.core.scope import Scope, acl_tokens
from services.core.versions import VersionFields
from services.core.write_rules import author_scope, content_hash
from services.ports import RowHead, RowMutation, SkippedDocument

_COLUMNS = (
    "row_id, tenant, text, author, event_time, kind, thread, title, tags, participants, acl, "
    "source, source_id, ingest_position, ingested_at, state, superseded_by, derived_from, parent"
)


# A row write's guards: no erasure of the row at or after the write's position, and (on conflict)
# a later position than the stored state's.
_NOT_ERASED = ("NOT EXISTS (SELECT 1 FROM skipped e WHERE e.row_id = ? AND e.reason = 'erased' "
               "AND e.position >= ?)")
_UPDATED = ", ".join(f"{c} = excluded.{c}" for c in (*_COLUMNS.split(", ")[1:], "author_scope", "content_hash",
                                                      "state_position"))

_COLUMNS_NO_TEXT = _COLUMNS.replace(", text,", ", '' AS text,", 1)  # the same record, text left unread
_HEAD_COLUMNS = "r.row_id, r.thread, r.ingest_position, r.event_time, r.ingested_at"  # a RowHead


class SqliteRowStore:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._conn = open_row_store(self.path)
        self._lock = threading.Lock()
        self._thread_cache = ThreadFieldsCache()  # guarded by _lock

    def _query(self, sql: str, args: Sequence = ()) -> list[tuple]:
        with self._lock, translated(COMPONENT):
            return self._conn.execute(sql, args).fetchall()

    def get(self, row_id: str) -> Row | None:
        found = self._query(f"SELECT {_COLUMNS} FROM rows WHERE row_id = ?", (row_id,))
        return row_from(found[0]) if found else None

    def get_many(self, row_ids: Sequence[str], with_text: bool = True) -> dict[str, Row]:
        rows = (row_from(record) for record in self._by_ids(_COLUMNS if with_text else _COLUMNS_NO_TEXT, row_ids))
        return {row.row_id: row for row in rows}

    def heads(self, row_ids: Sequence[str]) -> dict[str, RowHead]:
        # The planner would take the primary key's index (unique), then read each wide row.
        records = self._by_ids(_HEAD_COLUMNS, row_ids, "rows r INDEXED BY rows_heads")
        return {head.row_id: head for head in map(head_from, records)}

    def _by_ids(self, columns: str, row_ids: Sequence[str], table: str = "rows r") -> Iterator[tuple]:
        ids = list(dict.fromkeys(row_ids))
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            yield from self._query(f"SELECT {columns} FROM {table} WHERE r.row_id IN ({','.join('?' * len(chunk))})", chunk)

    def history(self, row_id: str) -> list[RowChange]:
        records = self._query(
            "SELECT position, at, change, state, superseded_by, run_id, reason FROM history "
            "WHERE row_id = ? ORDER BY position", (row_id,),
        )
        return [
            RowChange(position=p, at=decode_time(at), change=c, state=s, superseded_by=sb, run_id=run, reason=reason)
            for p, at, c, s, sb, run, reason in records
        ]

    def thread(self, tenant: str, thread: str, readers: frozenset[str] | None = None,
               limit: int | None = None) -> list[Row]:
        where, args = "r.tenant = ? AND r.thread = ?", [tenant, thread]
        tokens = Scope(tenant=tenant, readers=readers).reader_tokens()  # None: unrestricted
        if tokens is not None:
            where += (" AND EXISTS (SELECT 1 FROM row_acl a WHERE a.row_id = r.row_id AND a.token IN "
                      f"({','.join('?' for _ in tokens)}))")
            args.extend(tokens)
        # Newest first so that LIMIT keeps the end of the thread; turned back into date order below.
        records = self._query(
            f"SELECT {_COLUMNS} FROM rows r WHERE {where} "
            "ORDER BY r.event_time IS NULL DESC, r.event_time DESC, r.ingest_position DESC LIMIT ?",
            (*args, -1 if limit is None else limit),
        )
        return [row_from(r) for r in reversed(records)]

    def versions_of(self, tenant: str, threads: Sequence[str], row_ids: Sequence[str] = (),
                    known_at: datetime | None = None) -> list[VersionFields]:
        threads, row_ids = sorted(set(threads)), sorted(set(row_ids))
        if not threads and not row_ids:
            return []
        with self._lock, translated(COMPONENT):
            if known_at is not None:
                fields = self._version_fields(tenant, threads, row_ids, known_at)
            else:  # the threads from the cache where it has them (sqlite_thread_cache.py)
                cache = self._thread_cache
                cache.seen_data_version(self._conn.execute("PRAGMA data_version").fetchone()[0])
                cached = {thread: cache.get(tenant, thread) for thread in threads}
                missing = [thread for thread, found in cached.items() if found is None]
                read: dict[str, dict[str, VersionFields]] = {thread: {} for thread in missing}
                fields = self._version_fields(tenant, missing, row_ids, None)
                for f in fields:
                    if f.thread in read:
                        read[f.thread][f.row_id] = f
                for thread, found in read.items():
                    cache.put(tenant, thread, tuple(found.values()))
                fields += [f for found in cached.values() if found for f in found]
        return list({f.row_id: f for f in fields}.values())  # a named row may be in a thread too

    def _version_fields(self, tenant: str, threads: Sequence[str], row_ids: Sequence[str],
                        known_at: datetime | None) -> list[VersionFields]:
        """The rows of `threads` and the rows `row_ids`, with state and pointer as of `known_at`."""
        if not threads and not row_ids:
            return []
        # With known_at, a row's state and pointer are those of its last step by then.
        state, pointer, join, args = "r.state", "r.superseded_by", "", []
        if known_at is not None:
            state, pointer = "COALESCE(h.state, r.state)", "CASE WHEN h.row_id IS NULL THEN r.superseded_by ELSE h.superseded_by END"
            join = ("LEFT JOIN history h ON h.row_id = r.row_id AND h.position = "
                    "(SELECT MAX(position) FROM history WHERE row_id = r.row_id AND at <= ?)")
            args.append(encode_time(known_at))
        # Two lookups, by thread (on the covering index) and by id; one condition with OR would
        # scan the whole tenant.
        selected = (f"r.row_id, r.tenant, r.thread, r.event_time, r.ingested_at, r.ingest_position, r.acl, {state}, "
                    f"{pointer} FROM rows r {join}")
        records = self._conn.execute(
            f"SELECT {selected} WHERE r.tenant = ? AND r.thread IN ({','.join('?' * len(threads))}) UNION ALL "
            f"SELECT {selected} WHERE r.tenant = ? AND r.row_id IN ({','.join('?' * len(row_ids))})",
            (*args, tenant, *threads, *args, tenant, *row_ids),
        ).fetchall()
        acls: dict[str, tuple[str, ...]] = {}  # a store has few distinct lists: each is parsed once
        return [VersionFields(rid, ten, thread, decode_time(event), decode_time(ingested), position,
                              acls[acl] if acl in acls else acls.setdefault(acl, tuple(json_list(acl))), st, sb)
                for rid, ten, thread, event, ingested, position, acl, st, sb in records]

    def skipped(self, row_id: str) -> SkippedDocument | None:
        found = self._query(
            "SELECT row_id, position, reason, duplicate_of, tenant FROM skipped WHERE row_id = ? "
            "ORDER BY reason = 'erased' DESC, position LIMIT 1",
            (row_id,),
        )
        return SkippedDocument(*found[0]) if found else None

    def find_source(self, tenant: str, source: str, source_id: str) -> str | None:
        found = self._query(
            "SELECT row_id FROM rows WHERE tenant = ? AND source IS ? AND source_id = ?", (tenant, source, source_id)
        )
        return found[0][0] if found else None

    def find_active_text(self, tenant: str, author_scope_: str, content_hash_: str) -> str | None:
        found = self._query(
            "SELECT row_id FROM rows WHERE tenant = ? AND author_scope = ? AND content_hash = ? AND state = 'active' LIMIT 1",
            (tenant, author_scope_, content_hash_),
        )
        return found[0][0] if found else None

    def recent(self, scope: Scope, exclude: Sequence[str], limit: int) -> list[RowHead]:
        if limit <= 0:
            return []
        where, args = scope_sql(scope)
        excluded = set(exclude)
        newest = self._query(
            f"SELECT {_HEAD_COLUMNS} FROM rows r WHERE {where} ORDER BY r.ingest_position DESC LIMIT ?",
            (*args, limit + len(excluded)),
        )
        return [head for head in map(head_from, newest) if head.row_id not in excluded][:limit]

    def named(self, scope: Scope, source_ids: Sequence[str], limit: int) -> list[RowHead]:
        wanted = [s for s in dict.fromkeys(source_ids) if isinstance(s, str)]
        if not wanted or limit <= 0:
            return []
        where, args = scope_sql(scope)
        marks = ",".join("?" for _ in wanted)
        # No ORDER BY: with one, SQLite walks the tenant's rows by ingest position instead of
        # looking the ids up (rows_source_id); an id names one row per source, so few come back.
        found = self._query(f"SELECT {_HEAD_COLUMNS} FROM rows r WHERE {where} AND r.source_id IN ({marks})",
                            (*args, *wanted))
        return sorted(map(head_from, found), key=lambda head: -head.ingest_position)[:limit]

    def inactive_at(self, tenant: str, known_at: datetime) -> frozenset[str]:
        # Only rows that maintenance ever touched can have been inactive; the latest step of
        # each at or before known_at tells its state then.
        records = self._query(
            """
            SELECT h.row_id FROM history h
            JOIN (SELECT row_id, MAX(position) AS p FROM history
                  WHERE at <= ? AND row_id IN (SELECT row_id FROM history WHERE change != 'observed')
                  GROUP BY row_id) last ON last.row_id = h.row_id AND last.p = h.position
            JOIN rows r ON r.row_id = h.row_id
            WHERE r.tenant = ? AND h.state != 'active'
            """,
            (encode_time(known_at), tenant),
        )
        return frozenset(r[0] for r in records)

    def in_scope(self, scope: Scope, limit: int = 1_000_000, with_text: bool = True) -> list[Row]:
        """Every row of a scope (maintenance passes, the people directory), in ingest order."""
        where, args = scope_sql(scope)
        columns = _COLUMNS if with_text else _COLUMNS_NO_TEXT
        records = self._query(
            f"SELECT {columns} FROM rows r WHERE {where} ORDER BY r.ingest_position LIMIT ?", (*args, limit)
        )
        return [row_from(r) for r in records]

    def page(self, tenant: str | None, after: tuple[int, str] | None, limit: int) -> list[Row]:
        """Up to `limit` rows of a tenant (every tenant: None) in (ingest position, row id) order,
        from just after the key `after`: an export reads the store in pages, never all at once."""
        clauses, args = [], []
        if tenant is not None:
            clauses.append("tenant = ?")
            args.append(tenant)
        if after is not None:
            clauses.append("(ingest_position, row_id) > (?, ?)")
            args.extend(after)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        records = self._query(f"SELECT {_COLUMNS} FROM rows {where} ORDER BY ingest_position, row_id LIMIT ?",
                              (*args, limit))
        return [row_from(r) for r in records]

    def histories(self, row_ids: Sequence[str]) -> dict[str, list[RowChange]]:
        """The history of each of `row_ids` that has one, in log order (one read per 500 rows)."""
        out: dict[str, list[RowChange]] = {}
        ids = list(dict.fromkeys(row_ids))
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            records = self._query(
                "SELECT row_id, position, at, change, state, superseded_by, run_id, reason FROM history "
                f"WHERE row_id IN ({','.join('?' * len(chunk))}) ORDER BY row_id, position", chunk)
            for row_id, p, at, c, st, sb, run, reason in records:
                out.setdefault(row_id, []).append(RowChange(position=p, at=decode_time(at), change=c, state=st,
                                                            superseded_by=sb, run_id=run, reason=reason))
        return out

    def apply(self, mutations: Sequence[RowMutation], skipped: Sequence[SkippedDocument], position: int) -> None:
        with self._lock, translated(COMPONENT):
            conn = self._conn
            self._thread_cache.drop((m.row.tenant, m.row.thread) for m in mutations if m.row.thread)
            conn.execute("BEGIN IMMEDIATE")
            try:
                for mutation in mutations:
                    self._write(conn, mutation)
                conn.executemany(
                    "INSERT OR IGNORE INTO skipped(row_id, position, reason, duplicate_of, tenant) VALUES "
                    "(?,?,?,?, COALESCE(?, (SELECT r.tenant FROM rows r WHERE r.row_id = ?)))",
                    [(s.row_id, s.position, s.reason, s.duplicate_of, s.tenant, s.duplicate_of) for s in skipped],
                )
                advance(conn, position)
                conn.execute("COMMIT")
            except BaseException:
                rollback_quietly(conn)
                raise

    @staticmethod
    def _write(conn: sqlite3.Connection, mutation: RowMutation) -> None:
        """The row state of `mutation` unless the store holds one from the same or a later position
        (a replay, or a stalled writer behind another), and nothing for a row erased since."""
        row, change = mutation.row, mutation.change
        written = conn.execute(
            f"INSERT INTO rows({_COLUMNS}, author_scope, content_hash, state_position) "
            f"SELECT ?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,? WHERE {_NOT_ERASED} "
            f"ON CONFLICT(row_id) DO UPDATE SET {_UPDATED} WHERE excluded.state_position > rows.state_position",
            (
                row.row_id, row.tenant, row.text, row.author, encode_time(row.event_time), row.kind,
                row.thread, row.title, json.dumps(row.tags), json.dumps(row.participants),
                json.dumps(row.acl), row.source, row.source_id, row.ingest_position,
                encode_time(row.ingested_at), row.state, row.superseded_by, json.dumps(row.derived_from),
                row.parent, author_scope(row.author), content_hash(row.text), change.position, row.row_id, change.position,
            ),
        ).rowcount
        if written:
            conn.execute("DELETE FROM row_acl WHERE row_id = ?", (row.row_id,))
            conn.executemany(
                "INSERT INTO row_acl(row_id, token) VALUES (?, ?)", [(row.row_id, t) for t in acl_tokens(row.acl)]
            )
        conn.execute(
            "INSERT OR IGNORE INTO history(row_id, position, at, change, state, superseded_by, run_id, reason) "
            f"SELECT ?,?,?,?,?,?,?,? WHERE {_NOT_ERASED}",
            (row.row_id, change.position, encode_time(change.at), change.change, change.state,
             change.superseded_by, change.run_id, change.reason, row.row_id, change.position),
        )

    def erase(self, tenant: str, row_ids: Sequence[str], position: int | None) -> list[str]:
        """Delete rows (and their history, access tokens and skip records) and leave an 'erased'
        skip record per id; move the checkpoint to `position` (None: an out-of-band purge). The
        WAL is folded in and truncated, so neither it nor a free page keeps the erased text.
        Returns the ids that were stored rows."""
        ids = list(dict.fromkeys(row_ids))
        with self._lock, translated(COMPONENT):
            conn = self._conn
            self._thread_cache.clear()
            conn.execute("BEGIN IMMEDIATE")
            try:
                stored: list[str] = []
                at = position
                if at is None:  # out of band: the skip records name lane 0's checkpoint
                    found = conn.execute("SELECT value FROM meta WHERE key = ?", (CHECKPOINT_KEY,)).fetchone()
                    at = int(found[0]) if found else 0
                for start in range(0, len(ids), 500):
                    chunk = ids[start : start + 500]
                    marks = ",".join("?" * len(chunk))
                    stored += [r[0] for r in conn.execute(f"SELECT row_id FROM rows WHERE row_id IN ({marks})", chunk)]
                    for table in ("rows", "row_acl", "history", "skipped"):
                        conn.execute(f"DELETE FROM {table} WHERE row_id IN ({marks})", chunk)
                conn.executemany("INSERT OR IGNORE INTO skipped(row_id, position, reason, duplicate_of, tenant) "
                                 "VALUES (?, ?, 'erased', NULL, ?)", [(rid, at, tenant) for rid in ids])
                if position is not None:
                    advance(conn, position)
                conn.execute("COMMIT")
            except BaseException:
                rollback_quietly(conn)
                raise
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return stored

    def applied_position(self, lane: int = 0) -> int:
        found = self._query("SELECT value FROM meta WHERE key = ?", (checkpoint_key(lane),))
        return int(found[0][0]) if found else lane_start(lane)

    def applied_positions(self) -> Checkpoints:
        found = self._query("SELECT key, value FROM meta WHERE key = ? OR key LIKE ?",
                            (CHECKPOINT_KEY, f"{CHECKPOINT_KEY}:%"))
        return Checkpoints({0 if key == CHECKPOINT_KEY else int(key.rsplit(":", 1)[1]): int(value)
                            for key, value in found})

    def count(self, tenant: str | None = None) -> dict[str, int]:
        where, args = ("WHERE tenant = ?", [tenant]) if tenant else ("", [])
        counts = dict(self._query(f"SELECT state, COUNT(*) FROM rows {where} GROUP BY state", args))
        skipped = self._query(f"SELECT COUNT(*) FROM skipped {where}", args)[0][0]
        return {"active": counts.get("active", 0), "archived": counts.get("archived", 0), "skipped": skipped}

    def reset(self) -> None:
        with self._lock, translated(COMPONENT):
            self._thread_cache.clear()
            self._conn.executescript(
                "BEGIN; DELETE FROM rows; DELETE FROM row_acl; DELETE FROM history; "
                "DELETE FROM skipped; DELETE FROM meta; COMMIT;"
            )

    def close(self) -> None:
        with self._lock:
            self._conn.close()

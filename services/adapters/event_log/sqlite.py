"""The embedded event log: one SQLite table, append-only, in WAL mode.

Positions come from an INTEGER PRIMARY KEY, so they increase monotonically; triggers refuse
every UPDATE and DELETE, so nothing can rewrite the record even by mistake. Every driver error
(disk I/O, a full disk, a lock past its timeout, a read-only file) is the storage failing:
`BackendUnavailable("event log (sqlite)")`, which the API answers 503.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from schemas.events import Event, LoggedEvent, event_from_json, event_to_json
from services.adapters.sqlite_common import (
    decode_time,
    encode_time,
    open_with_schema,
    rollback_quietly,
    translated,
)
from services.core.positions import Checkpoints

COMPONENT = "event log (sqlite)"

_NO_UPDATE = """CREATE TRIGGER IF NOT EXISTS events_no_update BEFORE UPDATE ON events
BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;"""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    position    INTEGER PRIMARY KEY AUTOINCREMENT,
    appended_at TEXT NOT NULL,
    tenant      TEXT NOT NULL,
    type        TEXT NOT NULL,
    body        TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_type ON events(type, position);
CREATE TRIGGER IF NOT EXISTS events_no_delete BEFORE DELETE ON events
BEGIN SELECT RAISE(ABORT, 'the event log is append-only'); END;
""" + _NO_UPDATE


class SqliteEventLog:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._conn = open_with_schema(self.path, _SCHEMA, COMPONENT)
        self._lock = threading.Lock()

    def append(self, events: Sequence[Event]) -> list[LoggedEvent]:
        if not events:
            return []
        bodies = [(event.tenant, event.type, event_to_json(event)) for event in events]
        with self._lock, translated(COMPONENT):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                # Transaction time never runs backwards, even if the clock does, so that
                # position order and appended_at order agree (known_at relies on it).
                last = self._conn.execute("SELECT MAX(appended_at) FROM events").fetchone()[0]
                now = datetime.now(UTC)
                if last is not None and decode_time(last) > now:
                    now = decode_time(last)
                stamp = encode_time(now)
                positions = []
                for tenant, kind, body in bodies:
                    cur = self._conn.execute(
                        "INSERT INTO events(appended_at, tenant, type, body) VALUES (?,?,?,?)",
                        (stamp, tenant, kind, body),
                    )
                    positions.append(cur.lastrowid)
                self._conn.execute("COMMIT")
            except BaseException:
                rollback_quietly(self._conn)
                raise
        return [
            LoggedEvent(position=pos, appended_at=now, event=event)
            for pos, event in zip(positions, events, strict=True)
        ]

    def read(self, after: int, limit: int) -> list[LoggedEvent]:
        # Under the lock: the connection is shared, and a read between an append's INSERT and its
        # ROLLBACK (a failed COMMIT) would see events that were never acknowledged.
        with self._lock, translated(COMPONENT):
            rows = self._conn.execute(
                "SELECT position, appended_at, body FROM events WHERE position > ? ORDER BY position LIMIT ?",
                (after, limit),
            ).fetchall()
        return [
            LoggedEvent(position=pos, appended_at=decode_time(at), event=event_from_json(body))
            for pos, at, body in rows
        ]

    def rewrite_bodies(self, transform: Callable[[Event], Event | None], batch: int = 500) -> int:
        """Replace, in place, each event that `transform` maps to a new one (None: keep it); only
        `orgmem migrate encrypt` does this, once. The append-only triggers are lifted inside each
        batch's transaction and restored before it commits, so no crash leaves them off; a
        stopped run resumes where it stopped (converted events map to None). Old bodies are
        zeroed (secure_delete) and the file vacuumed. Returns how many events were rewritten."""
        rewritten, after = 0, 0
        with self._lock, translated(COMPONENT):
            self._conn.execute("PRAGMA secure_delete=ON")
            while True:
                records = self._conn.execute(
                    "SELECT position, body FROM events WHERE position > ? ORDER BY position LIMIT ?", (after, batch)).fetchall()
                if not records:
                    break
                changes = [(event_to_json(new), pos) for pos, body in records
                           if (new := transform(event_from_json(body))) is not None]
                if changes:
                    self._conn.execute("BEGIN IMMEDIATE")
                    try:
                        self._conn.execute("DROP TRIGGER events_no_update")
                        self._conn.executemany("UPDATE events SET body = ? WHERE position = ?", changes)
                        self._conn.execute(_NO_UPDATE)
                        self._conn.execute("COMMIT")
                    except BaseException:
                        rollback_quietly(self._conn)
                        raise
                    rewritten += len(changes)
                after = records[-1][0]
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._conn.execute("VACUUM")
            self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return rewritten

    def head(self) -> int:
        with self._lock, translated(COMPONENT):
            value = self._conn.execute("SELECT MAX(position) FROM events").fetchone()[0]
        return int(value or 0)

    def heads(self) -> Checkpoints:
        return Checkpoints({0: self.head()})  # one lane

    def lane_for(self, tenant: str) -> int:
        return 0

    def backlog(self, after: int, head: int) -> int:
        return head - after  # positions are dense: one per event

    def close(self) -> None:
        with self._lock:
            self._conn.close()

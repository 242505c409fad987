"""The embedded profile's data keys: `<data_dir>/data-keys.sqlite`, outside the log.

`secure_delete` is on, so SQLite zeroes a deleted key's bytes in its page; after a destroy the
WAL is checkpointed and truncated and the file vacuumed, so that no WAL frame or free page still
holds the key. Tombstones (`destroyed_keys`) are never deleted: a destroyed id is never created
again, and a restore of an older backup deletes every key the live folder's tombstones name.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from services.adapters.sqlite_common import open_with_schema, rollback_quietly, translated

COMPONENT = "data key store (sqlite)"
KEY_BYTES = 32

_SCHEMA = """
CREATE TABLE IF NOT EXISTS data_keys (key_id TEXT PRIMARY KEY, key BLOB NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS destroyed_keys (key_id TEXT PRIMARY KEY, destroyed_at TEXT NOT NULL, erasure_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_CHUNK = 500  # ids per statement (SQLite's variable limit is far above; this bounds one statement)


def _chunks(ids: Sequence[str]):
    ids = list(dict.fromkeys(ids))
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


class SqliteDataKeyStore:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._conn = open_with_schema(self.path, _SCHEMA, COMPONENT)
        with translated(COMPONENT):
            self._conn.execute("PRAGMA secure_delete=ON")
        self._lock = threading.Lock()

    def obtain(self, key_ids: Sequence[str]) -> dict[str, bytes | None]:
        if not key_ids:
            return {}
        now = datetime.now(UTC).isoformat()
        found: dict[str, bytes | None] = {}
        with self._lock, translated(COMPONENT):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for chunk in _chunks(key_ids):
                    marks = ",".join("?" * len(chunk))
                    dead = {r[0] for r in self._conn.execute(
                        f"SELECT key_id FROM destroyed_keys WHERE key_id IN ({marks})", chunk)}
                    live = dict(self._conn.execute(f"SELECT key_id, key FROM data_keys WHERE key_id IN ({marks})", chunk))
                    fresh = [(k, os.urandom(KEY_BYTES), now) for k in chunk if k not in dead and k not in live]
                    self._conn.executemany("INSERT INTO data_keys(key_id, key, created_at) VALUES (?,?,?)", fresh)
                    live.update({k: key for k, key, _ in fresh})
                    found.update({k: (None if k in dead else bytes(live[k])) for k in chunk})
                self._conn.execute("COMMIT")
            except BaseException:
                rollback_quietly(self._conn)
                raise
        return found

    def get(self, key_ids: Sequence[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        with self._lock, translated(COMPONENT):
            for chunk in _chunks(key_ids):
                found.update((k, bytes(v)) for k, v in self._conn.execute(
                    f"SELECT key_id, key FROM data_keys WHERE key_id IN ({','.join('?' * len(chunk))})", chunk))
        return found

    def destroy(self, key_ids: Sequence[str], erasure_id: str) -> int:
        now = datetime.now(UTC).isoformat()
        destroyed = 0
        with self._lock, translated(COMPONENT):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for chunk in _chunks(key_ids):
                    marks = ",".join("?" * len(chunk))
                    destroyed += self._conn.execute(f"DELETE FROM data_keys WHERE key_id IN ({marks})", chunk).rowcount
                    self._conn.executemany(
                        "INSERT OR IGNORE INTO destroyed_keys(key_id, destroyed_at, erasure_id) VALUES (?,?,?)",
                        [(k, now, erasure_id) for k in chunk])
                self._conn.execute("COMMIT")
            except BaseException:
                rollback_quietly(self._conn)
                raise
            self._scrub()
        return destroyed

    def _scrub(self) -> None:
        """No WAL frame and no free page keeps a deleted key: fold the WAL in and truncate it,
        then rewrite the file."""
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._conn.execute("VACUUM")
        self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def destroyed(self, key_ids: Sequence[str]) -> set[str]:
        dead: set[str] = set()
        with self._lock, translated(COMPONENT):
            for chunk in _chunks(key_ids):
                dead.update(r[0] for r in self._conn.execute(
                    f"SELECT key_id FROM destroyed_keys WHERE key_id IN ({','.join('?' * len(chunk))})", chunk))
        return dead

    def marker(self, name: str) -> str | None:
        with self._lock, translated(COMPONENT):
            found = self._conn.execute("SELECT value FROM meta WHERE key = ?", (name,)).fetchone()
        return found[0] if found else None

    def set_marker(self, name: str, value: str) -> None:
        with self._lock, translated(COMPONENT):
            self._conn.execute("INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                               (name, value))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

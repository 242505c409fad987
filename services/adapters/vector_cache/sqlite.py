"""The content-addressed vector cache of the embedded profile: one SQLite table in the data
folder, outside the projections, so that `orgmem rebuild` (which drops them) finds every vector."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from services.adapters.sqlite_common import open_with_schema, rollback_quietly, translated

COMPONENT = "vector cache (SQLite)"
# A rowid table: 2.1 KB per 384-dimensional vector; WITHOUT ROWID stored the same rows in 4.7 KB
# (its b-tree keeps less of a large row per page, and the rest spills to overflow pages).
SCHEMA = """
CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL);
"""
# SQLite's default limit on bound parameters is 32766; stay far below it.
CHUNK = 500


class SqliteVectorCache:
    def __init__(self, path: Path, dim: int):
        self.dim = dim
        self._conn = open_with_schema(Path(path), SCHEMA, COMPONENT)
        # A lost cache entry costs one encode, never a wrong answer: no fsync per write.
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._lock = threading.Lock()

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]:
        found: dict[bytes, np.ndarray] = {}
        with self._lock, translated(COMPONENT):
            for start in range(0, len(keys), CHUNK):
                chunk = list(keys[start:start + CHUNK])
                marks = ",".join("?" * len(chunk))
                for key, blob in self._conn.execute(f"SELECT key, vector FROM vectors WHERE key IN ({marks})", chunk):
                    vector = np.frombuffer(blob, dtype=np.float32)
                    if vector.shape == (self.dim,):  # a vector of another shape is not this model's
                        found[bytes(key)] = vector
        return found

    def put_many(self, items: Sequence[tuple[bytes, np.ndarray]]) -> None:
        if not items:
            return
        rows = [(key, np.asarray(vector, dtype=np.float32).tobytes()) for key, vector in items]
        with self._lock, translated(COMPONENT):
            try:
                self._conn.execute("BEGIN")
                self._conn.executemany("INSERT OR REPLACE INTO vectors (key, vector) VALUES (?, ?)", rows)
                self._conn.execute("COMMIT")
            except BaseException:
                rollback_quietly(self._conn)
                raise

    def forget(self, keys: Sequence[bytes]) -> int:
        dropped = 0
        with self._lock, translated(COMPONENT):
            for start in range(0, len(keys), CHUNK):
                chunk = list(keys[start:start + CHUNK])
                marks = ",".join("?" * len(chunk))
                dropped += self._conn.execute(f"DELETE FROM vectors WHERE key IN ({marks})", chunk).rowcount
        return dropped

    def count(self) -> int:
        with self._lock, translated(COMPONENT):
            return self._conn.execute("SELECT count(*) FROM vectors").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()

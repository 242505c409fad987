"""A process of tests/adapters/test_sqlite_locks.py: opens the row store at each of `count` new paths
in `folder` at the same moment as its peers (a barrier of marker files), then commits a few writes,
and prints one line per open that failed."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from services.adapters.row_store.sqlite_schema import open_row_store


def barrier(folder: Path, step: int, peers: int) -> None:
    (folder / f"{step}.{os.getpid()}.ready").touch()
    deadline = time.monotonic() + 30
    while len(list(folder.glob(f"{step}.*.ready"))) < peers and time.monotonic() < deadline:
        time.sleep(0.0005)


def main(folder: Path, count: int, peers: int) -> None:
    for step in range(count):
        barrier(folder, step, peers)
        try:
            conn = open_row_store(folder / f"{step}.sqlite")
            for value in range(5):
                conn.execute("BEGIN IMMEDIATE")
                conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (str(os.getpid()), str(value)))
                conn.execute("COMMIT")
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            conn.close()
            if mode != "wal":
                print(f"{step}: journal mode {mode}", flush=True)
        except Exception as exc:  # reported to the test, which names it
            print(f"{step}: {type(exc).__name__}: {exc}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))

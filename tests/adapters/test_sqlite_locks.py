"""Opening a second store on a live SQLite file in the same process must not drop the locks of the
connection already open there. If it did (a raw open and close of the file outside SQLite does),
another process that closes its own connection takes the database as unused, checkpoints it and
deletes its WAL index, and the first connection then reads "database disk image is malformed"."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from services.adapters.key_store.sqlite import SqliteKeyStore

TOUCH = """
import sqlite3, sys
c = sqlite3.connect(f"file:{sys.argv[1]}?mode=rw", uri=True)
c.execute("SELECT count(*) FROM sqlite_master").fetchall()
c.close()
"""


def test_a_second_store_in_the_process_keeps_the_first_ones_locks(tmp_path):
    path = tmp_path / "keys.sqlite"
    server = SqliteKeyStore(path)  # the server's store, open for the process's lifetime
    _, first = server.create("default", "ana", "admin", "tests", unrestricted=True)
    assert server.verify(first) is not None
    other = SqliteKeyStore(path)  # e.g. a key created by a command in the same process
    _, second = other.create("default", "bo", "reader", "tests")
    other.close()
    # Another process (an online backup) opens and closes the database.
    subprocess.run([sys.executable, "-c", TOUCH, str(path)], check=True, timeout=60)
    assert (tmp_path / "keys.sqlite-shm").exists(), "the WAL index was deleted under an open connection"
    third_store = SqliteKeyStore(path)
    _, third = third_store.create("default", "cy", "reader", "tests")
    third_store.close()
    assert server.verify(second) is not None and server.verify(third) is not None
    server.close()


def test_processes_that_open_one_new_store_together_all_open_it_in_wal_mode(tmp_path):
    """Two indexers started together on one shared folder both create its row store. SQLite takes
    the lock that turns a new file to WAL without waiting on its busy handler: the second process
    got "database is locked" at once and exited (or silently kept the rollback journal)."""
    peers, count = 3, 40
    script = Path(__file__).with_name("sqlite_open_race.py")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path), str(count), str(peers)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
             for _ in range(peers)]
    failures = [line for proc in procs for line in proc.communicate(timeout=300)[0].splitlines()]
    assert [proc.returncode for proc in procs] == [0] * peers, failures
    assert failures == []

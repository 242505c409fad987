"""Opening a second store on a live SQLite file in the same process must not drop the locks of the
connection already open there. If it did (a raw open and close of the file outside SQLite does),
another process that closes its own connection takes the database as unused, checkpoints it and
deletes its WAL index, and the first connection then reads "database disk image is malformed"."""

from __future__ import annotations

import subprocess
import sys

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

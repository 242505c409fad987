"""SQLite connection settings shared by the embedded adapters, driver-error translation, and time
encoding.

Files are private to orgmem's user: a database file is created 0600 before SQLite opens it (SQLite
gives its -wal and -shm files the mode of the database file), a folder it creates is 0700, and an
existing file or sidecar with group or other bits is tightened when it is opened.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

PRIVATE_FILE, PRIVATE_DIR = 0o600, 0o700
BUSY_TIMEOUT_S = 30.0  # how long a statement waits for another connection's lock


def _private_file(path: Path) -> None:
    """Create `path` 0600 if it is missing; drop group and other bits from it and its sidecars."""
    path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    # Never open an existing database outside SQLite: closing any descriptor of a file drops every
    # POSIX lock this process holds on it, those of SQLite connections already open included. Another
    # process then takes the file as unused, checkpoints and deletes its WAL index under them, and the
    # open connections read a malformed database (seen after an online backup).
    if not path.exists():
        try:
            os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
        except FileExistsError:
            pass  # created meanwhile by another process, which holds no lock of ours
        except OSError:
            return  # a read-only folder: SQLite reports what it cannot do itself
    for each in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), Path(f"{path}-journal")):
        try:
            mode = each.stat().st_mode & 0o777
            if mode & 0o077:
                each.chmod(mode & ~0o077)
        except OSError:
            pass


def connect(path: Path) -> sqlite3.Connection:
    path = Path(path)
    _private_file(path)
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_S)
    try:
        _enter_wal(conn)
        # FULL: a commit is on disk before it returns, so an acknowledged write survives a crash.
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
    except BaseException:
        conn.close()  # a store that cannot open does not keep its file open
        raise
    return conn


def _enter_wal(conn: sqlite3.Connection) -> None:
    """Put the database in WAL mode, waiting for other processes as long as any statement would.

    SQLite takes the lock that turns a new file to WAL without calling its busy handler: a second
    process opening the same new file at that moment gets "database is locked" at once, or the old
    journal mode back (two indexers started together on one shared folder; one exited)."""
    deadline, pause = time.monotonic() + BUSY_TIMEOUT_S, 0.001
    while True:
        try:
            if conn.execute("PRAGMA journal_mode=WAL").fetchone()[0] == "wal":
                return
            failure: sqlite3.Error = sqlite3.OperationalError("the journal mode stayed off WAL")
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                raise
            failure = exc
        if time.monotonic() > deadline:
            raise failure
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def open_with_schema(path: Path, schema: str, component: str) -> sqlite3.Connection:
    """A connection with the tables of `schema` created; driver errors become BackendUnavailable."""
    with translated(component):
        conn = connect(Path(path))
        conn.executescript(schema)
    return conn


@contextmanager
def translated(component: str) -> Iterator[None]:
    """Every driver error inside becomes BackendUnavailable(component): disk I/O, a full disk, a
    lock held past the timeout, a read-only file or a corrupt one are the server's storage failing,
    never the request's fault (503, naming the component; see services/api/problems.py)."""
    from services.errors import BackendUnavailable

    try:
        yield
    except sqlite3.Error as exc:
        raise BackendUnavailable(component, f"{type(exc).__name__}: {exc}") from exc


def rollback_quietly(conn: sqlite3.Connection) -> None:
    """Roll back an open transaction after a failure without masking that failure: SQLite may have
    ended the transaction itself (a failed COMMIT on a full disk), and ROLLBACK then raises."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def encode_time(value: datetime | None) -> str | None:
    """Fixed-width UTC text, so that string order is time order inside SQLite."""
    if value is None:
        return None
    # isoformat pads the year to four digits (strftime's %Y does not below year 1000).
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def decode_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)

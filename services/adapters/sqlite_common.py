"""SQLite connection settings shared by the embedded adapters, and time encoding."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path


def connect(path: Path) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    # FULL: a commit is on disk before it returns, so an acknowledged write survives a crash.
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def open_with_schema(path: Path, schema: str, component: str) -> sqlite3.Connection:
    """A connection with the tables of `schema` created; driver errors become BackendUnavailable."""
    from services.errors import BackendUnavailable

    try:
        conn = connect(Path(path))
        conn.executescript(schema)
    except sqlite3.Error as exc:
        raise BackendUnavailable(component, str(exc)) from exc
    return conn


def encode_time(value: datetime | None) -> str | None:
    """Fixed-width UTC text, so that string order is time order inside SQLite."""
    if value is None:
        return None
    # isoformat pads the year to four digits (strftime's %Y does not below year 1000).
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def decode_time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)

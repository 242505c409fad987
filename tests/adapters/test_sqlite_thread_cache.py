"""The SQLite row store keeps recently read threads' version fields: every way a thread can
change must show in the next read, from this store's writes, an erasure, and another connection
to the same file (a second indexer) that the cache never saw."""

from __future__ import annotations

import sqlite3
from datetime import timedelta

import pytest

from services.adapters.row_store.sqlite import SqliteRowStore
from services.adapters.row_store.sqlite_thread_cache import ThreadFieldsCache
from services.core.scope import Scope
from services.core.versions import versions
from tests.contract.test_row_store import T0, make_row, observed


def states(store, thread="th", tenant="t"):
    return {f.row_id: (f.state, f.superseded_by) for f in store.versions_of(tenant, [thread])}


def test_own_writes_show_at_once(tmp_path):
    store = SqliteRowStore(tmp_path / "rows.sqlite")
    store.apply([observed(make_row(1)), observed(make_row(2))], [], 2)
    assert states(store) == {"r1": ("active", None), "r2": ("active", None)}  # now cached
    store.apply([observed(make_row(3))], [], 3)
    assert set(states(store)) == {"r1", "r2", "r3"}
    store.apply([observed(make_row(1, state="archived"), "archived", position=4)], [], 4)
    store.apply([observed(make_row(2, superseded_by="r3"), "superseded", position=5)], [], 5)
    assert states(store) == {"r1": ("archived", None), "r2": ("active", "r3"), "r3": ("active", None)}
    store.erase("t", ["r3"], 6)
    assert set(states(store)) == {"r1", "r2"}
    store.reset()
    assert states(store) == {}
    store.close()


def test_another_connection_s_commit_shows(tmp_path):
    reader, writer = SqliteRowStore(tmp_path / "rows.sqlite"), SqliteRowStore(tmp_path / "rows.sqlite")
    writer.apply([observed(make_row(1))], [], 1)
    assert set(states(reader)) == {"r1"}  # cached by the reader
    writer.apply([observed(make_row(2)), observed(make_row(1, state="archived"), "archived", position=3)], [], 3)
    assert states(reader) == {"r1": ("archived", None), "r2": ("active", None)}
    writer.erase("t", ["r2"], 4)
    assert set(states(reader)) == {"r1"}
    reader.close(), writer.close()


def test_versions_read_through_the_cache_equal_an_uncached_read(tmp_path):
    # Two tenants with a thread of the same name, threads cached and not, rows named by id: the
    # versions computed from the cached read are those of a store that never cached.
    cached, fresh = SqliteRowStore(tmp_path / "a.sqlite"), SqliteRowStore(tmp_path / "b.sqlite")
    rows = [make_row(i, thread=f"th{i % 3}", tenant="t" if i % 4 else "u") for i in range(1, 30)]
    rows.append(make_row(40, thread=None))
    for store in (cached, fresh):
        store.apply([observed(row) for row in rows], [], 40)
    cached.versions_of("t", ["th0", "th1"])  # warm part of it
    cached.versions_of("u", ["th2"])
    threads, named = ["th0", "th1", "th2"], ["r40", "r7"]
    scope = Scope(tenant="t", as_of=T0 + timedelta(days=20))
    ids = [row.row_id for row in rows]
    fresh._thread_cache.max_fields = 0  # never keeps anything
    assert versions(ids, cached.versions_of("t", threads, named), scope) == \
        versions(ids, fresh.versions_of("t", threads, named), scope)
    assert sorted(f.row_id for f in cached.versions_of("t", threads, named)) == \
        sorted(f.row_id for f in fresh.versions_of("t", threads, named))
    cached.close(), fresh.close()


def test_the_cache_stays_within_its_bound():
    cache = ThreadFieldsCache(max_fields=5)
    cache.put("t", "a", tuple(range(3)))  # type: ignore[arg-type]
    cache.put("t", "b", tuple(range(2)))  # type: ignore[arg-type]
    assert cache.get("t", "a") is not None  # a is now the most recently read
    cache.put("t", "c", tuple(range(2)))  # type: ignore[arg-type]
    assert len(cache) <= 5 and cache.get("t", "b") is None and cache.get("t", "a") is not None
    cache.put("t", "huge", tuple(range(6)))  # type: ignore[arg-type]
    assert cache.get("t", "huge") is None and len(cache) <= 5
    cache.seen_data_version(1)
    assert len(cache) == 0 and cache.get("t", "a") is None


def fresh_read(path, thread="th", tenant="t"):
    """The same file read by a store that keeps nothing."""
    other = SqliteRowStore(path)
    other._thread_cache.max_fields = 0
    try:
        return sorted(other.versions_of(tenant, [thread]))
    finally:
        other.close()


def test_a_refused_older_state_does_not_reach_the_kept_thread(tmp_path):
    # A stalled writer's older state (position 3) after a newer one (position 5): the store keeps it
    # out, and so must what it keeps of the thread.
    path = tmp_path / "rows.sqlite"
    store = SqliteRowStore(path)
    store.apply([observed(make_row(1)), observed(make_row(2))], [], 2)
    store.apply([observed(make_row(1, state="archived"), "archived", position=5)], [], 5)
    store.versions_of("t", ["th"])
    store.apply([observed(make_row(1, superseded_by="r2"), "superseded", position=3)], [], 5)
    assert states(store) == {"r1": ("archived", None), "r2": ("active", None)}
    assert sorted(store.versions_of("t", ["th"])) == fresh_read(path)
    store.close()


def test_a_failed_batch_leaves_nothing_of_itself_in_the_kept_thread(tmp_path, monkeypatch):
    store = SqliteRowStore(tmp_path / "rows.sqlite")
    store.apply([observed(make_row(1))], [], 1)
    store.versions_of("t", ["th"])
    real_write, calls = SqliteRowStore._write, []

    def write_then_fail(conn, mutation):
        calls.append(mutation.row.row_id)
        if len(calls) == 2:
            raise sqlite3.OperationalError("disk I/O error")
        return real_write(conn, mutation)

    monkeypatch.setattr(SqliteRowStore, "_write", staticmethod(write_then_fail))
    with pytest.raises(Exception, match="disk I/O"):
        store.apply([observed(make_row(2)), observed(make_row(3))], [], 3)
    monkeypatch.undo()
    assert set(states(store)) == {"r1"}  # r2 was rolled back, and is not named
    store.close()

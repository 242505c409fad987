"""The data folder's backup mechanics on real files and SQLite databases, without a server or an
encoder: what a plan copies and leaves out, SQLite copies under a concurrent writer, holes kept,
cut JSONL lines dropped, hostile manifests refused, tombstones and revocations merged."""

from __future__ import annotations

import json
import os
import sqlite3
import threading

import pytest

from services.adapters.data_folder import backup
from services.errors import Invalid


def _db(path, rows=3):
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE IF NOT EXISTS events (position INTEGER PRIMARY KEY, body TEXT)")
    conn.executemany("INSERT INTO events(body) VALUES (?)", [("x" * 100,)] * rows)
    conn.commit()
    return conn


def test_the_plan_copies_state_and_leaves_out_locks_sidecars_inputs_and_caches(tmp_path):
    data = tmp_path / "data"
    log = _db(data / "log.sqlite")
    for rel in ("projections/rows.sqlite", "projections/lexical/meta.json", "projections/vectors/wal/open-1",
                "connectors/dead_letters/acme.jsonl", "keys.sqlite", "data-keys.sqlite", "projections.lock",
                "inbox/acme/mail.mbox", "cache/vectors.sqlite", "projections.rebuild/rows.sqlite",
                "projections/vectors.retired/x", "some.partial"):
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        (data / rel).write_text("x")
    (data / "projections" / "link").symlink_to(data / "keys.sqlite")
    plan = backup.plan(data)
    assert plan.log == ["log.sqlite"] and plan.data_keys == ["data-keys.sqlite"]
    assert plan.projections == ["projections/rows.sqlite", "projections/lexical/meta.json",
                                "projections/vectors/wal/open-1"]
    assert plan.state == ["keys.sqlite", "connectors/dead_letters/acme.jsonl"]
    assert "log.sqlite-wal" not in str(plan)  # the open connection keeps a WAL: never copied
    log.close()
    with pytest.raises(Invalid, match="no event log"):
        backup.plan(tmp_path / "empty")


def test_sqlite_is_copied_whole_while_another_connection_writes(tmp_path):
    source = tmp_path / "data" / "log.sqlite"
    writer = _db(source, rows=2000)
    stop = threading.Event()

    def write():
        while not stop.is_set():
            writer.execute("INSERT INTO events(body) VALUES ('more')")
            writer.commit()

    thread = threading.Thread(target=write)
    thread.start()
    try:
        entries = backup.copy_files(tmp_path / "data", ["log.sqlite"], tmp_path / "copy")
    finally:
        stop.set()
        thread.join()
        writer.close()
    copied = tmp_path / "copy" / "log.sqlite"
    assert entries[0]["kind"] == "sqlite" and entries[0]["sha256"] == backup.sha256_of(copied)
    assert not (tmp_path / "copy" / "log.sqlite-wal").exists()
    conn = sqlite3.connect(copied)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    count, head = conn.execute("SELECT COUNT(*), MAX(position) FROM events").fetchone()
    conn.close()
    assert count == head >= 2000  # a prefix of the log, no gap
    assert backup.log_head_of(copied) == head


def test_holes_stay_holes_and_a_cut_jsonl_line_is_dropped(tmp_path):
    data = tmp_path / "data"
    (data / "vectors").mkdir(parents=True)
    sparse = data / "vectors" / "chunk_0.mmap"
    with open(sparse, "wb") as handle:
        handle.write(b"head")
        handle.truncate(32 * 1024 * 1024)
    letters = data / "dead.jsonl"
    letters.write_bytes(b'{"reason": "whole"}\n{"reason": "being wri')
    entries = backup.copy_files(data, ["vectors/chunk_0.mmap", "dead.jsonl"], tmp_path / "copy")
    copied = tmp_path / "copy" / "vectors" / "chunk_0.mmap"
    assert copied.stat().st_size == sparse.stat().st_size and copied.read_bytes()[:4] == b"head"
    assert copied.stat().st_blocks * 512 < 1024 * 1024  # not 32 MiB on disk
    assert entries[0]["sha256"] == backup.sha256_of(sparse)
    assert (tmp_path / "copy" / "dead.jsonl").read_bytes() == b'{"reason": "whole"}\n'
    assert entries[1]["size"] == 20 and entries[1]["sha256"] == backup.sha256_of(tmp_path / "copy" / "dead.jsonl")


@pytest.mark.parametrize("path", ["../escape", "/etc/passwd", "a/../../b", "", "a//b", 7])
def test_a_manifest_naming_a_path_outside_the_backup_is_refused(tmp_path, path):
    (tmp_path / "manifest.json").write_text(json.dumps({
        "format": backup.FORMAT, "format_version": backup.FORMAT_VERSION,
        "files": [{"path": path, "kind": "file", "size": 0, "sha256": ""}]}))
    with pytest.raises(Invalid):
        backup.read_manifest(tmp_path)


def test_a_manifest_of_another_format_or_version_is_refused(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "tarball", "files": []}))
    with pytest.raises(Invalid, match="not an orgmem backup"):
        backup.read_manifest(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": backup.FORMAT, "format_version": 99, "files": []}))
    with pytest.raises(Invalid, match="format version"):
        backup.read_manifest(tmp_path)


def test_tombstones_destroy_restored_keys_and_leave_no_key_bytes(tmp_path):
    restored, live = tmp_path / "restored.sqlite", tmp_path / "live.sqlite"
    secret = os.urandom(32)
    for path in (restored, live):
        conn = sqlite3.connect(path)
        conn.executescript(backup._DATA_KEYS_SCHEMA)
        conn.execute("INSERT INTO data_keys VALUES ('k-erased', ?, 't'), ('k-kept', ?, 't')", (secret, b"kept" * 8))
        conn.commit()
        conn.close()
    conn = sqlite3.connect(live)
    conn.execute("DELETE FROM data_keys WHERE key_id = 'k-erased'")
    conn.execute("INSERT INTO destroyed_keys VALUES ('k-erased', '2026-01-01', 'erasure-1')")
    conn.commit()
    conn.close()
    tombstones = backup.tombstones_of(live)
    assert tombstones == [("k-erased", "2026-01-01", "erasure-1")]
    assert backup.apply_tombstones(restored, tombstones) == 1
    assert backup.apply_tombstones(restored, tombstones) == 0  # idempotent
    conn = sqlite3.connect(restored)
    assert [r[0] for r in conn.execute("SELECT key_id FROM data_keys")] == ["k-kept"]
    conn.close()
    assert secret not in restored.read_bytes()
    fresh = tmp_path / "none-yet.sqlite"  # a backup without a key store still learns the tombstones
    assert backup.apply_tombstones(fresh, tombstones) == 0 and backup.tombstones_of(fresh) == tombstones
    assert backup.apply_tombstones(tmp_path / "untouched.sqlite", []) == 0
    assert not (tmp_path / "untouched.sqlite").exists()


def test_revocations_carry_over(tmp_path):
    restored, live = tmp_path / "restored.sqlite", tmp_path / "live.sqlite"
    for path, revoked in ((restored, None), (live, "2026-02-02")):
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE api_keys (key_id TEXT PRIMARY KEY, revoked_at TEXT, revoked_by TEXT)")
        conn.execute("INSERT INTO api_keys VALUES ('a', ?, ?), ('b', NULL, NULL)", (revoked, revoked and "ops"))
        conn.commit()
        conn.close()
    assert backup.apply_revocations(restored, backup.revocations_of(live)) == 1
    conn = sqlite3.connect(restored)
    assert dict(conn.execute("SELECT key_id, revoked_at FROM api_keys")) == {"a": "2026-02-02", "b": None}
    conn.close()

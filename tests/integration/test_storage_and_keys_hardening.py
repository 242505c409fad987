"""Hardening, attacked on real files: storage failures are the server's (503 naming the component,
never 400), a key and its audit event exist together or not at all, a key grants no more than its
creator holds and can expire, and the data folder is private to orgmem's user.

Storage failures are real SQLite refusals, not mocks of our code: `PRAGMA query_only` makes the
driver refuse every write with SQLITE_READONLY (a read-only file, as root can't be made with chmod),
and a connection whose COMMIT fails with "disk I/O error" stands in for a full or failing disk at
the driver boundary.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from schemas.documents import DocumentIn
from schemas.events import DocumentObserved


def read_only(store) -> None:
    """Make an adapter's own connection refuse every write, as a read-only file would."""
    with store._lock:
        store._conn.execute("PRAGMA query_only=ON")


class FailingCommit:
    """A driver connection whose COMMIT fails as on a failing disk; everything else is the real one."""

    def __init__(self, conn: sqlite3.Connection):
        self._conn = conn

    def execute(self, sql, *args):
        if sql.strip().upper() == "COMMIT":
            raise sqlite3.OperationalError("disk I/O error")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def doc(i: int) -> DocumentObserved:
    return DocumentObserved(tenant="t", row_id=f"r{i}", document=DocumentIn(text=f"document {i}", author="a"))


# --- #6: storage failures are 503, naming the component ----------------------------------------
def test_event_log_write_failures_are_backend_unavailable(tmp_path):
    from services.adapters.event_log.sqlite import SqliteEventLog
    from services.api.problems import rule_for
    from services.errors import BackendUnavailable

    log = SqliteEventLog(tmp_path / "log.sqlite")
    try:
        log.append([doc(1)])
        read_only(log)
        with pytest.raises(BackendUnavailable) as refused:
            log.append([doc(2)])
        assert refused.value.component == "event log (sqlite)" and "readonly" in str(refused.value)
        assert rule_for(refused.value).status == 503
        assert log.head() == 1 and len(log.read(0, 10)) == 1  # reads keep being served

        with log._lock:
            log._conn.execute("PRAGMA query_only=OFF")
        real = log._conn
        log._conn = FailingCommit(real)
        with pytest.raises(BackendUnavailable, match="disk I/O error"):  # not masked by a failed ROLLBACK
            log.append([doc(3)])
        log._conn = real
        assert [e.event.row_id for e in log.read(0, 10)] == ["r1"]  # the failed append left nothing
        assert log.append([doc(4)])[0].position == 2
    finally:
        log.close()


def test_row_store_failures_are_backend_unavailable(tmp_path):
    from services.adapters.row_store.sqlite import SqliteRowStore
    from services.errors import BackendUnavailable

    rows = SqliteRowStore(tmp_path / "rows.sqlite")
    try:
        read_only(rows)
        for attempt in (lambda: rows.apply([], [], 5), rows.reset):
            with pytest.raises(BackendUnavailable) as refused:
                attempt()
            assert refused.value.component == "row store (sqlite)"
        assert rows.applied_position() == 0
    finally:
        rows.close()


# --- #6: a key and its audit event together -----------------------------------------------------
@contextmanager
def stores(tmp_path: Path):
    from services.adapters.event_log.sqlite import SqliteEventLog
    from services.adapters.key_store.sqlite import SqliteKeyStore

    store, log = SqliteKeyStore(tmp_path / "keys.sqlite"), SqliteEventLog(tmp_path / "log.sqlite")
    try:
        yield store, log
    finally:
        store.close()
        log.close()


def test_a_key_whose_audit_event_fails_never_verifies(tmp_path):
    from services.app.audit import create_key_audited
    from services.errors import BackendUnavailable

    with stores(tmp_path) as (store, log):
        made: list[str] = []
        create = store.create

        def spy(*args, **kwargs):  # the token the store handed out, which the caller never sees
            key, token = create(*args, **kwargs)
            made.append(token)
            return key, token

        store.create = spy
        read_only(log)
        with pytest.raises(BackendUnavailable, match="event log"):
            create_key_audited(store, log, "default", "ops", "admin", "tests", unrestricted=True)
        assert len(made) == 1 and store.verify(made[0]) is None
        assert store.list() == [] and store.count_active() == 0
        raw = sqlite3.connect(tmp_path / "keys.sqlite")
        assert raw.execute("SELECT COUNT(*) FROM api_keys").fetchone()[0] == 0  # deleted, not just disabled
        raw.close()

        with log._lock:
            log._conn.execute("PRAGMA query_only=OFF")
        key, token = create_key_audited(store, log, "default", "ops", "admin", "tests")
        assert store.verify(token).key_id == key.key_id
        audited = [e.event for e in log.read(0, 10)]
        assert [(e.action, e.details["key_id"]) for e in audited] == [("key.created", key.key_id)]


def test_a_key_left_pending_by_a_crash_never_verifies(tmp_path):
    """Killed between the audit append and the activation: the key exists, pending, and is inert."""
    with stores(tmp_path) as (store, _):
        key, token = store.create("default", "ops", "admin", "tests", unrestricted=True, pending=True)
        assert store.verify(token) is None and store.get(key.key_id) is None and store.list() == []
        store.activate(key.key_id)
        assert store.verify(token).key_id == key.key_id
        store.discard(key.key_id)  # only pending keys are discarded
        assert store.verify(token) is not None


# --- #9: expiry, and key files of the earlier version -------------------------------------------
def test_expired_keys_do_not_verify_even_when_cached(tmp_path):
    from services.errors import KeyRequestError

    with stores(tmp_path) as (store, _):
        soon = datetime.now(UTC) + timedelta(hours=1)
        key, token = store.create("default", "bot", "reader", "tests", expires_at=soon)
        assert store.verify(token).expires_at == soon and store.verify(token, cached_only=True) is not None
        assert store.list()[0].public()["expires_at"] == soon.isoformat()
        raw = sqlite3.connect(tmp_path / "keys.sqlite")
        with raw:  # time passes: the stored expiry is now behind us
            raw.execute("UPDATE api_keys SET expires_at = ? WHERE key_id = ?",
                        ((datetime.now(UTC) - timedelta(seconds=1)).isoformat(timespec="microseconds"), key.key_id))
        raw.close()
        assert store.verify(token, cached_only=True) is None and store.verify(token) is None
        assert store.list(include_revoked=False) == [] and store.count_active() == 0
        assert not store.list()[0].active
        for bad in (datetime.now(UTC) - timedelta(minutes=1), datetime(2030, 1, 1), datetime.now(UTC) + timedelta(days=4000)):
            with pytest.raises(KeyRequestError, match="expires_at"):
                store.create("default", "bot", "reader", "tests", expires_at=bad)


_OLD_SCHEMA = """
CREATE TABLE api_keys (
    key_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, principal TEXT NOT NULL, groups TEXT NOT NULL,
    role TEXT NOT NULL, unrestricted INTEGER NOT NULL DEFAULT 0, name TEXT NOT NULL DEFAULT '',
    salt BLOB NOT NULL, hash BLOB NOT NULL, params TEXT NOT NULL,
    created_at TEXT NOT NULL, created_by TEXT NOT NULL, revoked_at TEXT, revoked_by TEXT
);
CREATE INDEX api_keys_tenant ON api_keys(tenant, created_at);
"""


def test_key_files_of_the_earlier_version_keep_working(tmp_path):
    from services.adapters.key_store.sqlite import SqliteKeyStore, _hash

    salt, secret = os.urandom(16), "S" * 43
    raw = sqlite3.connect(tmp_path / "keys.sqlite")
    raw.executescript(_OLD_SCHEMA)
    with raw:
        raw.execute("INSERT INTO api_keys VALUES (?,?,?,?,?,?,?,?,?,?,?,?,NULL,NULL)",
                    ("0123456789ab", "default", "ann", json.dumps(["eng"]), "reader", 0, "old", salt,
                     _hash(secret, salt), json.dumps({"n": 2**14, "r": 8, "p": 1, "dklen": 32}),
                     datetime.now(UTC).isoformat(timespec="microseconds"), "tests"))
    raw.close()
    stores_ = [SqliteKeyStore(tmp_path / "keys.sqlite") for _ in range(2)]  # two processes open it at once
    try:
        key = stores_[1].verify(f"om_0123456789ab_{secret}")
        assert key is not None and key.principal == "ann" and key.expires_at is None
        _, token = stores_[0].create("default", "bob", "reader", "tests", expires_at=datetime.now(UTC) + timedelta(days=1))
        assert stores_[1].verify(token) is not None
    finally:
        for store in stores_:
            store.close()


# --- #9: a key never grants more than its creator holds -----------------------------------------
def test_grants_never_exceed_the_creator():
    from services.core.caller import Caller
    from services.core.keys import grant_refusal, readers_of

    root = Caller(tenant="acme", readers=None, name="root", role="admin")
    rhea = Caller(tenant="acme", readers=readers_of("rhea", ["eng"]), name="rhea", role="admin")
    assert grant_refusal(root, "acme", "anyone", ["finance"], "admin", True) is None
    assert grant_refusal(rhea, "acme", "Rhea", ["Eng"], "admin", False) is None
    assert grant_refusal(rhea, "acme", "rhea", [], "reader", False) is None
    refused = {
        "unrestricted": grant_refusal(rhea, "acme", "rhea", [], "reader", True),
        "finance": grant_refusal(rhea, "acme", "rhea", ["eng", "finance"], "reader", False),
        "mallory": grant_refusal(rhea, "acme", "mallory", [], "reader", False),
        "user:eng": grant_refusal(rhea, "acme", "eng", [], "reader", False),  # a group is not a principal
        "*": grant_refusal(rhea, "acme", "rhea", ["*"], "reader", False),
        "tenant": grant_refusal(root, "globex", "root", [], "reader", False),
        "role": grant_refusal(Caller(tenant="acme", readers=None, role="writer"), "acme", "w", [], "admin", False),
    }
    for word, reason in refused.items():
        assert reason is not None and word in reason, (word, reason)


# --- #12 and the dead letters: the data folder is private ---------------------------------------
def exposed(root: Path) -> list[str]:
    found = []
    for folder, dirs, files in os.walk(root):
        for name in (".", *dirs, *files):
            entry = Path(folder, name)
            mode = entry.lstat().st_mode
            if not stat.S_ISLNK(mode) and mode & 0o077:
                found.append(f"{entry.relative_to(root)} {stat.filemode(mode)}")
    return found


@contextmanager
def permissive_umask():
    old = os.umask(0o022)  # what a shell usually has: new files 0644, folders 0755
    try:
        yield
    finally:
        os.umask(old)


def test_data_folder_and_everything_in_it_is_private(tmp_path):
    from services.api.app import create_app
    from services.bootstrap import build_memory, key_store_for, open_event_log
    from services.connectors.base import ConnectorState, DeadLetter
    from services.settings import Settings
    from tests.conftest import LiveServer, free_port

    with permissive_umask():
        settings = Settings(data_dir=tmp_path / "data", indexer_poll_s=0.05,
                            auth={"rate_limit": "", "failed_auth_limit": "", "bootstrap_admin_key": False})
        store = key_store_for(settings)
        _, token = store.create("default", "root", "admin", "tests", unrestricted=True)
        store.close()
        memory, lock = build_memory(settings)
        try:
            with LiveServer(create_app(settings, memory), free_port(), token) as server:
                ingest = server.client.post("/v1/documents", json={"documents": [
                    {"text": "Finance only: the 2026 budget is frozen.", "acl": ["finance"]}]})
                assert ingest.status_code == 200, ingest.text
                hits = server.client.post("/v1/query", json={"q": "budget", "after": ingest.json()["position"]})
                assert hits.status_code == 200 and hits.json()["rows"]
                assert server.client.post("/v1/admin/keys", json={"principal": "bot", "role": "reader"}).status_code == 201
                ConnectorState(settings.data_dir, "files").record_dead_letters(
                    [DeadLetter("files", "x.txt", "cannot parse: the 2026 budget is frozen")])
                live = Path(settings.data_dir)
                assert (live / "log.sqlite-wal").exists() and (live / "log.sqlite-shm").exists()
                assert exposed(live) == []  # while it runs, with the WAL files and index segments open
        finally:
            memory.close()
            lock.release()
        open_event_log(settings).close()  # a CLI process opens the log alone
        data = Path(settings.data_dir)
        names = {p.name for p in data.rglob("*")}
        assert {"log.sqlite", "keys.sqlite", "rows.sqlite", "projections.lock", "dead_letters.jsonl",
                "lexical", "vectors"} <= names, names
        assert exposed(data) == []


def test_an_existing_open_data_folder_is_tightened(tmp_path, caplog):
    from services.bootstrap import DataFolderLock

    data = tmp_path / "old"
    (data / "connectors").mkdir(parents=True)
    for folder in (data, data / "connectors"):
        folder.chmod(0o755)
    (data / "connectors" / "dead_letters.jsonl").write_text('{"reason": "document text"}\n')
    (data / "connectors" / "dead_letters.jsonl").chmod(0o644)
    (data / "log.sqlite").write_bytes(b"")
    (data / "log.sqlite").chmod(0o644)
    with permissive_umask(), caplog.at_level(logging.WARNING, logger="services.bootstrap"):
        DataFolderLock(data).release()
    assert exposed(data) == []
    assert "removed group/other permissions from 4" in caplog.text


def test_cli_keys_carry_an_expiry(tmp_path, capsys):
    from services.cli.main import main

    data = str(tmp_path / "data")
    assert main(["keys", "create", "--data", data, "--principal", "ci", "--role", "reader", "--expires-in", "12h",
                 "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    left = datetime.fromisoformat(made["expires_at"]) - datetime.now(UTC)
    assert timedelta(hours=11, minutes=59) < left <= timedelta(hours=12)
    assert main(["keys", "create", "--data", data, "--principal", "ci", "--role", "reader",
                 "--expires-at", "2001-01-01"]) == 2
    assert "expires_at" in capsys.readouterr().err
    assert main(["keys", "list", "--data", data]) == 0
    assert "active until" in capsys.readouterr().out
    assert main(["audit", "--data", data, "--json"]) == 0
    audited = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(a["action"], a["details"]["expires_at"]) for a in audited] == [("key.created", made["expires_at"])]

"""Exports, backups and restores are audited acts (issue 41, docs/audit.md): each shows in
`orgmem audit --json` with who did it and what it was done to, run as real `orgmem` processes on
real data folders. A restore records itself in the folder it restored, after the swap, so the
record is in the folder that is live; the folder put aside keeps its own trail."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from schemas.documents import DocumentIn
from services.core.caller import Caller

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, data: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORGMEM_DATA_DIR": str(data)}
    done = subprocess.run([sys.executable, "-m", "services.cli", "--log-level", "WARNING", *args], capture_output=True,
                          text=True, env=env, timeout=600, cwd=ROOT)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def _trail(data: Path, *options: str) -> list[dict]:
    return [json.loads(line) for line in _cli("audit", "--json", *options, data=data).stdout.splitlines()]


def _folder(data: Path) -> None:
    from services.bootstrap import build_memory
    from services.settings import Settings

    memory, lock = build_memory(Settings(data_dir=data))
    try:
        memory.ingest([DocumentIn(text="The travel policy allows economy class.", author="ann"),
                       DocumentIn(text="Hiring is paused until March.", author="bo")])
        memory.ingest([DocumentIn(text="Globex keeps its own notes.", author="gus")], Caller(tenant="globex"))
        memory.catch_up()
    finally:
        memory.close()
        lock.release()


def test_exports_backups_and_restores_are_in_the_audit_trail_with_actor_and_target(tmp_path):
    data, backup, restored = tmp_path / "data", tmp_path / "backup-1", tmp_path / "restored"
    _folder(data)
    _cli("export", "--tenant", "default", "--out", str(tmp_path / "default.jsonl"), "--actor", "ops:alice", data=data)
    _cli("export", "--format", "parquet", "--out", str(tmp_path / "all.parquet"), data=data)
    _cli("backup", str(backup), "--actor", "ops:bob", data=data)
    manifest = json.loads((backup / "manifest.json").read_text())

    trail = _trail(data)
    exports = [e for e in trail if e["action"] == "export"]
    assert [(e["tenant"], e["actor"], e["details"]["format"], e["details"]["file"], e["details"]["rows"])
            for e in exports] == [
        ("default", "ops:alice", "jsonl", str(tmp_path / "default.jsonl"), 2),
        ("*", f"cli:{getpass.getuser()}", "parquet", str(tmp_path / "all.parquet"), 3)]  # every tenant: '*'
    (backed,) = [e for e in trail if e["action"] == "backup"]
    assert backed["kind"] == "backup" and backed["actor"] == "ops:bob" and backed["tenant"] == "*"
    assert backed["details"]["dir"] == str(backup) and backed["details"]["online"] is False
    assert backed["details"]["files"] == len(manifest["files"]) and backed["details"]["log_head"] == manifest["log_head"]
    assert "Hiring" not in json.dumps(trail)  # what was exported is never in the record
    assert [e["action"] for e in _trail(data, "--kind", "backup")] == ["backup"]
    assert {e["action"] for e in _trail(data, "--kind", "export", "--kind", "backup")} == {"export", "backup"}
    assert [e["action"] for e in _trail(data, "--tenant", "globex")] == []  # its rows were in '*' acts only

    # A restore into a new folder: recorded there, not in the folder the backup came from.
    _cli("restore", str(backup), "--data", str(restored), "--actor", "ops:carol", data=restored)
    (act,) = [e for e in _trail(restored) if e["action"] == "restore"]
    assert act["actor"] == "ops:carol" and act["tenant"] == "*"
    assert act["details"]["backup"] == str(backup) and act["details"]["data_dir"] == str(restored)
    assert act["details"]["checkpoint"] == manifest["checkpoint"] and act["details"]["replaced"] is None
    assert act["details"]["backup_created_at"] == manifest["created_at"]
    assert not [e for e in _trail(data) if e["action"] == "restore"]
    # The restored log is the backup's: the exports made before it are there, and the record of
    # the backup itself (appended after the copy) is not.
    assert [e["action"] for e in _trail(restored)] == ["export", "export", "restore"]

    # Restored in place of the live folder: the record is in the folder that is live now, and
    # the folder put aside keeps its trail, the backup's record included.
    _cli("restore", str(backup), "--data", str(data), "--replace", "--actor", "ops:dan", data=data)
    (act,) = [e for e in _trail(data) if e["action"] == "restore"]
    aside = Path(act["details"]["replaced"])
    assert act["actor"] == "ops:dan" and act["details"]["replace"] is True and aside.name.startswith("data.replaced-")
    assert [e["action"] for e in _trail(aside)] == ["export", "export", "backup"]
    text = _cli("audit", "--kind", "restore", data=data).stdout
    assert "restore" in text and "by ops:dan" in text and str(backup) in text


class CountingLog:
    """A real SQLite log that counts the events its reads return (how much of the log was read)."""

    def __init__(self, event_log):
        self.log, self.events_read = event_log, 0

    def read(self, after, limit):
        found = self.log.read(after, limit)
        self.events_read += len(found)
        return found

    def __getattr__(self, name):
        return getattr(self.log, name)


def test_the_tenants_trail_is_read_back_from_the_head_and_from_since(tmp_path, monkeypatch):
    import time
    from datetime import UTC, datetime

    from services.app import audit
    from services.app.memory import append_documents
    from services.bootstrap import open_event_log
    from services.settings import Settings

    event_log = open_event_log(Settings(data_dir=tmp_path / "d"))
    try:
        marks = []
        for n in range(6):
            docs = [DocumentIn(text=f"note {n}-{i}", author="a") for i in range(1000)]
            append_documents(event_log, docs, Caller(tenant="acme" if n % 2 else "globex"))
            audit.record_admin_action(event_log, "acme", "export", "ops", {"n": n, "file": f"acme-{n}.jsonl"})
            audit.record_admin_action(event_log, "globex", "key.created", "gx", {"n": n})
            audit.record_admin_action(event_log, "*", "backup", "ops", {"n": n, "dir": "/srv/b", "online": True})
            marks.append(datetime.now(UTC))
            time.sleep(0.02)
        log = CountingLog(event_log)
        everything = [audit.entry_record(*e) for e in audit.audit_entries(event_log)]
        for since in (None, marks[2], marks[5]):
            for kinds in ((), ("export",), ("backup", "key")):
                for limit in (1, 4, 100):
                    got, more = audit.tenant_trail(log, "acme", since, limit, kinds)
                    want = [dict(r, details={k: v for k, v in r["details"].items()
                                             if r["tenant"] == "acme" or k in audit.HOST_WIDE_FIELDS})
                            for r in reversed(everything) if r["tenant"] in ("acme", "*")
                            and (since is None or r["at"] >= since) and (not kinds or r["kind"] in kinds)]
                    assert got == want[:limit] and more == (len(want) > limit), (since, kinds, limit)
                    assert all(r["tenant"] != "globex" and "/srv/b" not in str(r) for r in got)
        # The newest acts are near the head: a short trail is read from there, not from the start.
        log.events_read = 0
        got, more = audit.tenant_trail(log, "acme", limit=2, batch=100)
        assert [r["action"] for r in got] == ["backup", "export"] and more
        assert log.events_read < 2000, log.events_read  # of 6018
        # `since` is found by bisection (with the clocks taken as one here): the log before it is not read.
        monkeypatch.setattr(audit, "CLOCK_SKEW", audit.timedelta(0))
        log.events_read = 0
        got, _ = audit.tenant_trail(log, "acme", since=marks[4], limit=100, batch=100)
        assert [r["action"] for r in got] == ["backup", "export"] and got[1]["details"]["n"] == 5
        assert log.events_read < 1100, log.events_read  # the last 1003 events, and the bisection's reads
        log.events_read = 0
        assert [e[1] for e in audit.audit_entries(log, "globex", since=marks[4], batch=100)] == ["key.created"]
        assert log.events_read < 1100, log.events_read
    finally:
        event_log.close()

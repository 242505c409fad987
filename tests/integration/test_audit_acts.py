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

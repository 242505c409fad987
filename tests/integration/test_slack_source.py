"""A Slack export end to end on a real data folder, through `orgmem connect slack`: private
channels readable by their members only (the access map), a rerun adds nothing, an edit is a new
version that supersedes the old one, a deleted message is erased (its marker is in no file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

from schemas.documents import DocumentIn
from services.bootstrap import open_memory
from services.connectors.contract import MemoryTree, Version, source_id_of
from services.connectors.sources.slack import SlackSource
from services.core.write_rules import row_id_for
from services.settings import Settings
from tests.integration.test_erasure import _grep
from tests.unit.connectors.sources.chat_fixtures import message, slack_export, ts, write_folder

ROOT = Path(__file__).resolve().parents[2]
SECRET = "zqx" + uuid.uuid4().hex[:10] + "7"  # unique to this run: the deleted message's marker
DAY = "2024-03-04"


def _export(*, edited: bool = False, deleted: bool = False) -> dict[str, bytes]:
    parent = ts(DAY, 0)
    general = [message(parent, "U1", "Launch moves to Friday" + (" after the review" if edited else ""),
                       edited=ts(DAY, 50) if edited else None),
               message(ts(DAY, 10), "U2", "Noted, I will tell the customer", thread_ts=parent)]
    private = [message(ts(DAY, 20), "U1", "Budget cut is 20 percent")]
    if not deleted:
        private.append(message(ts(DAY, 30), "U2", f"Keep {SECRET} quiet until the board meets",
                               thread_ts=ts(DAY, 20)))
    return slack_export({"general": {DAY: general}, "secret-plans": {DAY: private}})


def _connect(data: Path, export: Path, access: Path) -> dict:
    env = {**os.environ, "ORGMEM_DATA_DIR": str(data)}
    done = subprocess.run([sys.executable, "-m", "services.cli", "connect", "slack", str(export),
                           "--access-map", str(access)], capture_output=True, text=True, env=env, timeout=600,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _rows(files: dict[str, bytes]) -> dict[str, str]:
    """item -> row id of its version in this export."""
    found = [f for f in SlackSource().read(MemoryTree(files), {}) if isinstance(f, Version)]
    return {f.item: row_id_for("default", DocumentIn(text="-", source="slack", source_id=source_id_of(f)))
            for f in found}


def test_a_slack_export_keeps_permissions_versions_and_deletions(tmp_path):
    data, export = tmp_path / "data", tmp_path / "export"
    access = tmp_path / "access.json"
    access.write_text(json.dumps({"users": {"U1": "dana@example.com"}}))  # U2 is mapped by nobody

    first = _export()
    write_folder(first, export)
    report = _connect(data, export, access)
    assert report["documents"] == 2 and report["dead_letters"] == 0
    assert report["unmapped"] == 1  # U2, a member of the private channel
    assert _connect(data, export, access)["documents"] == 0  # a rerun adds nothing

    before = _rows(first)
    edited = _export(edited=True)
    write_folder(edited, export)
    report = _connect(data, export, access)
    assert report["documents"] == 1 and report["superseded"] == 1
    after = _rows(edited)

    deleted = _export(edited=True, deleted=True)
    write_folder(deleted, export)
    report = _connect(data, export, access)
    assert report["removed"] == 1 and report["documents"] == 1
    gone = _rows(deleted)

    settings = Settings(data_dir=data)
    with open_memory(settings, role="indexer") as memory:
        memory.catch_up()
        general = next(i for i in before if i.startswith("C1/"))
        private = next(i for i in before if i.startswith("G1/"))
        assert memory.stored_row(before[general]).superseded_by == after[general]
        assert memory.stored_row(after[general]).superseded_by is None
        kept = memory.stored_row(gone[private])
        # The private thread: its members only; U2 unmapped grants nobody, never the whole tenant.
        assert kept.acl == ["user:dana@example.com", "user:~slack:U2"]
        assert SECRET not in kept.text
        assert memory.stored_row(before[private]) is None  # the version holding the message: erased
    assert _grep(data, [SECRET]) == []

"""`orgmem audit` on a real data folder lists the erasures: who, why, how many rows and the
target as recorded (a keyed hash for a subject, never the name), in text and in --json (one
JSON object per line)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from schemas.documents import DocumentIn
from services.core.caller import Caller

ROOT = Path(__file__).resolve().parents[2]


def _cli(*args: str, data: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORGMEM_DATA_DIR": str(data)}
    return subprocess.run([sys.executable, "-m", "services.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=ROOT)


def test_audit_lists_a_subject_erasure_without_naming_the_subject(tmp_path):
    from services.app.memory import append_documents
    from services.bootstrap import open_event_log
    from services.settings import Settings

    event_log = open_event_log(Settings(data_dir=tmp_path / "d"))
    append_documents(event_log, [DocumentIn(text="Zelda Quarrington's note on the budget", author="zelda"),
                                 DocumentIn(text="Another note", author="bo")], Caller())
    event_log.close()
    done = _cli("erase", "--subject", "zelda", "--reason", "left the company", "--json", data=tmp_path / "d")
    assert done.returncode == 0, done.stderr

    listed = _cli("audit", "--json", data=tmp_path / "d")
    assert listed.returncode == 0, listed.stderr
    entries = [json.loads(line) for line in listed.stdout.splitlines()]
    erasures = [e for e in entries if e["action"].startswith("erasure.")]
    assert len(erasures) == 1, entries
    (erasure,) = erasures
    assert erasure["action"] == "erasure.subject" and erasure["details"]["reason"] == "left the company"
    assert erasure["details"]["rows"] == 1 and erasure["tenant"] == "default"
    target = erasure["details"]["target"]
    assert target and "zelda" not in target.lower()  # the keyed hash as recorded, not the name

    text = _cli("audit", "--action", "erasure.", data=tmp_path / "d")
    assert text.returncode == 0 and "erasure.subject" in text.stdout and "left the company" in text.stdout
    assert "zelda" not in text.stdout.lower()
    other = _cli("audit", "--json", "--tenant", "other", data=tmp_path / "d")
    assert other.returncode == 0 and other.stdout.strip() == ""  # another tenant's erasure is not its own

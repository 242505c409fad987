"""Erasure reaches every file (docs/erasure.md): documents naming a subject, with a unique marker,
go in through the API; a backup is taken; the subject is erased; the backup is restored; then
every file under the data folder is read as bytes and holds neither the marker nor the subject's
name, while the ErasureRecorded event is in the audit log and no read path returns the text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from schemas.documents import DocumentIn
from schemas.events import ErasureRecorded, RowArchived, RowDerived
from services.core.caller import Caller
from services.errors import Gone, Invalid, NotFound
from tests.conftest import create_key

MARKER = "zqx" + uuid.uuid4().hex[:12] + "7"  # unique to this run; ends in a digit, which no stemmer cuts
SUBJECT = "Ottilie Vandermeer"
ADDRESS = "ottilie@example.org"


def _forms(text: str) -> list[bytes]:
    return [f.encode(enc) for f in {text, text.lower(), text.upper()} for enc in ("utf-8", "utf-16-le", "utf-16-be")]


_GREP = """
import json, sys
from pathlib import Path
folder, forms = Path(sys.argv[1]), [bytes.fromhex(f) for f in json.loads(sys.argv[2])]
hits = []
for path in sorted(folder.rglob("*")):
    if path.is_file() and not path.is_symlink():
        data = path.read_bytes()
        hits += [f"{path.relative_to(folder)}: {f!r}" for f in forms if f in data]
print(json.dumps(hits))
"""


def _grep(folder: Path, needles: list[str]) -> list[str]:
    """Every file's bytes, read in another process: reading a live SQLite file here and closing it
    would drop the POSIX locks that this process's open connections hold on it."""
    forms = [f.hex() for n in needles for f in _forms(n)]
    done = subprocess.run([sys.executable, "-c", _GREP, str(folder), json.dumps(forms)], capture_output=True,
                          text=True, timeout=300, check=True)
    return json.loads(done.stdout)


def _documents() -> list[dict]:
    return [
        {"text": f"Salary review for {SUBJECT}: marker {MARKER} agreed", "author": f"{SUBJECT} <{ADDRESS}>",
         "title": f"Review {MARKER}", "thread": "hr-review", "tags": [f"person:{SUBJECT}"], "date": "2025-03-01"},
        {"text": f"Follow-up call notes {MARKER} with the team", "author": "Bram", "participants": [SUBJECT],
         "thread": "hr-review", "date": "2025-03-02", "source": "notes", "source_id": "call-17"},
        # the same text as the first again, from another source: a repeat, skipped, erased with it
        {"text": f"Salary review for {SUBJECT}: marker {MARKER} agreed", "author": f"{SUBJECT} <{ADDRESS}>",
         "source": "notes", "source_id": "copy-1"},
        {"text": "Canteen opens at nine from Monday", "author": "Bram", "thread": "facilities", "date": "2025-03-03"},
    ]


def _cli(*args: str, data: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "ORGMEM_DATA_DIR": str(data)}
    return subprocess.run([sys.executable, "-m", "services.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=Path(__file__).resolve().parents[2])


def _has_command(name: str) -> bool:
    from services.cli.main import build_parser

    return name in build_parser()._subparsers._group_actions[0].choices


@pytest.fixture
def served(settings):
    """A memory and a live server whose folder lock the test can release (to restore a backup)."""
    from services.api.app import create_app
    from services.bootstrap import build_memory
    from tests.conftest import LiveServer, free_port

    memory, lock = build_memory(settings)
    server = LiveServer(create_app(settings, memory), free_port(), create_key(settings.data_dir))
    server.__enter__()

    def stop():
        if server.thread.is_alive():
            server.__exit__()
            memory.close()
            lock.release()

    yield memory, server, stop
    stop()


def test_erasing_a_subject_leaves_no_byte_of_them_in_any_file(settings, served, tmp_path):
    memory, live_server, stop = served
    client = live_server.client
    ids = client.post("/v1/documents", json={"documents": _documents()}).json()["row_ids"]
    from services.connectors.base import ConnectorState, DeadLetter

    ConnectorState(settings.data_dir, "email", "default").record_dead_letters(
        [DeadLetter("email", f"inbox/{SUBJECT}.eml", f"bad date in a mail from {ADDRESS}")])
    memory.catch_up()
    hits = client.post("/v1/query", json={"q": MARKER, "k": 10}).json()["rows"]
    assert {h["row_id"] for h in hits} >= {ids[0], ids[1]}
    # The grep can fail: before the erasure the projections and the dead letter hold the text.
    assert any(hit.startswith("projections/") for hit in _grep(settings.data_dir, [MARKER]))
    assert any(hit.startswith("connectors/") for hit in _grep(settings.data_dir, [ADDRESS]))

    backup = tmp_path / "backup"
    if _has_command("backup"):
        done = _cli("backup", str(backup), "--server", live_server.url, "--key", live_server.token, data=settings.data_dir)
        assert done.returncode == 0, done.stderr
    reader = create_key(settings.data_dir, role="reader", principal="r")  # the key store still works after it

    # Wrong role, no reason, two targets: refused before anything is destroyed.
    refused = client.post("/v1/admin/erasures", json={"subject": SUBJECT, "reason": "x"},
                          headers={"Authorization": f"Bearer {reader}"})
    assert refused.status_code == 403, refused.text
    assert client.post("/v1/admin/erasures", json={"subject": SUBJECT}).status_code == 422
    assert client.post("/v1/admin/erasures", json={"subject": SUBJECT, "row_id": ids[0], "reason": "x"}).status_code == 422

    answer = client.post("/v1/admin/erasures", json={"subject": SUBJECT.upper(), "reason": "right to erasure, ticket 7"})
    assert answer.status_code == 201, answer.text
    result = answer.json()
    assert sorted(result["row_ids"]) == sorted({ids[0], ids[1], ids[2]}) and result["purged"]
    assert result["rows"] == 3 and result["dead_letters_dropped"] == 1
    assert ids[3] not in result["row_ids"]

    for rid in ids[:3]:
        assert client.get(f"/v1/rows/{rid}").status_code == 410
    assert client.get(f"/v1/rows/{ids[3]}").status_code == 200
    assert MARKER not in client.post("/v1/query", json={"q": MARKER, "k": 10}).text
    assert MARKER not in client.post("/v1/query", json={"q": "salary review call notes", "k": 10}).text
    assert client.get("/v1/threads/hr-review").status_code == 404
    if _has_command("export"):
        exported = tmp_path / "export.jsonl"
        done = _cli("export", "--format", "jsonl", "--out", str(exported), "--server", live_server.url,
                    "--key", live_server.token, data=settings.data_dir)
        assert done.returncode == 0, done.stderr
        text = exported.read_text(encoding="utf-8")
        assert ids[3] in text and MARKER not in text and SUBJECT not in text
    # Re-ingesting an erased document adds nothing: its keys are gone, so it is not appended.
    again = client.post("/v1/documents", json={"documents": [_documents()[0]]}).json()
    memory.catch_up()
    assert client.get(f"/v1/rows/{again['row_ids'][0]}").status_code == 410

    erasures = [e.event for e in memory.read_log(0, 10_000) if isinstance(e.event, ErasureRecorded)]
    assert len(erasures) == 1 and erasures[0].reason == "right to erasure, ticket 7"
    assert erasures[0].actor.startswith("test-admin") and erasures[0].rows == 3
    assert SUBJECT.lower() not in json.dumps(erasures[0].model_dump()).lower()

    if backup.exists():
        stop()
        done = _cli("restore", str(backup), "--replace", "--data", str(settings.data_dir), data=settings.data_dir)
        assert done.returncode == 0, done.stderr

    from services.bootstrap import open_memory

    from services.app.erasure import purge_erased

    with open_memory(settings) as reopened:
        purge_erased(reopened, settings.data_dir)  # what a restore runs; idempotent
        reopened.rebuild()  # a replay of the log cannot recover the text: erased stays erased
        with pytest.raises(Gone):
            reopened.row(ids[0], Caller())
        assert reopened.row(ids[3], Caller())[0].text.startswith("Canteen")
        audit = [e.event for e in reopened.read_log(0, 10_000)
                 if isinstance(e.event, ErasureRecorded) or getattr(e.event, "action", "") == "erasure_reapplied"]
    assert audit  # the erasure, or (after restoring the older backup) its re-application

    assert _grep(settings.data_dir, [MARKER, SUBJECT, ADDRESS, "Vandermeer"]) == []


def test_erasing_a_row_erases_what_maintenance_derived_from_it(memory):
    docs = [DocumentIn(text=f"Policy draft {MARKER} one", author="ann"),
            DocumentIn(text="Policy draft two, the same policy", author="ann")]
    first, second = memory.ingest(docs, Caller()).row_ids
    memory.catch_up()
    merged = DocumentIn(text=f"Policy draft {MARKER} one; two", author="ann")
    memory.append([RowDerived(row_id="d" + "0" * 23, document=merged, sources=[first, second], run_id="run1"),
                   RowArchived(row_id=first, run_id="run1"), RowArchived(row_id=second, run_id="run1")])
    memory.catch_up()
    from services.app.erasure import erase

    result = erase(memory, "default", actor="test", reason="never should have been ingested", row_id=first)
    assert set(result.row_ids) == {first, "d" + "0" * 23} and result.derived_row_ids == ["d" + "0" * 23]
    assert result.restored_row_ids == [second]
    row, history = memory.row(second, Caller())
    assert row.state == "active" and history[-1].change == "restored"
    with pytest.raises(Gone):
        memory.row("d" + "0" * 23, Caller())
    with pytest.raises(NotFound):  # erased already: nothing left to erase
        erase(memory, "default", actor="test", reason="again", row_id=first)
    with pytest.raises(NotFound):  # another tenant's erasure never reaches this tenant's rows
        erase(memory, "other", actor="test", reason="x", row_id=second)
    with pytest.raises(Invalid):
        erase(memory, "default", actor="test", reason="  ", row_id=second)


def test_a_log_written_before_encryption_is_refused_until_migrated(tmp_path):
    from services.bootstrap import build_memory, migrate_encrypt, open_event_log
    from services.errors import OrgmemError
    from services.settings import Settings

    plain = Settings(data_dir=tmp_path / "d", erasure={"encrypt": False})
    event_log = open_event_log(plain)
    from services.app.memory import append_documents

    append_documents(event_log, [DocumentIn(text=f"old plaintext {MARKER}", author="ann")], Caller())
    event_log.close()
    assert MARKER.encode() in (tmp_path / "d" / "log.sqlite").read_bytes()
    encrypted = Settings(data_dir=tmp_path / "d")
    with pytest.raises(OrgmemError, match="orgmem migrate encrypt"):
        build_memory(encrypted)
    # The refusal leaves no key file behind (one would mark the log as encrypted): the message's
    # other remedy, encryption off, still opens the folder.
    assert not list((tmp_path / "d").glob("data-keys.sqlite*"))
    mem, lock = build_memory(plain)
    mem.close()
    lock.release()
    done = _cli("migrate", "encrypt", data=tmp_path / "d")
    assert done.returncode == 0 and "sealed 1 " in done.stderr, done.stderr
    assert migrate_encrypt(encrypted) == 0  # resumable: what is sealed stays as it is
    assert MARKER.encode() not in (tmp_path / "d" / "log.sqlite").read_bytes()
    mem, lock = build_memory(encrypted)
    try:
        mem.catch_up()
        assert mem.counts()["active"] == 1
    finally:
        mem.close()
        lock.release()
    done = _cli("erase", "--subject", "ANN", "--reason", "left the company", "--json", data=tmp_path / "d")
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["row_ids"]) == 1
    assert _cli("erase", "--subject", "ann", data=tmp_path / "d").returncode == 2  # --reason is required
    assert _grep(tmp_path / "d", [MARKER]) == []


def test_erasing_a_source_item_with_or_without_its_source(memory):
    from services.app.erasure import erase

    docs = [DocumentIn(text=f"Ticket {MARKER} body", author="ann", source="jira-x", source_id="OPS-1"),
            DocumentIn(text="Another ticket", author="ann", source="jira-x", source_id="OPS-2"),
            DocumentIn(text="Same id, other source", author="bo", source="csv-y", source_id="OPS-1")]
    one, two, other = memory.ingest(docs, Caller()).row_ids
    memory.catch_up()
    exact = erase(memory, "default", actor="t", reason="x", source_id="OPS-1", source="jira-x")
    assert exact.row_ids == [one] and exact.by == "source"
    anywhere = erase(memory, "default", actor="t", reason="x", source_id="OPS-1")
    assert anywhere.row_ids == [other]  # the jira-x item is erased already
    assert memory.row(two, Caller())[0].source_id == "OPS-2"
    with pytest.raises(NotFound):
        erase(memory, "default", actor="t", reason="x", source_id="OPS-404", source="jira-x")
    event = [e.event for e in memory.read_log(0, 100) if isinstance(e.event, ErasureRecorded)][0]
    assert "OPS-1" not in event.target and len(event.target) == 32  # a keyed hash, not the id

"""Mail attachments end to end on a real data folder, through `orgmem connect email`: each readable
attachment is a row whose parent is its message's row, in the message's thread, read by the
message's readers; a broken PDF is a dead letter while its message and the other attachments go
in; an image is counted skipped; a rerun adds nothing; GET /v1/rows/{id} shows the parent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from schemas.documents import DocumentIn
from services.core.write_rules import row_id_for
from tests.conftest import create_key
from tests.unit.connectors.test_email_attachments import message, pdf_bytes

ROOT = Path(__file__).resolve().parents[2]


def _connect(data: Path, folder: Path) -> tuple[dict, str]:
    env = {**os.environ, "ORGMEM_DATA_DIR": str(data)}
    done = subprocess.run([sys.executable, "-m", "services.cli", "connect", "email", str(folder),
                           "--acl-from-participants"], capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _row(source_id: str) -> str:
    return row_id_for("default", DocumentIn(text="-", source="email", source_id=source_id))


def _mail_folder(folder: Path) -> None:
    folder.mkdir(parents=True)
    msg = message("board@example.org", subject="Board pack")
    msg.add_attachment("Agenda: budget, hiring", filename="agenda.txt")
    msg.add_attachment("<p>Minutes of <i>March</i></p>", subtype="html", filename="minutes.html")
    msg.add_attachment(pdf_bytes("capital plan 2026"), maintype="application", subtype="pdf", filename="plan.pdf")
    msg.add_attachment(b"%PDF-1.7\n" + bytes(range(256)) * 4, maintype="application", subtype="pdf",
                       filename="broken.pdf")
    msg.add_attachment(b"\x89PNG\r\n\x1a\n" + bytes(40), maintype="image", subtype="png", filename="logo.png")
    (folder / "board.eml").write_bytes(msg.as_bytes())
    chunks = []
    for n in (1, 2):
        m = message(f"weekly{n}@example.org", subject=f"Weekly {n}")
        m.add_attachment(f"status of week {n}", filename=f"week-{n}.md")
        chunks.append(b"From ana@example.org Mon Dec  1 10:00:00 2025\n" + m.as_bytes() + b"\n")
    (folder / "weekly.mbox").write_bytes(b"".join(chunks))


def test_mail_attachments_are_rows_linked_to_their_message(tmp_path):
    from services.api.app import create_app
    from services.bootstrap import build_memory
    from services.settings import Settings
    from tests.conftest import LiveServer, free_port

    data, folder = tmp_path / "data", tmp_path / "mail"
    _mail_folder(folder)
    report, stderr = _connect(data, folder)
    # 3 messages; board: agenda, minutes, plan (PDF needs the extractor); weekly 1 and 2: one each.
    assert report["items_seen"] == 3 and report["documents"] == 8
    assert report["dead_letters"] == 1 and f"{folder / 'board.eml'}#attachment/4/broken.pdf" in stderr
    assert report["skipped"] == {"attachment: image/png (no text extractor for this type)": 1}
    assert _connect(data, folder)[0]["documents"] == 0  # unchanged files: nothing read again
    (folder / "weekly.mbox").write_bytes((folder / "weekly.mbox").read_bytes() + b"\n")  # same items, new bytes
    touched, _ = _connect(data, folder)
    assert touched["documents"] == touched["already_known"] == 4

    settings = Settings(data_dir=data, auth={"enabled": True, "rate_limit": "", "failed_auth_limit": ""})
    memory, lock = build_memory(settings)
    try:
        memory.catch_up()
        board = memory.stored_row(_row("board@example.org"))
        plan = memory.stored_row(_row("board@example.org#attachment/3/plan.pdf"))
        agenda = memory.stored_row(_row("board@example.org#attachment/1/agenda.txt"))
        week = memory.stored_row(_row("weekly2@example.org#attachment/1/week-2.md"))
        assert board.parent is None and "capital plan 2026" in plan.text
        for row in (plan, agenda):
            assert row.parent == board.row_id and row.thread == board.thread and row.acl == board.acl
            assert row.title in row.text.splitlines()[0] and "Board pack" in row.text.splitlines()[0]
        assert week.parent == _row("weekly2@example.org") and memory.stored_row(week.parent) is not None
        assert memory.stored_row(_row("board@example.org#attachment/4/broken.pdf")) is None
        assert memory.counts()["active"] == 8  # the touched mbox's 4 documents added no row
        server = LiveServer(create_app(settings, memory), free_port(), create_key(data))
        with server:
            got = server.client.get(f"/v1/rows/{plan.row_id}")
            assert got.status_code == 200 and got.json()["row"]["parent"] == board.row_id
            assert server.client.get(f"/v1/rows/{board.row_id}").json()["row"]["parent"] is None
            hits = server.client.post("/v1/query", json={"q": "capital plan 2026 plan.pdf"}).json()["rows"]
            parents = {hit["row_id"]: hit["parent"] for hit in hits}
            assert parents[plan.row_id] == board.row_id and parents.get(board.row_id, None) is None
    finally:
        memory.close()
        lock.release()

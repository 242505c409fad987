"""`orgmem backup` / `restore` / `export` (issue 21), against real `orgmem serve` processes, real
SQLite, tantivy and Qdrant Edge folders.

- An online backup taken while documents stream in restores into a folder that answers a fixed
  query set with the same row ids, in the same order, as the log cut at the backup's head.
- A damaged backup (one byte, a hostile manifest path, no manifest) is refused before anything is used.
- A server killed with SIGKILL in the middle of a backup leaves no folder under the backup's name.
- Exports round-trip (JSONL and Parquet read back with pyarrow), per tenant, history included,
  and the HTTP export gives an admin only its tenant's rows that it may read.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest

from bench.server import start_server
from schemas.documents import DocumentIn
from schemas.events import RowArchived
from services.adapters.data_folder import backup as backup_files
from services.app.backup import ProjectionHolds, take_backup
from services.app.export import export_rows
from services.bootstrap import build_memory, export_sink
from services.cli.backup import ServerHolder
from services.cli.main import main
from services.core.caller import Caller
from services.errors import OrgmemError
from services.settings import Settings
from tests.conftest import create_key, free_port
from tests.integration.test_rebuild import QUERIES, corpus, top_ids

pytestmark = pytest.mark.slow

ORGMEM = [sys.executable, "-m", "services.cli", "--log-level", "WARNING"]


def _settings(data: Path) -> Settings:
    return Settings(data_dir=data, indexer_poll_s=0.05)


def _answers(data: Path):
    memory, lock = build_memory(_settings(data))
    try:
        memory.catch_up()
        return top_ids(memory), memory.counts(), memory.head()
    finally:
        memory.close()
        lock.release()


def _post(url, token, docs):
    body = {"documents": [d.model_dump(mode="json", exclude_none=True) for d in docs]}
    response = httpx.post(url + "/v1/documents", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()["position"]


def _wait_indexed(url, position, timeout_s=120):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if httpx.get(url + "/readyz", timeout=5).json()["applied_position"] >= position:
            return
        time.sleep(0.1)
    raise AssertionError(f"position {position} not indexed in {timeout_s} s")


def _log_cut_at(source: Path, head: int, target: Path) -> None:
    """A data folder holding only the source folder's log up to `head` (the reference), and the
    data keys its sealed events need."""
    target.mkdir(mode=0o700)
    if (source / "data-keys.sqlite").exists():
        keys_in, keys_out = sqlite3.connect(source / "data-keys.sqlite"), sqlite3.connect(target / "data-keys.sqlite")
        keys_in.backup(keys_out)
        keys_in.close()
        keys_out.close()
    src, out = sqlite3.connect(source / "log.sqlite"), sqlite3.connect(target / "log.sqlite")
    src.backup(out)
    src.close()
    out.execute("DROP TRIGGER events_no_delete")  # a test copy, never a data folder orgmem serves
    out.execute("DELETE FROM events WHERE position > ?", (head,))
    out.commit()
    out.close()


def _stream(url, token, stop: threading.Event, sent: list[int]):
    i = 0
    while not stop.is_set():
        docs = [DocumentIn(text=f"Streamed note {i + j} on remote work days and the expense limit, case {i + j}.",
                           author=f"streamer{j}@corp.example", kind="chat", thread=f"stream-{(i + j) % 4}")
                for j in range(4)]
        sent.append(_post(url, token, docs))
        i += 4
        stop.wait(0.05)


def _served(url, token):
    """The running server's answers to the fixed query set (as `top_ids`: k = 20)."""
    out = []
    for q in QUERIES:
        response = httpx.post(url + "/v1/query", json={"q": q, "k": 20}, timeout=60,
                              headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 200, response.text
        out.append([hit["row_id"] for hit in response.json()["rows"]])
    return out


def _answers_as_copied(folder: Path, scratch: Path):
    """The answers of a backup's files as they are, before any catch-up (at its checkpoint)."""
    shutil.copytree(folder, scratch)
    memory, lock = build_memory(_settings(scratch))
    try:
        return top_ids(memory), memory.checkpoint()
    finally:
        memory.close()
        lock.release()


def test_online_backup_during_a_stream_of_ingests_restores_the_same_answers(tmp_path):
    data, dest, restored, reference = (tmp_path / n for n in ("data", "backup", "restored", "reference"))
    token = create_key(data)
    proc, url = start_server(data, free_port())
    stop, sent, served = threading.Event(), [], {}

    class Recording(ServerHolder):
        """The backup's own hold: while it holds the projector, the server answers at its checkpoint."""

        def hold(self):
            hold = super().hold()
            served[hold.checkpoint] = _served(url, token)
            return hold

    try:
        _wait_indexed(url, _post(url, token, [d.model_copy(update={"source": "archive"}) for d in corpus()]))
        streamer = threading.Thread(target=_stream, args=(url, token, stop, sent))
        streamer.start()
        while len(sent) < 5:
            time.sleep(0.05)
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
            manifest = take_backup(data, dest, Recording(client, data, 120), backup_files,
                                   {"online": True}, progress=lambda _m: None)
        during = len(sent)
        while len(sent) < during + 5:  # the stream went on after the backup
            time.sleep(0.05)
        stop.set()
        streamer.join()
        _wait_indexed(url, sent[-1])
    finally:
        stop.set()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert manifest["online"] and not (tmp_path / "backup.partial").exists()
    # Taken during the stream: past the corpus, before the last streamed documents.
    assert 120 < manifest["checkpoint"] <= manifest["log_head"] < sent[-1]
    assert {f["path"] for f in manifest["files"]} >= {"log.sqlite", "projections/rows.sqlite", "keys.sqlite"}
    # The backup's files answer exactly what the server answered at the backup's checkpoint.
    as_copied, checkpoint = _answers_as_copied(dest, tmp_path / "scratch")
    assert checkpoint == manifest["checkpoint"] and list(served) == [checkpoint]
    assert as_copied == served[checkpoint] and any(as_copied)
    # Restored and projected on to the backup's log head, it holds what the log held there.
    assert main(["restore", str(dest), "--data", str(restored)]) == 0
    _log_cut_at(data, manifest["log_head"], reference)
    got, want = _answers(restored), _answers(reference)
    # One event past the backup's log head: the restore's own audit record (docs/audit.md).
    assert got[2] == want[2] + 1 == manifest["log_head"] + 1
    assert got[1] == want[1] and got[1]["active"] > 120
    # A one-pass replay builds one tantivy segment where the live index has one per batch, and
    # the streamed notes tie on BM25 to seven digits: the tie group's order follows the segment
    # layout (a rebuild of the restored folder gives the replay's order), so only the rows each
    # query returns are compared with the replay; the order was compared with the server above.
    assert [set(ids) for ids in got[0]] == [set(ids) for ids in want[0]]


@pytest.fixture
def small_folder(tmp_path):
    data = tmp_path / "data"
    memory, lock = build_memory(_settings(data))
    try:
        ids = memory.ingest(corpus()[:30]).row_ids
        memory.catch_up()
        memory.append([RowArchived(row_id=ids[2], reason="test: an archived row keeps its history")])
        memory.catch_up()
    finally:
        memory.close()
        lock.release()
    return data, ids


def test_a_damaged_backup_is_refused(tmp_path, small_folder, capsys):
    data, _ = small_folder
    dest = tmp_path / "backup"
    assert main(["backup", str(dest), "--data", str(data)]) == 0
    manifest = json.loads((dest / "manifest.json").read_text())
    assert not manifest["online"]
    before = _answers(data)
    rows = dest / "projections" / "rows.sqlite"
    damaged = bytearray(rows.read_bytes())
    damaged[len(damaged) // 2] ^= 0x01
    rows.write_bytes(bytes(damaged))
    target = tmp_path / "restored"
    assert main(["restore", str(dest), "--data", str(target)]) == 2
    assert "projections/rows.sqlite does not match the manifest" in capsys.readouterr().err
    assert not target.exists() and not (tmp_path / "restored.restoring").exists()

    rows.write_bytes(bytes(damaged[: len(damaged) // 2]))  # cut short: the size differs as well
    assert main(["restore", str(dest), "--data", str(target)]) == 2
    hostile = dict(manifest, files=[*manifest["files"], {"path": "../../etc/passwd", "size": 1, "sha256": "0"}])
    (dest / "manifest.json").write_text(json.dumps(hostile))
    assert main(["restore", str(dest), "--data", str(target)]) == 2
    assert "not a plain relative path" in capsys.readouterr().err
    (dest / "manifest.json").unlink()
    assert main(["restore", str(dest), "--data", str(target)]) == 2
    assert not target.exists()
    assert _answers(data) == before  # the source folder is untouched


def test_restore_keeps_a_non_empty_folder_unless_replace(tmp_path, small_folder, capsys):
    data, _ = small_folder
    dest = tmp_path / "backup"
    assert main(["backup", str(dest), "--data", str(data)]) == 0
    before = _answers(data)
    memory, lock = build_memory(_settings(data))
    try:  # the live folder moves on after the backup
        memory.ingest([DocumentIn(text="A decision made after the backup about remote work days.", author="late")])
        memory.catch_up()
    finally:
        memory.close()
        lock.release()
    assert main(["restore", str(dest), "--data", str(data)]) == 2
    assert "pass --replace" in capsys.readouterr().err
    assert _answers(data)[2] == before[2] + 1
    assert main(["restore", str(dest), "--data", str(data), "--replace"]) == 0
    assert _answers(data) == before
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("data.replaced-")]
    assert len(aside) == 1 and (aside[0] / "log.sqlite").is_file()  # the previous folder is kept aside
    assert main(["backup", str(dest), "--data", str(data)]) == 2  # a backup never overwrites one


def test_a_server_killed_mid_backup_leaves_no_backup(tmp_path, small_folder):
    data, _ = small_folder
    token = create_key(data)
    proc, url = start_server(data, free_port())
    dest = tmp_path / "backup"

    class KilledWhileCopying(ServerHolder):
        def hold(self):
            hold = super().hold()
            proc.send_signal(signal.SIGKILL)  # the server dies while the projections are being copied
            proc.wait(timeout=30)
            return hold

    try:
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as client:
            with pytest.raises(OrgmemError, match="hold lapsed"):
                take_backup(data, dest, KilledWhileCopying(client, data, 60), backup_files, {"online": True})
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not dest.exists() and not (tmp_path / "backup.partial").exists()

    # The backup process itself killed half way: whatever it left is not taken for a backup.
    proc, url = start_server(data, free_port())
    try:
        cli = subprocess.Popen([*ORGMEM, "backup", str(dest), "--data", str(data), "--server", url, "--key", token,
                                "--hold-s", "5"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        partial = tmp_path / "backup.partial"
        deadline = time.monotonic() + 60
        while not partial.exists() and cli.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        cli.send_signal(signal.SIGKILL)
        cli.wait(timeout=30)
        if dest.exists():  # it finished first: then it is whole
            backup_files.copy_verified(dest, backup_files.read_manifest(dest), tmp_path / "check")
        else:
            assert not (partial / "manifest.json").exists()
            assert main(["restore", str(partial), "--data", str(tmp_path / "from-partial")]) == 2
        # The server's hold lapses or was never taken: it goes on indexing.
        position = _post(url, token, [DocumentIn(text="indexed after the killed backup", author="x")])
        _wait_indexed(url, position, timeout_s=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def test_a_hold_stops_the_projector_between_batches_and_lapses_by_itself(tmp_path):
    memory, lock = build_memory(_settings(tmp_path / "data"))
    try:
        holds = ProjectionHolds(memory.projection, memory.event_log, tmp_path / "data")
        hold = holds.hold(1, "test", "default")
        position = memory.ingest([DocumentIn(text="held back while a backup copies", author="a")]).position
        worker = threading.Thread(target=memory.catch_up)
        worker.start()
        worker.join(0.5)
        assert worker.is_alive() and memory.checkpoint() == hold.checkpoint < position
        worker.join(30)  # the hold lapses after one second and the batch goes in
        assert not worker.is_alive() and memory.checkpoint() >= position
        assert holds.release(hold.hold_id) is False  # lapsed: a copy under it is refused
        with pytest.raises(OrgmemError):
            holds.release("not-a-hold")
        again = holds.hold(5, "test", "default")
        assert holds.release(again.hold_id) is True
    finally:
        memory.close()
        lock.release()


def test_export_round_trips_jsonl_and_parquet(tmp_path, small_folder, capsys):
    data, ids = small_folder
    memory, lock = build_memory(_settings(data))
    try:
        memory.ingest([DocumentIn(text="Another tenant's secret plan.", author="eve")], Caller(tenant="other"))
        memory.catch_up()
        stored = [memory.stored_row(i) for i in ids]
        for fmt in ("jsonl", "parquet"):
            out = tmp_path / f"default.{fmt}"
            summary = export_rows(memory, export_sink(fmt, out), "default", page_rows=7)  # several pages
            assert summary.rows == len(ids) and out.exists() and not Path(f"{out}.partial").exists()
        everything = tmp_path / "all.jsonl"
        assert export_rows(memory, export_sink("jsonl", everything), None).rows == len(ids) + 1
    finally:
        memory.close()
        lock.release()
    lines = [json.loads(line) for line in (tmp_path / "default.jsonl").read_text().splitlines()]
    table = pq.read_table(tmp_path / "default.parquet")
    assert table.num_rows == len(lines) == len(ids)
    assert table.column("row_id").to_pylist() == [r["row_id"] for r in lines] == [r.row_id for r in stored]
    assert table.column("text").to_pylist() == [r.text for r in stored]
    assert table.schema.field("event_time").type.tz == "UTC"
    archived = next(r for r in table.to_pylist() if r["row_id"] == ids[2])
    assert archived["state"] == "archived" and [h["change"] for h in archived["history"]] == ["observed", "archived"]
    assert [h["change"] for h in lines[2]["history"]] == ["observed", "archived"]
    assert {r["tenant"] for r in lines} == {"default"} and "secret" not in (tmp_path / "default.jsonl").read_text()
    assert "secret" not in str(table.column("text").to_pylist())
    assert "secret plan" in everything.read_text()
    # The CLI writes the same file, and never over an existing one.
    assert main(["export", "--data", str(data), "--format", "parquet", "--out", str(tmp_path / "cli.parquet")]) == 0
    assert pq.read_table(tmp_path / "cli.parquet").num_rows == len(ids) + 1
    assert main(["export", "--data", str(data), "--out", str(tmp_path / "cli.parquet")]) == 2


def test_http_export_streams_the_callers_tenant_and_readable_rows_only(tmp_path, capsys):
    data = tmp_path / "data"
    memory, lock = build_memory(_settings(data))
    try:
        memory.ingest([DocumentIn(text="Open to the whole tenant.", author="a"),
                       DocumentIn(text="Only for the board.", author="a", acl=["group:board"])])
        memory.ingest([DocumentIn(text="Other tenant's row.", author="b")], Caller(tenant="other"))
        memory.catch_up()
    finally:
        memory.close()
        lock.release()
    admin, limited = create_key(data), create_key(data, principal="ann", unrestricted=False)
    reader = create_key(data, role="reader")
    proc, url = start_server(data, free_port())
    try:
        def export(token):
            return httpx.get(url + "/v1/admin/export", params={"format": "jsonl"}, timeout=60,
                             headers={"Authorization": f"Bearer {token}"})

        full = export(admin)
        assert full.status_code == 200 and full.headers["content-type"].startswith("application/x-ndjson")
        texts = [json.loads(line)["text"] for line in full.text.splitlines()]
        assert texts == ["Open to the whole tenant.", "Only for the board."]
        assert [json.loads(line)["text"] for line in export(limited).text.splitlines()] == ["Open to the whole tenant."]
        assert export(reader).status_code == 403
        assert httpx.get(url + "/v1/admin/export", params={"format": "parquet"}, timeout=60,
                         headers={"Authorization": f"Bearer {admin}"}).status_code == 422
        assert httpx.post(url + "/v1/admin/projection-holds", json={"seconds": 5}, timeout=60,
                          headers={"Authorization": f"Bearer {reader}"}).status_code == 403
        for seconds in (0, 601, -1):
            assert httpx.post(url + "/v1/admin/projection-holds", json={"seconds": seconds}, timeout=60,
                              headers={"Authorization": f"Bearer {admin}"}).status_code == 422
        online = tmp_path / "online"  # the CLI's online backup
        assert main(["backup", str(online), "--data", str(data), "--server", url, "--key", admin]) == 0
        assert json.loads((online / "manifest.json").read_text())["online"] is True
        other = tmp_path / "other"
        _log_cut_at(data, 1, other)
        assert main(["backup", str(tmp_path / "elsewhere"), "--data", str(other), "--server", url, "--key", admin]) == 2
        assert f"the server projects {data.resolve()}, not {other.resolve()}" in capsys.readouterr().err
        assert not (tmp_path / "elsewhere").exists()
        # Offline backup of a folder a server holds is refused, and leaves nothing behind.
        assert main(["backup", str(tmp_path / "offline"), "--data", str(data)]) == 2
        assert not (tmp_path / "offline").exists() and not (tmp_path / "offline.partial").exists()
        out = tmp_path / "via-server.parquet"
        assert main(["export", "--server", url, "--key", admin, "--format", "parquet", "--out", str(out)]) == 0
        assert pq.read_table(out).column("text").to_pylist() == texts
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert os.stat(data).st_mode & 0o077 == 0


def test_an_erased_row_is_not_exported_and_stays_erased_after_restoring_an_older_backup(tmp_path, small_folder):
    from services.app.erasure import erase

    data, ids = small_folder
    older = tmp_path / "before-erasure"
    assert main(["backup", str(older), "--data", str(data)]) == 0
    memory, lock = build_memory(_settings(data))
    try:
        erased_text = memory.stored_row(ids[5]).text
        result = erase(memory, "default", actor="test", reason="test: a person's request", row_id=ids[5])
        assert ids[5] in result.row_ids
        exported = tmp_path / "after.jsonl"
        export_rows(memory, export_sink("jsonl", exported), None)
    finally:
        memory.close()
        lock.release()
    after = [json.loads(line)["row_id"] for line in exported.read_text().splitlines()]
    assert ids[5] not in after and len(after) == len(ids) - 1 and erased_text not in exported.read_text()

    assert main(["restore", str(older), "--data", str(data), "--replace"]) == 0
    memory, lock = build_memory(_settings(data))
    try:  # the older backup held the row and its key; the live folder's tombstone destroyed the key again
        assert memory.stored_row(ids[5]) is None
        again = tmp_path / "restored.parquet"
        export_rows(memory, export_sink("parquet", again), None)
        assert memory.stored_row(ids[4]) is not None
    finally:
        memory.close()
        lock.release()
    restored_ids = pq.read_table(again).column("row_id").to_pylist()
    assert ids[5] not in restored_ids and len(restored_ids) == len(ids) - 1

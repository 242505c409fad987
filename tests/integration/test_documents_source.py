"""A documents export (a Notion export, a folder) end to end on a real data folder, through
`orgmem connect documents`: every page and database row goes in, readable by the tenant, a rerun
adds nothing, a changed page is a new version that supersedes the old one, and a removed page is
marked (archived, its text kept), not erased: the source's default deletion policy."""

from __future__ import annotations

import shutil

from schemas.documents import DocumentIn
from services.bootstrap import open_memory
from services.connectors.contract import MemoryTree, Version, source_id_of
from services.core.write_rules import row_id_for
from services.connectors.sources.documents import DocumentsSource
from services.settings import Settings
from tests.unit.connectors.sources.chat_cli import connect, row_ids
from tests.unit.connectors.sources.chat_fixtures import write_folder
from tests.unit.connectors.sources.test_documents import SUB, TOP, notion_export


def test_a_notion_export_keeps_versions_and_marks_removed_pages(tmp_path):
    data, export, access = tmp_path / "data", tmp_path / "export", tmp_path / "access.json"
    access.write_text("{}")
    first = notion_export()
    write_folder(first, export)
    report = connect("documents", data, export, access)
    assert report["documents"] == 4 and report["dead_letters"] == 0
    assert connect("documents", data, export, access)["documents"] == 0  # a rerun adds nothing

    before = row_ids(DocumentsSource(), first)
    changed = notion_export(status="Blocked")
    write_folder(changed, export)
    report = connect("documents", data, export, access)
    assert report["documents"] == 2 and report["superseded"] == 2
    after = row_ids(DocumentsSource(), changed)

    shutil.rmtree(export)
    write_folder(notion_export(status="Blocked", with_sub=False), export)
    report = connect("documents", data, export, access)
    assert report["removed"] == 1 and report["documents"] == 0

    top, sub = f"notion:{TOP}/{TOP}", f"notion:{TOP}/{SUB}"
    with open_memory(Settings(data_dir=data), role="indexer") as memory:
        memory.catch_up()
        assert memory.stored_row(before[top]).superseded_by == after[top]
        assert "Status Blocked" in memory.stored_row(after[top]).text and memory.stored_row(after[top]).acl == []
        gone = memory.stored_row(after[sub])
        assert gone is not None and gone.state == "archived"  # marked, not erased
        assert gone.text.endswith("We chose Postgres.")


def test_a_folder_of_undated_files_takes_the_date_given_and_the_layout_named(tmp_path):
    data, export, access = tmp_path / "data", tmp_path / "export", tmp_path / "access.json"
    access.write_text("{}")
    write_folder({"notes/plan.md": b"# Plan\nWe ship in May.", "pic.png": b"\x89PNG"}, export)
    report = connect("documents", data, export, access, "--date", "2023-04-05", "--layout", "files")
    assert report["documents"] == 1 and report["skipped"] == {".png files: images carry no text orgmem reads": 1}
    with open_memory(Settings(data_dir=data), role="indexer") as memory:
        memory.catch_up()
        files = {"notes/plan.md": b"# Plan\nWe ship in May."}
        found = [f for f in DocumentsSource().read(MemoryTree(files, label="export"), {}) if isinstance(f, Version)]
        row = memory.stored_row(row_id_for("default", DocumentIn(text="-", source="documents",
                                                                  source_id=source_id_of(found[0]))))
        assert row is not None and row.event_time.date().isoformat() == "2023-04-05"

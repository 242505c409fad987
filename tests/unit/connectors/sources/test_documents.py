"""The documents source over generated exports: a plain folder of every readable format, a
Confluence space (XML page history, HTML with an attachment), a Notion export (page, subpage,
database), reruns, changes and removals through the runner, and hostile files (each a dead
letter or a refusal, the rest read)."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest

from services.connectors.access import AccessMap
from services.connectors.base import ConnectorState, DeadLetter
from services.connectors.contract import MemoryTree, Version, source_id_of
from services.connectors.paths import PathGuard
from services.connectors.runner import run_source
from services.connectors.sources.documents import DocumentsSource
from tests.unit.connectors.sources import document_fixtures as fx
from tests.unit.connectors.sources.chat_fixtures import write_folder, write_zip

N = fx.notion_id
TOP, SUB, TASKS, FIX = N(1), N(2), N(3), N(4)


def read(files: dict[str, bytes], options: dict | None = None, label: str = "handbook"):
    source = DocumentsSource()
    found = list(source.read(MemoryTree(files, label=label), options or {}))
    versions = {f.item: f for f in found if isinstance(f, Version)}
    letters = [f for f in found if isinstance(f, DeadLetter)]
    assert len(versions) == len([f for f in found if isinstance(f, Version)]), "an item read twice in one export"
    return versions, letters, source


def plain_folder() -> dict[str, bytes]:
    return {"policy/leave.md": b"---\ntitle: Leave policy\ndate: 2024-03-01\nauthor: Dana Lee\n---\n"
                               b"# Ignored heading\nTwenty days of paid leave.",
            "notes/onboarding.html": b"<html><head><title>Onboarding</title></head><body><p>Badge on day one."
                                     b"</p></body></html>",
            "notes/todo.txt": b"Renew the office lease.",
            "reports/q1.pdf": fx.pdf(["Revenue grew nine percent."], "Q1 report"),
            "reports/plan.docx": fx.docx("Hiring plan", ["Two engineers in April."]),
            "reports/deck.pptx": fx.pptx([("Roadmap", "Search ships in May")]),
            "reports/budget.xlsx": fx.xlsx({"Costs": [["item", "eur"], ["laptops", 4200]]})}


def test_a_plain_folder_gives_one_dated_attributed_document_per_file():
    versions, letters, source = read(plain_folder(), {"date": "2024-05-01"})
    assert not letters
    assert set(versions) == {f"handbook/{name}" for name in plain_folder()}
    leave = versions["handbook/policy/leave.md"].document
    assert (leave.title, leave.author, leave.date) == ("Leave policy", "Dana Lee", datetime(2024, 3, 1, tzinfo=UTC))
    assert leave.text == "# Ignored heading\nTwenty days of paid leave."  # front matter is not text
    assert leave.kind == "doc" and leave.thread == "handbook"
    pdf = versions["handbook/reports/q1.pdf"].document
    assert "Revenue grew nine percent." in pdf.text and pdf.title == "Q1 report" and pdf.author == "Dana Lee"
    assert pdf.date == datetime(2024, 3, 4, 10, 15, tzinfo=UTC)  # the PDF's ModDate
    docx = versions["handbook/reports/plan.docx"].document
    assert "Two engineers in April." in docx.text and docx.author == "Lee Park" and docx.title == "Hiring plan"
    assert "Search ships in May" in versions["handbook/reports/deck.pptx"].document.text
    assert "laptops" in versions["handbook/reports/budget.xlsx"].document.text
    assert "Badge on day one." in versions["handbook/notes/onboarding.html"].document.text
    # What carries no date of its own takes the `date` option, and is counted.
    todo = versions["handbook/notes/todo.txt"].document
    assert todo.date == datetime(2024, 5, 1, tzinfo=UTC) and todo.title == "todo"
    assert source.counts["dated_by_run"] >= 1 and source.counts["kind:files"] == 1
    assert all(v.document.date for v in versions.values()) and not any(v.private for v in versions.values())


def test_an_office_file_with_its_templates_dates_is_undated_and_its_own_dates_are_kept():
    from docx import Document
    from pptx import Presentation

    def saved(document) -> bytes:
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()

    bare_docx, bare_pptx, own = Document(), Presentation(), Document()
    bare_docx.add_paragraph("Written by a script, properties never set.")
    bare_pptx.slides.add_slide(bare_pptx.slide_layouts[1]).shapes.title.text = "A generated deck"
    own.add_paragraph("Edited later, on its own date.")
    own.core_properties.modified = datetime(2024, 6, 7, 8, 0)
    own.core_properties.author = "Dana Lee"
    versions, letters, source = read({"bare.docx": saved(bare_docx), "bare.pptx": saved(bare_pptx),
                                      "own.docx": saved(own)}, {"date": "2024-05-01"})
    assert not letters
    # The templates' 2013 creation stamps and their "python-docx" author are not the document's:
    # the run's date stands in, and is counted.
    for name in ("bare.docx", "bare.pptx"):
        document = versions[f"handbook/{name}"].document
        assert document.date == datetime(2024, 5, 1, tzinfo=UTC) and document.author == "", name
    assert source.counts["dated_by_run"] == 2
    mine = versions["handbook/own.docx"].document
    assert mine.date == datetime(2024, 6, 7, 8, 0, tzinfo=UTC) and mine.author == "Dana Lee"


def test_confluence_xml_history_is_versions_of_one_item_oldest_first():
    pages = [{"id": "300", "title": "Runbook", "version": 3, "body": "<p>restart with care</p>",
              "modified": "2024-03-03 09:00:00.000"},
             {"id": "101", "title": "Runbook", "version": 1, "body": "<p>restart</p>",
              "modified": "2024-01-01 09:00:00.000", "original": "300", "status": "historical"},
             {"id": "202", "title": "Runbook", "version": 2, "body": "<p>restart twice</p>",
              "modified": "2024-02-02 09:00:00.000", "original": "300", "status": "historical"},
             {"id": "400", "title": "Old draft", "version": 1, "body": "<p>x</p>", "modified": "2024-01-01 09:00:00.000",
              "status": "draft"}]
    source = DocumentsSource()
    found = list(source.read(MemoryTree(fx.confluence_xml_export("ENG", pages), label="eng"), {}))
    assert not [f for f in found if isinstance(f, DeadLetter)]
    assert [(f.item, f.version) for f in found] == [("confluence:ENG/300", "v1"), ("confluence:ENG/300", "v2"),
                                                    ("confluence:ENG/300", "v3")]
    current = found[-1].document
    assert current.text.endswith("restart with care") and current.date == datetime(2024, 3, 3, 9, tzinfo=UTC)
    assert "space:ENG" in current.tags and source.counts["pages:draft"] == 1


def test_confluence_xml_attachments_are_read_by_their_entities_name_newest_version_linked_to_the_page():
    pages = [{"id": "300", "title": "Runbook", "version": 2, "body": "<p>restart with care</p>",
              "modified": "2024-03-03 09:00:00.000"},
             {"id": "101", "title": "Runbook", "version": 1, "body": "<p>restart</p>",
              "modified": "2024-01-01 09:00:00.000", "original": "300", "status": "historical"}]
    attachments = [{"id": "900", "page": "300", "title": "Failover plan.pdf", "version": 2},
                   {"id": "901", "page": "300", "title": "diagram.png"}, {"id": "902", "page": "300", "title": None}]
    files = fx.confluence_xml_export("ENG", pages, attachments) | {
        "attachments/300/900/1": fx.pdf(["Fail over by hand."]),
        "attachments/300/900/2": fx.pdf(["Fail over with the script, then check the replicas."]),
        "attachments/300/901/1": b"\x89PNG\r\n", "attachments/300/902": b"unnamed bytes",
        "attachments/300/x/../../etc": b"no"}
    source = DocumentsSource()
    found = list(source.read(MemoryTree(files, label="eng"), {"date": "2024-05-01"}))
    assert not [f for f in found if isinstance(f, DeadLetter)]
    pages_read = [f for f in found if f.item == "confluence:ENG/300"]
    attached = [f for f in found if f.item != "confluence:ENG/300"]
    assert [f.item for f in attached] == ["confluence:ENG/300/Failover plan.pdf"]
    doc = attached[0].document
    assert "check the replicas" in doc.text and "by hand" not in doc.text  # the newest version only
    assert doc.title == "Failover plan.pdf" and doc.parent == source_id_of(pages_read[-1])
    skipped = " ".join(source.skipped)
    assert ".png files" in skipped and "entities.xml does not name" in skipped
    assert ".properties files" in skipped  # exportDescriptor.properties: counted, not read


def confluence_html(body: str = "<p>Deploy on Tuesdays.</p>") -> dict[str, bytes]:
    page = fx.confluence_page("ENG", "Release process", body, parents=("Home",),
                              attachments=(("attachments/65541/99.pdf", "Release checklist"),))
    return fx.confluence_html_export("ENG", {"Release-process_65541.html": page},
                                     {"attachments/65541/99.pdf": fx.pdf(["Tag, build, announce."]),
                                      "attachments/65541/logo.png": b"\x89PNG"})


def test_a_confluence_html_attachment_is_a_document_whose_parent_is_its_page():
    versions, letters, source = read(confluence_html())
    assert not letters
    page = versions["confluence:ENG/65541"]
    assert page.document.title == "Release process" and page.document.author == "Dana Lee"
    assert page.document.participants == ["Dana Lee", "Lee Park"]
    assert page.document.date == datetime(2024, 3, 4, tzinfo=UTC)
    assert page.document.text.startswith("ENG > Home > Release process") and "Deploy on Tuesdays." in page.document.text
    attachment = versions["confluence:ENG/65541/99.pdf"]
    assert attachment.document.parent == source_id_of(page) and attachment.document.title == "Release checklist"
    assert "Tag, build, announce." in attachment.document.text
    assert source.skipped == {".png files: images carry no text orgmem reads": 1}


def notion_export(status: str = "Done", with_sub: bool = True) -> dict[str, bytes]:
    edited = {"Last edited time": "March 4, 2024 10:15 AM", "Created by": "Dana Lee"}
    files = {f"Team {TOP}.md": fx.notion_page("Team", f"Welcome. Status {status}.", edited),
             f"Team {TOP}/Tasks {TASKS}.csv": f"Name,Status\nFix login,{status}\nShip search,Open\n".encode(),
             f"Team {TOP}/Tasks {TASKS}/Fix login {FIX}.md": fx.notion_page(
                 "Fix login", "The token expired early.", {"Status": status, **edited})}
    if with_sub:
        files[f"Team {TOP}/Meeting notes {SUB}.md"] = fx.notion_page("Meeting notes", "We chose Postgres.", edited)
    return files


def test_a_notion_export_reads_pages_subpages_and_database_rows():
    versions, letters, _ = read(notion_export())
    assert not letters
    top = versions[f"notion:{TOP}/{TOP}"].document
    assert top.title == "Team" and top.author == "Dana Lee" and top.date == datetime(2024, 3, 4, 10, 15, tzinfo=UTC)
    assert versions[f"notion:{TOP}/{SUB}"].document.text.endswith("We chose Postgres.")
    row = versions[f"notion:{TOP}/{FIX}"].document  # the row merged with its row page
    assert row.title == "Fix login" and "The token expired early." in row.text and row.text.startswith("Name: Fix login")
    bare = [v for item, v in versions.items() if item.startswith(f"notion:{TOP}/{TASKS}-")]
    assert len(bare) == 1 and bare[0].document.title == "Ship search" and "Status: Open" in bare[0].document.text
    assert len(versions) == 4


@pytest.fixture
def run(tmp_path):
    folder, data = tmp_path / "export", tmp_path / "data"
    sunk: list = []

    def go(files, replace: bool = True):
        if replace and folder.exists():
            for path in sorted(folder.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
        write_folder(files, folder)
        state = ConnectorState(data, "documents", tenant="default")
        return run_source(DocumentsSource(), [folder], sunk.extend, state, guard=PathGuard([tmp_path]),
                          access=AccessMap())
    return go, sunk


def test_through_the_runner_a_rerun_adds_nothing_a_change_is_a_new_version_a_removal_is_reported(run):
    go, sunk = run
    first = go(notion_export())
    assert first.documents == 4 and not first.dead_letters
    assert go(notion_export()).documents == 0
    changed = go(notion_export(status="Blocked"))
    # The top page and the "Fix login" row changed; the subpage and the other row did not.
    assert changed.documents == 2 and len(changed.superseded) == 2 and not changed.removed
    assert {s["source_id"].split("@")[0] for s in changed.superseded} == {f"notion:{TOP}/{TOP}", f"notion:{TOP}/{FIX}"}
    removed = go(notion_export(status="Blocked", with_sub=False))
    assert removed.documents == 0
    assert [r["source_id"].split("@")[0] for r in removed.removed] == [f"notion:{TOP}/{SUB}"]
    assert all(d.acl == [] for d in sunk)  # these exports carry no permissions: the tenant reads them


def test_a_broken_pdf_is_a_dead_letter_and_the_rest_goes_in():
    files = plain_folder() | {"reports/broken.pdf": b"%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage"}
    versions, letters, _ = read(files, {"date": "2024-05-01"})
    assert [letter.path for letter in letters] == ["handbook/reports/broken.pdf"]
    assert "cannot extract text" in letters[0].reason
    assert set(versions) == {f"handbook/{name}" for name in plain_folder()}


def test_a_bad_date_is_a_dead_letter_naming_the_file():
    files = {"a.md": b"---\ndate: the day after Easter\n---\nText.", "b.md": b"---\ndate: 9999-12-31\n---\nFar.",
             "c.md": b"# Fine\nStill read."}
    versions, letters, _ = read(files)
    assert sorted(letter.path for letter in letters) == ["handbook/a.md", "handbook/b.md"]
    assert "is not a date" in letters[0].reason and "a.md" in letters[0].reason
    assert list(versions) == ["handbook/c.md"] and versions["handbook/c.md"].document.title == "Fine"
    with pytest.raises(Exception, match="not a date"):
        read({"c.md": b"x"}, {"date": "soon"})


def test_a_zip_with_traversal_or_a_bomb_is_refused_and_the_rest_goes_in(tmp_path):
    files = {"guide/ok.md": b"# Guide\nRead me.", "../../etc/evil.md": b"# Evil\nescaped",
             "bomb.md": b"0" * (64 * 1024 * 1024)}
    path = write_zip(files, tmp_path / "guide.zip")
    state = ConnectorState(tmp_path / "data", "documents", tenant="default")
    sunk: list = []
    report = run_source(DocumentsSource(), [path], sunk.extend, state, guard=PathGuard([tmp_path]))
    reasons = {letter.path: letter.reason for letter in report.dead_letters}
    assert "'..'" in reasons[f"{path}!../../etc/evil.md"]  # refused by name, never offered to the source
    assert "zip bomb" in reasons[f"{path}/bomb.md"]
    assert [d.source_id.split("@")[0] for d in sunk] == ["guide/guide/ok.md"]
    assert not any("escaped" in d.text for d in sunk)


def test_unknown_types_are_counted_in_skipped_with_a_hint():
    files = {"a.md": b"# A\ntext", "old.doc": b"\xd0\xcf\x11\xe0", "pic.jpg": b"\xff\xd8", "data.bin": b"\x00",
             ".hidden.md": b"# H\nsecret", "empty.txt": b"   "}
    versions, letters, source = read(files)
    assert list(versions) == ["handbook/a.md"] and not letters
    assert source.skipped[".doc files: save as .docx"] == 1
    assert source.skipped[".jpg files: images carry no text orgmem reads"] == 1
    assert any(why.startswith(".bin files: documents reads") for why in source.skipped)
    assert source.skipped["hidden files (names starting with '.'): not read"] == 1
    assert sum(source.skipped.values()) == 5  # the blank text file too


def test_the_runs_report_counts_what_was_skipped_in_every_export(tmp_path):
    for name in ("one", "two"):
        write_folder({"a.md": b"# A\ntext", "pic.jpg": b"\xff\xd8"}, tmp_path / name)
    state = ConnectorState(tmp_path / "data", "documents", tenant="default")
    report = run_source(DocumentsSource(), [tmp_path / "one", tmp_path / "two"], [].extend, state,
                        guard=PathGuard([tmp_path]))
    assert report.skipped == {".jpg files: images carry no text orgmem reads": 2}
    assert report.to_dict()["skipped"] == report.skipped


def test_an_author_the_file_sets_is_never_an_address_on_the_row():
    """A file's author is whoever wrote the file says it is: "Dana Lee <dana@acme.example>" in front
    matter, or an address as a page's creator, would join it to Dana's mail identity in the people
    directory (an exact address match) and count its rows as hers."""
    from services.core.people import parse

    files = {"memo.md": b"---\ntitle: Memo\ndate: 2024-03-01\nauthor: Dana Lee <dana@acme.example>\n---\nRaise approved."}
    versions, letters, _ = read(files)
    memo = versions["handbook/memo.md"]
    assert not letters and memo.document.author == "Dana Lee ‹dana＠acme.example›"
    assert parse(memo.document.author).address is None  # no address in it
    again, _, _ = read(files)
    assert again["handbook/memo.md"].version == memo.version  # version ids of the name as written: unchanged
    pages = [{"id": "300", "title": "Runbook", "version": 1, "body": "<p>restart</p>",
              "modified": "2024-03-03 09:00:00.000", "creator": "ceo@acme.example"}]
    found = [f for f in DocumentsSource().read(MemoryTree(fx.confluence_xml_export("ENG", pages), label="eng"), {})
             if isinstance(f, Version)]
    page = found[0].document
    assert page.author == "ceo＠acme.example" and page.participants == ["ceo＠acme.example"]
    assert all(parse(p).address is None for p in (page.author, *page.participants))

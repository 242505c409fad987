"""Ticket connector: Jira (REST, ADF, flattened), GitHub issues and CSV, with the inputs that go wrong."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.connectors.base import ConnectorState, read_dead_letters
from services.connectors.tickets import parse_ticket_file, run_tickets
from services.connectors.tickets.common import adf_to_text, parse_when
from services.connectors.tickets.csv import CsvMapping, run_csv
from services.errors import TicketError

ADF = {
    "type": "doc",
    "version": 1,
    "content": [
        {"type": "paragraph", "content": [{"type": "text", "text": "Login fails for "},
                                          {"type": "mention", "attrs": {"text": "@Ana"}},
                                          {"type": "text", "text": " after the upgrade."}]},
        {"type": "bulletList", "content": [
            {"type": "listItem", "content": [{"type": "paragraph", "content": [{"type": "text", "text": "Chrome"}]}]},
            {"type": "listItem", "content": [{"type": "paragraph", "content": [{"type": "text", "text": "Firefox"}]}]},
        ]},
        {"type": "mediaSingle", "content": [{"type": "media", "attrs": {"id": "x"}}]},
    ],
}


def jira_rest_issue(key="OPS-7", description=ADF, created="2024-03-01T10:00:00.000+0100"):
    return {
        "key": key,
        "fields": {
            "summary": "Login broken",
            "description": description,
            "reporter": {"displayName": "Ana Ruiz", "emailAddress": "ana@example.com"},
            "assignee": {"displayName": "Bo Chen", "emailAddress": "bo@example.com"},
            "status": {"name": "In Progress"},
            "priority": {"name": "High"},
            "labels": ["auth", "regression"],
            "created": created,
            "updated": "2024-03-02T08:00:00.000+0000",
            "comment": {"comments": [
                {"id": "10001", "author": {"displayName": "Bo Chen", "emailAddress": "bo@example.com"},
                 "body": "Reproduced on staging.", "created": "2024-03-01T12:30:00.000+0000"},
                {"id": "10002", "author": {"displayName": "Cy Diaz"},
                 "body": {"type": "doc", "content": [{"type": "paragraph", "content": [{"type": "text", "text": "Fixed by rollback."}]}]},
                 "created": "2024-03-02T07:00:00.000+0000"},
                {"id": "10003", "author": {"displayName": "Cy Diaz"}, "body": "   ", "created": "2024-03-02T07:05:00.000+0000"},
            ]},
        },
    }


def flat_issue(key="HADOOP-1", comments=("first", "second"), updated="2017-09-11T05:21:07.000+0000"):
    return {"issue_id": key, "project": "HADOOP", "title": "Slow start", "status": "Open", "priority": "Major",
            "reporter": "Robert Roe", "assignee": None, "created": "2012-08-08T16:50:59.000+0000",
            "updated": updated, "labels": ["perf"], "description": "It is slow.", "comments": list(comments)}


def github_issue(number=12, comments_data=None):
    issue = {"number": number, "title": "Crash on save", "body": "Stack trace attached.",
             "user": {"login": "octo"}, "state": "open", "labels": [{"name": "bug"}],
             "assignee": {"login": "hubot"}, "created_at": "2024-05-01T09:00:00Z",
             "repository_url": "https://api.github.com/repos/acme/app", "comments": 1}
    if comments_data is not None:
        issue["comments_data"] = comments_data
    return issue


def collect():
    got = []
    return got, got.extend


def test_adf_flattens_blocks_lists_and_mentions():
    text = adf_to_text(ADF)
    assert text.splitlines() == ["Login fails for @Ana after the upgrade.", "", "- Chrome", "- Firefox"]


def test_dates_become_utc_and_bad_dates_name_the_field():
    assert parse_when("2024-03-01T10:00:00.000+0100", "x") == datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
    assert parse_when("Fri, 01 Mar 2024 10:00:00 +0200", "x") == datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
    assert parse_when("01/Mar/24 10:15 AM", "x", "%d/%b/%y %I:%M %p") == datetime(2024, 3, 1, 10, 15, tzinfo=UTC)
    assert parse_when("", "x") is None
    with pytest.raises(TicketError, match="fields.created: 'soon' is not a date"):
        parse_when("soon", "fields.created")


def test_jira_rest_issue_is_a_conversation_of_dated_documents(tmp_path):
    path = tmp_path / "search.json"
    path.write_text(json.dumps({"issues": [jira_rest_issue()]}))
    docs, letters, items = parse_ticket_file(path.read_bytes(), path, acl_from_participants=True)
    assert (letters, items) == ([], 1)
    # The blank third comment says nothing and is not a document.
    assert [d.source_id for d in docs] == ["OPS-7", "OPS-7#comment-10001", "OPS-7#comment-10002"]
    desc, first, second = docs
    assert desc.text.startswith("OPS-7: Login broken\n\nLogin fails for @Ana after the upgrade.\n\n- Chrome")
    assert desc.text.endswith("Status: In Progress · Priority: High · Assignee: Bo Chen · Labels: auth, regression")
    assert (desc.author, desc.date) == ("Ana Ruiz", datetime(2024, 3, 1, 9, 0, tzinfo=UTC))
    assert (first.author, first.text, first.date) == ("Bo Chen", "Reproduced on staging.", datetime(2024, 3, 1, 12, 30, tzinfo=UTC))
    assert (second.author, second.text) == ("Cy Diaz", "Fixed by rollback.")
    for doc in docs:
        assert (doc.kind, doc.thread, doc.source, doc.title) == ("ticket", "OPS-7", "jira", "OPS-7: Login broken")
        assert set(doc.tags) >= {"ticket:OPS-7", "status:In Progress", "priority:High", "assignee:Bo Chen",
                                 "label:auth", "label:regression", "project:OPS"}
        assert doc.participants == ["ana@example.com", "bo@example.com", "Cy Diaz",  # then name and address joined
                                    "Ana Ruiz <ana@example.com>", "Bo Chen <bo@example.com>"]
        assert doc.acl == ["ana@example.com", "bo@example.com", "user:Cy Diaz"]  # people, named as users


def test_jira_single_issue_list_and_jsonl_are_accepted(tmp_path):
    single = tmp_path / "one.json"
    single.write_text(json.dumps(jira_rest_issue("A-1")))
    many = tmp_path / "many.json"
    many.write_text(json.dumps([jira_rest_issue("B-1"), jira_rest_issue("B-2")]))
    lines = tmp_path / "lines.jsonl"
    lines.write_text("\n".join(json.dumps(jira_rest_issue(f"C-{n}")) for n in (1, 2, 3)) + "\n")
    for path, keys in ((single, ["A-1"]), (many, ["B-1", "B-2"]), (lines, ["C-1", "C-2", "C-3"])):
        docs, letters, items = parse_ticket_file(path.read_bytes(), path)
        assert letters == [] and items == len(keys)
        assert [d.source_id for d in docs if "#" not in d.source_id] == keys
        assert all(d.acl == [] for d in docs)


def test_flattened_comments_are_unknown_authors_dated_at_the_update(tmp_path):
    path = tmp_path / "HADOOP.jsonl"
    path.write_text(json.dumps(flat_issue()) + "\n" + json.dumps(flat_issue("HADOOP-2", ["only"], updated=None)) + "\n")
    docs, letters, _ = parse_ticket_file(path.read_bytes(), path)
    assert letters == []
    by_id = {d.source_id: d for d in docs}
    assert set(by_id) == {"HADOOP-1", "HADOOP-1#comment-1", "HADOOP-1#comment-2", "HADOOP-2", "HADOOP-2#comment-1"}
    assert by_id["HADOOP-1#comment-2"].author == "unknown"
    assert by_id["HADOOP-1#comment-2"].date == datetime(2017, 9, 11, 5, 21, 7, tzinfo=UTC)
    # No update date: the comment falls back to the issue's creation.
    assert by_id["HADOOP-2#comment-1"].date == by_id["HADOOP-2"].date == datetime(2012, 8, 8, 16, 50, 59, tzinfo=UTC)
    assert by_id["HADOOP-1"].author == "Robert Roe" and "assignee:" not in " ".join(by_id["HADOOP-1"].tags)


def test_json_that_is_not_an_issue_is_a_dead_letter_and_the_rest_goes_in(tmp_path):
    path = tmp_path / "mixed.json"
    path.write_text(json.dumps([{"hello": "world"}, jira_rest_issue("OK-1"), 42,
                                jira_rest_issue("BAD-1", created="someday")]))
    docs, letters, items = parse_ticket_file(path.read_bytes(), path)
    assert items == 4
    assert {d.thread for d in docs} == {"OK-1"}
    reasons = {Path(letter.path).name: letter.reason for letter in letters}
    assert set(reasons) == {"mixed.json#item-1", "mixed.json#item-3", "mixed.json#BAD-1"}
    assert reasons["mixed.json#item-1"].startswith("not an issue")
    assert "got int" in reasons["mixed.json#item-3"]
    assert reasons["mixed.json#BAD-1"] == "fields.created: 'someday' is not a date (ISO 8601 or RFC 2822)"


def test_broken_json_line_and_broken_file(tmp_path):
    lines = tmp_path / "x.jsonl"
    lines.write_text(json.dumps(flat_issue()) + "\n{not json\n")
    docs, letters, _ = parse_ticket_file(lines.read_bytes(), lines)
    assert {d.thread for d in docs} == {"HADOOP-1"}
    assert [Path(x.path).name for x in letters] == ["x.jsonl#line-2"] and "not JSON" in letters[0].reason
    broken = tmp_path / "y.json"
    broken.write_text("[{")
    docs, letters, _ = parse_ticket_file(broken.read_bytes(), broken)
    assert docs == [] and letters[0].path == str(broken) and letters[0].reason.startswith("not JSON")


def test_forced_format_rejects_the_other_shape(tmp_path):
    path = tmp_path / "j.json"
    path.write_text(json.dumps(jira_rest_issue()))
    docs, letters, _ = parse_ticket_file(path.read_bytes(), path, format="github")
    assert docs == [] and "not a GitHub issue" in letters[0].reason


def test_github_embedded_and_top_level_comments(tmp_path):
    embedded = tmp_path / "issues.json"
    embedded.write_text(json.dumps([github_issue(12, [{"id": 900, "user": {"login": "hubot"}, "body": "On it.",
                                                       "created_at": "2024-05-01T10:00:00Z"}])]))
    docs, letters, _ = parse_ticket_file(embedded.read_bytes(), embedded)
    assert letters == []
    assert [d.source_id for d in docs] == ["acme/app#12", "acme/app#12#comment-900"]
    issue, comment = docs
    assert (issue.source, issue.author, issue.thread) == ("github", "octo", "acme/app#12")
    assert issue.text.startswith("acme/app#12: Crash on save\n\nStack trace attached.")
    assert {"ticket:acme/app#12", "status:open", "label:bug", "assignee:hubot"} <= set(issue.tags)
    assert (comment.author, comment.date) == ("hubot", datetime(2024, 5, 1, 10, 0, tzinfo=UTC))
    combined = tmp_path / "export.json"
    combined.write_text(json.dumps({"issues": [github_issue(3)], "comments": [
        {"id": 5, "issue_url": "https://api.github.com/repos/acme/app/issues/3", "user": {"login": "z"},
         "body": "Same here.", "created_at": "2024-05-02T00:00:00Z"},
        {"id": 6, "issue_url": "https://api.github.com/repos/acme/app/issues/99", "user": {"login": "z"},
         "body": "Other issue.", "created_at": "2024-05-02T00:00:00Z"}]}))
    docs, letters, _ = parse_ticket_file(combined.read_bytes(), combined)
    assert [d.source_id for d in docs] == ["acme/app#3", "acme/app#3#comment-5"]


def test_github_repo_falls_back_to_argument_then_file_stem(tmp_path):
    issue = github_issue(4)
    del issue["repository_url"]
    path = tmp_path / "widgets.json"
    path.write_text(json.dumps(issue))
    assert parse_ticket_file(path.read_bytes(), path)[0][0].source_id == "widgets#4"
    assert parse_ticket_file(path.read_bytes(), path, repo="acme/w")[0][0].source_id == "acme/w#4"


def test_rerun_over_unchanged_files_hands_nothing_to_the_sink(tmp_path):
    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "a.json").write_text(json.dumps(jira_rest_issue("A-1")))
    (folder / "b.jsonl").write_text(json.dumps(flat_issue()) + "\n")
    (folder / "notes.md").write_text("ignored: not a ticket file")
    data = tmp_path / "data"
    got, sink = collect()
    report = run_tickets([folder], sink, ConnectorState(data, "tickets"))
    assert (report.documents, report.items_seen, report.unchanged) == (len(got), 2, 0)
    assert len(got) == 6 and report.dead_letters == []
    again, sink2 = collect()
    report = run_tickets([folder], sink2, ConnectorState(data, "tickets"))
    assert (again, report.documents, report.unchanged) == ([], 0, 2)
    (folder / "b.jsonl").write_text(json.dumps(flat_issue(comments=["first", "second", "third"])) + "\n")
    report = run_tickets([folder], sink2, ConnectorState(data, "tickets"))
    assert (report.unchanged, report.documents) == (1, 4)
    assert "HADOOP-1#comment-3" in {d.source_id for d in again}


def test_run_records_dead_letters_and_missing_paths(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"not": "an issue"}))
    got, sink = collect()
    report = run_tickets([bad, tmp_path / "absent"], sink, ConnectorState(tmp_path / "data", "tickets"))
    assert got == [] and len(report.dead_letters) == 2
    stored = read_dead_letters(tmp_path / "data")
    assert [(d.connector, Path(d.path).name) for d in stored] == [("tickets", "bad.json"), ("tickets", "absent")]
    assert stored[1].reason == "no such file or folder"


MAPPING = CsvMapping(id="Key", title="Summary", text="Description", author="Reporter", date="Created",
                     status="Status", labels="Labels", comments="Comment")

CSV = (
    "Key,Summary,Description,Reporter,Created,Status,Labels,Labels,Comment,Comment\n"
    'T-1,Printer jam,Tray 2 jams,Ann,2024-01-02T10:00:00+02:00,Open,"hw, office",urgent,'
    '"2024-01-03T09:00:00Z;Bob;Cleared the tray",Plain remark\n'
    "T-2,Bad row,Has a bad date,Ann,yesterday,Open,,,,\n"
    'T-3,"Multi, line","First line\nsecond line",Cy,2024-02-01,Closed,,,,\n'
)


def test_csv_rows_go_in_and_a_bad_date_dead_letters_its_row_only(tmp_path):
    path = tmp_path / "helpdesk.csv"
    path.write_text(CSV)
    got, sink = collect()
    report = run_csv(path, MAPPING, sink, ConnectorState(tmp_path / "data", "tickets"))
    assert [d.source_id for d in got] == ["T-1", "T-1#comment-1", "T-1#comment-2", "T-3"]
    assert [(Path(d.path).name, d.reason) for d in report.dead_letters] == [
        ("helpdesk.csv#row-2", "column 'Created': 'yesterday' is not a date (ISO 8601 or RFC 2822)")]
    first, jira_comment, plain_comment, third = got
    assert first.source == "csv:helpdesk" and first.date == datetime(2024, 1, 2, 8, 0, tzinfo=UTC)
    assert {"ticket:T-1", "status:Open", "label:hw", "label:office", "label:urgent"} <= set(first.tags)
    assert (jira_comment.author, jira_comment.text, jira_comment.date) == ("Bob", "Cleared the tray", datetime(2024, 1, 3, 9, tzinfo=UTC))
    assert (plain_comment.author, plain_comment.date) == ("unknown", first.date)
    assert third.text.startswith("T-3: Multi, line\n\nFirst line\nsecond line")


def test_csv_missing_mapped_column_names_it_and_a_fixed_mapping_rereads(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(CSV)
    data = tmp_path / "data"
    wrong = CsvMapping(id="Key", title="Summary", text="Body", author="Reporter", date="Created", priority="Prio")
    got, sink = collect()
    report = run_csv([path], wrong, sink, ConnectorState(data, "tickets"))
    assert got == [] and len(report.dead_letters) == 1
    assert report.dead_letters[0].reason == "mapped column not in the header: text='Body', priority='Prio'"
    # Same bytes, corrected mapping: the file is read again, not skipped as unchanged.
    report = run_csv([path], MAPPING, sink, ConnectorState(data, "tickets"))
    assert report.unchanged == 0 and report.documents == 4 == len(got)
    assert run_csv([path], MAPPING, sink, ConnectorState(data, "tickets")).documents == 0


def test_csv_custom_date_format(tmp_path):
    path = tmp_path / "jira_export.csv"
    path.write_text("Issue key,Summary,Description,Reporter,Created\nK-1,S,D,Ann,01/Mar/24 10:15 AM\n")
    mapping = CsvMapping(id="Issue key", title="Summary", text="Description", author="Reporter",
                         date="Created", date_format="%d/%b/%y %I:%M %p")
    docs = run_csv(path, mapping, collect()[1], ConnectorState(tmp_path / "data", "tickets"))
    assert docs.documents == 1 and docs.dead_letters == []


def test_a_file_that_breaks_the_parser_costs_that_file_only(tmp_path):
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "ok.json").write_text(json.dumps(flat_issue(comments=[])))
    got, sink = collect()
    report = run_tickets([tmp_path], sink, ConnectorState(tmp_path / "data", "tickets"))
    assert [d.source_id for d in got] == ["HADOOP-1"]
    assert [Path(d.path).name for d in report.dead_letters] == ["deep.json"]
    assert report.dead_letters[0].reason.startswith("cannot parse: RecursionError")

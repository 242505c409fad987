"""Connectors under attack, on real files and real links: every path a run reads resolves under its
roots and never into orgmem's data folder; only the formats asked for are parsed; a date outside
the API's window (or one that overflows in UTC) is one dead letter, never a crash; a run always
returns its report; and a document the tenant already holds by its source id is reported.

Each test reproduces what the hostile review did (issue 16, findings 1, 3 and 5)."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from schemas.documents import DocumentIn
from services.adapters.event_log.sqlite import SqliteEventLog
from services.app.connectors import (
    KnownSources,
    check_under_roots,
    connector_roots_for,
    guard_for,
    run_connector,
)
from services.app.memory import append_documents
from services.connectors.base import ConnectorState
from services.connectors.email import parse_email
from services.connectors.mail_files import run_email
from services.connectors.meetings import run_meetings
from services.connectors.paths import PathGuard
from services.connectors.tickets import run_tickets
from services.connectors.tickets.csv import CsvMapping, run_csv
from services.core.caller import Caller
from services.core.write_rules import row_id_for
from services.errors import EmailParseError, Invalid
from services.settings import Settings
from tests.sinks import Collector

SECRET = "ZEBRA-SECRET-7731"
FAR = "9999-12-31T23:00:00-05:00"  # overflows when shifted to UTC


def mail(msg_id: str, body: str = "Hello.", date: str = "Tue, 14 Nov 2000 08:22:00 -0800") -> bytes:
    return (f"Message-ID: <{msg_id}>\nDate: {date}\nFrom: a@corp.example\nTo: b@corp.example\n"
            f"Subject: s {msg_id}\n\n{body}\n").encode()


def jira(key: str, created: str = "2024-03-01T10:00:00.000+0000", text: str = "desc") -> dict:
    return {"key": key, "fields": {"summary": f"issue {key}", "description": text, "created": created,
                                   "reporter": {"displayName": "Ann"}}}


def vtt(date: str, words: str = "We ship Friday.") -> str:
    return f"WEBVTT\n\nNOTE date: {date}\n\n00:00:01.000 --> 00:00:02.000\n<v Ann>{words}</v>\n"


def keys_file(data: Path) -> Path:
    data.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(data / "keys.sqlite")
    db.execute("CREATE TABLE keys (secret TEXT)")
    db.execute("INSERT INTO keys VALUES (?)", (SECRET,))
    db.commit()
    db.close()
    return data / "keys.sqlite"


def texts(sink: Collector) -> str:
    return "\n".join(d.text for d in sink.docs)


# --- finding 1: links out of the roots, the data folder, per-tenant roots, formats --------------


def test_a_linked_ticket_file_pointing_outside_the_folder_is_refused_and_reported(tmp_path):
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.json").write_text(json.dumps(jira("SEC-1", text=SECRET)))
    root = tmp_path / "inbox"
    root.mkdir()
    (root / "good.json").write_text(json.dumps(jira("OK-1")))
    (root / "link.json").symlink_to(tmp_path / "outside" / "secret.json")
    (root / "linked-folder").symlink_to(tmp_path / "outside", target_is_directory=True)
    sink = Collector()
    report = run_tickets([root], sink, ConnectorState(tmp_path / "data", "tickets"))
    assert [d.source_id for d in sink.docs] == ["OK-1"] and SECRET not in texts(sink)
    refused = {Path(d.path).name: d.reason for d in report.dead_letters}
    assert refused == {"link.json": "outside the connector roots", "linked-folder": "outside the connector roots"}


def test_a_linked_mail_file_and_linked_maildir_folders_are_refused(tmp_path):
    outside = tmp_path / "outside"
    (outside / "box").mkdir(parents=True)
    (outside / "secret.eml").write_bytes(mail("secret-file@x", SECRET))
    (outside / "box" / "1700000000.1.host").write_bytes(mail("secret-box@x", SECRET))
    root = tmp_path / "inbox"
    (root / "Maildir" / "new").mkdir(parents=True)
    (root / "Maildir" / "cur").symlink_to(outside / "box", target_is_directory=True)
    (root / "Maildir" / "new" / "1700000001.2.host").write_bytes(mail("own@x"))
    (root / "link.eml").symlink_to(outside / "secret.eml")
    sink = Collector()
    report = run_email([root], sink, ConnectorState(tmp_path / "data", "email"))
    assert [d.source_id for d in sink.docs] == ["own@x"] and SECRET not in texts(sink)
    assert {(Path(d.path).name, d.reason) for d in report.dead_letters} == {
        ("cur", "outside the connector roots"), ("link.eml", "outside the connector roots")}


def test_the_data_folder_is_never_read_even_when_a_root_holds_it(tmp_path):
    root = tmp_path / "srv"
    data = root / "orgmem-data"
    keys = keys_file(data)
    (data / "stray.eml").write_bytes(mail("in-data-folder@x", SECRET))  # sits in the data folder
    (root / "mail").mkdir()
    (root / "mail" / "ok.eml").write_bytes(mail("ok@x"))
    (root / "mail" / "keys.eml").symlink_to(keys)
    log = SqliteEventLog(tmp_path / "log.sqlite")
    report, _ = run_connector("email", [root], log, data, guard=PathGuard([root], [data]))
    docs = [e.event.document for e in log.read(0, 100)]
    assert [d.source_id for d in docs] == ["ok@x"]
    assert not any(SECRET in d.text or "SQLite format" in d.text for d in docs)
    [letter] = report.dead_letters
    assert Path(letter.path).name == "keys.eml" and "outside the connector roots" in letter.reason
    assert "data folder" in letter.reason
    with pytest.raises(Invalid, match="keys.sqlite is outside the connector roots"):
        check_under_roots([keys], PathGuard([root], [data]))
    log.close()


def test_a_hard_link_to_the_key_file_is_refused_by_its_inode(tmp_path):
    data = tmp_path / "data"
    keys = keys_file(data)
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    os.link(keys, inbox / "keys.eml")
    (inbox / "ok.eml").write_bytes(mail("ok@x"))
    sink = Collector()
    report = run_email([inbox], sink, ConnectorState(data, "email"), guard=PathGuard([inbox], [data]))
    assert [d.source_id for d in sink.docs] == ["ok@x"]
    assert [(Path(d.path).name, d.reason) for d in report.dead_letters] == [
        ("keys.eml", "outside the connector roots (orgmem's own data folder)")]


def test_files_named_inside_the_data_folder_are_read_and_a_hard_link_beside_them_is_not(tmp_path):
    """`orgmem demo` writes its organization into <data>/source and names the mbox itself: the
    named file is the root, so it is read; a hard link to the key file next to it is still refused."""
    data = tmp_path / "data"
    keys = keys_file(data)
    source = data / "source"
    source.mkdir()
    (source / "org.mbox").write_bytes(b"From a@x Tue Nov 14 08:22:00 2000\n" + mail("one@x") + b"\n")
    os.link(keys, source / "keys.eml")
    sink = Collector()
    report = run_email([source / "org.mbox"], sink, ConnectorState(data, "email"),
                       guard=PathGuard.around([source / "org.mbox"], [data]))
    assert [d.source_id for d in sink.docs] == ["one@x"] and report.dead_letters == []
    with pytest.raises(Exception, match="own data folder"):
        PathGuard.around([source], [data]).read_bytes(source / "keys.eml")


def test_roots_are_per_tenant_and_a_link_named_in_the_request_is_judged_by_its_target(tmp_path):
    data = tmp_path / "data"
    settings = Settings(data_dir=data, connector_tenant_roots={"acme": [tmp_path / "acme-inbox"]})
    default_inbox = data / "inbox" / "default"
    default_inbox.mkdir(parents=True)
    (default_inbox / "a.eml").write_bytes(mail("a@x", SECRET))
    (tmp_path / "acme-inbox").mkdir()
    (tmp_path / "acme-inbox" / "peek.eml").symlink_to(default_inbox / "a.eml")
    assert connector_roots_for(settings, "globex") == [data / "inbox" / "globex"]
    for tenant, path in [("globex", default_inbox), ("acme", default_inbox),
                         ("acme", tmp_path / "acme-inbox" / "peek.eml")]:
        with pytest.raises(Invalid, match="outside the connector roots"):
            check_under_roots([path], guard_for(settings, tenant))
    assert check_under_roots([default_inbox], guard_for(settings, "default")) == [default_inbox.resolve()]
    assert connector_roots_for(settings, "../default") == []  # no default inbox for an unsafe name


def test_a_text_file_of_name_value_lines_is_not_a_meeting_unless_transcripts_are_asked_for(tmp_path):
    root = tmp_path / "in"
    root.mkdir()
    (root / "config.txt").write_text(f"user: admin\npassword: {SECRET}\n")
    (root / "standup.vtt").write_text(vtt("2025-03-04"))
    sink = Collector()
    report = run_meetings([root], sink, ConnectorState(tmp_path / "data", "meetings"))
    assert [d.source_id for d in sink.docs] == ["standup"] and SECRET not in texts(sink)
    assert report.dead_letters == []
    named = Collector()
    report = run_meetings([root / "config.txt"], named, ConnectorState(tmp_path / "data2", "meetings"),
                          formats=["vtt"])
    assert named.docs == [] and "not among the formats asked for (vtt)" in report.dead_letters[0].reason
    asked = Collector()
    run_meetings([root], asked, ConnectorState(tmp_path / "data3", "meetings"), formats=["transcript"])
    assert [d.source_id for d in asked.docs] == ["config"]  # asked for: read as a transcript


def test_a_transcript_with_header_lines_in_a_mail_folder_is_not_mail(tmp_path):
    (tmp_path / "mail").mkdir()
    (tmp_path / "mail" / "pricing.txt").write_text(f"Title: Pricing\nDate: 2025-02-10\n\nAnn: {SECRET}\n")
    (tmp_path / "mail" / "12.").write_bytes(mail("real@x"))
    sink = Collector()
    run_email([tmp_path / "mail"], sink, ConnectorState(tmp_path / "data", "email"))
    assert [d.source_id for d in sink.docs] == ["real@x"]


def test_a_tenant_name_cannot_move_the_cursor_out_of_the_data_folder(tmp_path):
    data = tmp_path / "deep" / "data"
    state = ConnectorState(data, "../../escaped.email")
    state.save()
    assert state.path.parent == data / "connectors" and not (tmp_path / "deep" / "escaped.email.cursor.json").exists()


# --- finding 5: dates outside the window, one bad item, the report always returned ---------------


def test_a_far_future_meeting_date_is_one_dead_letter_and_the_folder_goes_in(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a-bad.vtt").write_text(vtt(FAR))
    (tmp_path / "in" / "b-good.vtt").write_text(vtt("2025-03-04"))
    (tmp_path / "in" / "c-ancient.vtt").write_text(vtt("0500-01-01"))
    sink = Collector()
    report = run_meetings([tmp_path / "in"], sink, ConnectorState(tmp_path / "data", "meetings"))
    assert [d.source_id for d in sink.docs] == ["b-good"]
    assert [Path(d.path).name for d in report.dead_letters] == ["a-bad.vtt", "c-ancient.vtt"]
    assert all("outside the accepted dates (years 1000 to 9000)" in d.reason for d in report.dead_letters)


def test_far_future_ticket_dates_cost_their_issue_only(tmp_path):
    issues = [jira("A-1", created=FAR), jira("A-2"), jira("A-3", created="0001-01-01T00:00:00")]
    (tmp_path / "t.json").write_text(json.dumps(issues))
    github = {"number": 7, "title": "t", "repository_url": "https://api.github.com/repos/o/r",
              "created_at": "2024-01-01T00:00:00Z",
              "comments_data": [{"id": 1, "body": "b", "created_at": FAR, "user": {"login": "x"}}]}
    (tmp_path / "g.jsonl").write_text(json.dumps(github) + "\n" + json.dumps(jira("A-4")) + "\n")
    sink = Collector()
    report = run_tickets([tmp_path / "t.json", tmp_path / "g.jsonl"], sink, ConnectorState(tmp_path / "data", "t"))
    assert sorted(d.source_id for d in sink.docs) == ["A-2", "A-4"]
    assert sorted(Path(d.path).name for d in report.dead_letters) == ["g.jsonl##7", "t.json#A-1", "t.json#A-3"]
    assert all("outside the accepted dates" in d.reason for d in report.dead_letters)


def test_a_far_future_csv_date_costs_its_row_only(tmp_path):
    (tmp_path / "t.csv").write_text(f"Key,Summary,Body,Who,When\nK-1,a,b,ann,{FAR}\nK-2,c,d,bob,2024-01-01\n")
    sink = Collector()
    mapping = CsvMapping(id="Key", title="Summary", text="Body", author="Who", date="When")
    report = run_csv([tmp_path / "t.csv"], mapping, sink, ConnectorState(tmp_path / "data", "csv"))
    assert [d.source_id for d in sink.docs] == ["K-2"]
    assert [Path(d.path).name for d in report.dead_letters] == ["t.csv#row-1"]


@pytest.mark.parametrize("date", ["Mon, 01 Jan 0001 00:00:00 +0000", "Fri, 31 Dec 9999 23:00:00 -0500",
                                  "Mon, 1 Jan 999 00:00:00 +0000", "Sat, 1 Jan 12000 00:00:00 +0000"])
def test_an_email_outside_the_window_is_refused_not_misdated(date):
    with pytest.raises(EmailParseError, match="outside the accepted dates"):
        parse_email(mail("old@x", date=date))
    assert parse_email(mail("y2k@x", date="14 Nov 00 08:22 -0800")).document.date.year == 2000  # obs-year


def test_a_year_one_email_in_an_mbox_is_a_dead_letter_and_the_rest_goes_in(tmp_path):
    box = b"".join(b"From x@y Mon Jan  1 00:00:00 2001\n" + m for m in
                   (mail("m1@x"), mail("m2@x", date="Mon, 01 Jan 0001 00:00:00 +0000"), mail("m3@x")))
    (tmp_path / "a.mbox").write_bytes(box)
    sink = Collector()
    report = run_email([tmp_path / "a.mbox"], sink, ConnectorState(tmp_path / "data", "email"))
    assert [d.source_id for d in sink.docs] == ["m1@x", "m3@x"]
    assert [d.path.rsplit("/", 1)[1] for d in report.dead_letters] == ["a.mbox#2"]
    assert "year 0001" in report.dead_letters[0].reason


class _LogThatFails(SqliteEventLog):
    """A log that takes `good` batches, then refuses every append (a full or broken disk)."""

    def __init__(self, path, good: int):
        super().__init__(path)
        self.good = good

    def append(self, events):
        if self.good <= 0:
            raise OSError(28, "No space left on device")
        self.good -= 1
        return super().append(events)


def test_a_run_whose_log_fails_part_way_still_returns_its_report(tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / f"{name}.json").write_text(json.dumps(jira(f"{name.upper()}-1")))
    log = _LogThatFails(tmp_path / "log.sqlite", good=1)
    report, position = run_connector("tickets", [tmp_path / "in"], log, tmp_path / "data")
    assert report.documents == 1 and position == 1 == log.head()
    assert report.stopped and "No space left on device" in report.stopped
    log.good = 10  # the disk has room again: the rerun reads what was not finished, nothing twice
    again, _ = run_connector("tickets", [tmp_path / "in"], log, tmp_path / "data")
    assert (again.documents, again.unchanged, again.stopped, log.head()) == (2, 1, None, 3)
    log.close()


# --- finding 3 (connector half): items skipped as already known are reported --------------------


def test_an_item_whose_source_id_was_taken_first_is_reported_as_already_known(tmp_path):
    log = SqliteEventLog(tmp_path / "log.sqlite")
    squat = DocumentIn(text="planted", author="mallory@corp.example", source="email", source_id="future@x")
    taken = append_documents(log, [squat], Caller(tenant="default")).row_ids[0]
    append_documents(log, [squat], Caller(tenant="other"))  # the same id in another tenant is no clash
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "1.eml").write_bytes(mail("future@x"))
    (tmp_path / "in" / "2.eml").write_bytes(mail("fresh@x"))
    (tmp_path / "in" / "3.eml").write_bytes(mail("fresh@x"))  # the same message twice in one run
    report, _ = run_connector("email", [tmp_path / "in"], log, tmp_path / "data")
    assert report.documents == 3 and report.already_known == 2
    fresh = row_id_for("default", DocumentIn(text="x", source="email", source_id="fresh@x"))
    assert report.known_items == [{"source": "email", "source_id": "future@x", "row_id": taken},
                                  {"source": "email", "source_id": "fresh@x", "row_id": fresh}]
    log.close()


def test_known_sources_asks_the_row_store_up_to_its_checkpoint_and_reads_the_log_after_it(tmp_path):
    log = SqliteEventLog(tmp_path / "log.sqlite")
    caller = Caller(tenant="default")
    old = DocumentIn(text="stored long ago", source="jira", source_id="OLD-1")
    append_documents(log, [old], caller)
    stored_ids = {row_id_for("default", old)}
    asked: list[list[str]] = []

    def stored(ids):
        asked.append(list(ids))
        return {i for i in ids if i in stored_ids}

    known = KnownSources(log, "default", stored, after=log.head())  # the projection is at the head
    recent = DocumentIn(text="not indexed yet", source="jira", source_id="NEW-1")
    append_documents(log, [recent], caller)
    ids = [row_id_for("default", d) for d in (old, recent, DocumentIn(text="x", source="jira", source_id="NONE"))]
    assert known.known(ids) == set(ids[:2])
    assert asked == [[ids[0], ids[2]]]  # the log tail answered for NEW-1; the store for the rest
    log.close()

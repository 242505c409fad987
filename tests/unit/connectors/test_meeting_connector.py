"""Meeting connector: WebVTT, SRT, plain transcripts and QMSum JSON, with the inputs that go wrong."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path

import pytest

from services.connectors.base import ConnectorState, read_dead_letters
from services.connectors.meetings import (
    parse_meeting_file,
    parse_srt,
    parse_transcript,
    parse_vtt,
    run_meetings,
)
from services.errors import MeetingError

VTT = """WEBVTT
X-Meeting-Date: 2025-03-04T09:30:00+01:00
Kind: captions

NOTE organiser: Dana Park

00:00:01.000 --> 00:00:04.000
<v Ann Lee>Good morning, let's start.</v>

00:00:04.500 --> 00:00:06.000
<v Ann Lee>First item is the budget.</v>

00:00:06.500 --> 00:00:09.000
Bob Stone: We are 10% over &amp; rising.

00:00:09.000 --> 00:00:10.000
so we need cuts.

00:00:11.000 --> 00:00:12.000
<v.loud Cy>Agreed.</v>
"""

BAD_TIMINGS = """WEBVTT

NOTE date: 2025-04-01

00:00:01.000 --> 00:00:04.000
<v Ann>We ship on Friday.</v>

00:00:0x.000 --> 00:00:zz.000
<v Bob>Then QA starts Monday.</v>

00:00:09.000 --> 00:00:10.000
<v Ann>Fine.</v>
"""

SRT = """1
00:00:01,000 --> 00:00:02,000
Ann: Hello

2
00:00:03,000 --> 00:00:04,000
Bob: <i>Hi</i> there
second line
"""


def collect():
    got = []
    return got, got.extend


def test_vtt_speakers_metadata_and_text_without_timestamps(tmp_path):
    path = tmp_path / "standup.vtt"
    path.write_text(VTT)
    docs, letters, items = parse_meeting_file(path.read_bytes(), path, acl_from_participants=True)
    assert (letters, items, len(docs)) == ([], 1, 1)
    doc = docs[0]
    assert doc.text.splitlines() == [
        "Ann Lee: Good morning, let's start. First item is the budget.",
        "Bob Stone: We are 10% over & rising. so we need cuts.",
        "Cy: Agreed.",
    ]
    assert "-->" not in doc.text
    assert (doc.kind, doc.source, doc.source_id, doc.thread) == ("meeting", "meeting", "standup", "standup")
    assert doc.date == datetime(2025, 3, 4, 8, 30, tzinfo=UTC)
    assert doc.author == "Dana Park"  # the organiser, not the first speaker
    assert set(doc.tags) == {"meeting:standup", "speaker:Ann Lee", "speaker:Bob Stone", "speaker:Cy"}
    assert doc.participants == ["Dana Park", "Ann Lee", "Bob Stone", "Cy"]
    # People, named as users: a bare name without "@" would read as a group.
    assert doc.acl == ["user:Dana Park", "user:Ann Lee", "user:Bob Stone", "user:Cy"]


def test_vtt_with_bad_cue_timings_is_recovered_by_the_tolerant_reader(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="services.connectors.meetings"):
        meeting = parse_vtt(BAD_TIMINGS, "m1")
    # The cue with the broken timestamp keeps its words; the strict parser alone would have lost them.
    assert meeting.turns == [("Ann", "We ship on Friday."), ("Bob", "Then QA starts Monday."), ("Ann", "Fine.")]
    assert meeting.date == datetime(2025, 4, 1, tzinfo=UTC)
    assert "tolerant line reader" in caplog.text and "WebVTT parser" in caplog.text


def test_vtt_without_any_cue_is_a_dead_letter_and_the_folder_goes_on(tmp_path):
    (tmp_path / "broken.vtt").write_text("WEBVTT\n\nthis is not a cue\n\nnor is this\n")
    (tmp_path / "good.vtt").write_text(VTT)
    got, sink = collect()
    report = run_meetings([tmp_path], sink, ConnectorState(tmp_path / "data", "meetings"))
    assert [d.source_id for d in got] == ["good"] and report.items_seen == 2
    [letter] = report.dead_letters
    assert Path(letter.path).name == "broken.vtt" and letter.connector == "meetings"
    assert letter.reason.startswith("no cue text can be recovered")
    assert read_dead_letters(tmp_path / "data")[0].path == letter.path


def test_vtt_first_speaker_is_the_author_without_an_organiser():
    meeting = parse_vtt(VTT.replace("NOTE organiser: Dana Park\n\n", ""), "m")
    assert meeting.organiser is None and meeting.speakers[0] == "Ann Lee"


def test_srt_is_read_by_pysrt():
    meeting = parse_srt(SRT, "s")
    assert meeting.turns == [("Ann", "Hello"), ("Bob", "Hi there second line")]


def test_srt_with_garbage_keeps_the_cues_and_drops_the_garbage():
    garbage = SRT + "\n3\n00:00:0x,000 --> zz\nAnn: Broken timing, words kept\n\n\x00\x07%%% garbage block\n\n"
    meeting = parse_srt(garbage, "s")
    assert meeting.turns[-1] == ("Ann", "Broken timing, words kept")
    assert "garbage" not in " ".join(text for _, text in meeting.turns)
    with pytest.raises(MeetingError, match="no cue text can be recovered .SRT parser"):
        parse_srt("\x00\x01 nothing here that looks like a subtitle", "s")


def test_binary_srt_is_a_dead_letter(tmp_path):
    path = tmp_path / "noise.srt"
    path.write_bytes(bytes(range(256)) * 4)
    docs, letters, _ = parse_meeting_file(path.read_bytes(), path)
    assert docs == [] and letters[0].reason.startswith("no cue text can be recovered")


def test_plain_transcript_with_header_and_continuation_lines():
    text = ("Title: Pricing review\nDate: 2025-02-10\nParticipants: Ann, Bob, Eve\n\n"
            "[00:01:02] Ann: We raise prices in May.\nBob: Only for new customers.\n"
            "Existing ones keep the old plan.\n")
    meeting = parse_transcript(text, "t")
    assert meeting.turns == [("Ann", "We raise prices in May."),
                             ("Bob", "Only for new customers. Existing ones keep the old plan.")]
    assert (meeting.title, meeting.date, meeting.attendees) == ("Pricing review", datetime(2025, 2, 10, tzinfo=UTC),
                                                                ["Ann", "Bob", "Eve"])


def test_transcript_without_speakers_is_a_dead_letter_and_the_rest_goes_in(tmp_path):
    (tmp_path / "notes.txt").write_text("just some notes\nwithout any speaker\n")
    (tmp_path / "call.txt").write_text("Ann: hello\nBob: hi\n")
    got, sink = collect()
    report = run_meetings(tmp_path, sink, ConnectorState(tmp_path / "data", "meetings"), formats=["transcript"])
    assert [d.source_id for d in got] == ["call"] and got[0].author == "Ann"
    assert [(Path(x.path).name, x.reason) for x in report.dead_letters] == [
        ("notes.txt", "no 'Speaker: text' line found: not a transcript")]


def test_bad_metadata_date_names_the_field(tmp_path):
    path = tmp_path / "x.vtt"
    path.write_text(VTT.replace("2025-03-04T09:30:00+01:00", "next tuesday"))
    docs, letters, _ = parse_meeting_file(path.read_bytes(), path)
    assert docs == [] and letters[0].reason == "NOTE/header date: 'next tuesday' is not an ISO 8601 date"


def test_date_precedence_metadata_then_file_name_then_argument(tmp_path):
    argument = datetime(2020, 1, 1, tzinfo=UTC)
    no_meta = VTT.replace("X-Meeting-Date: 2025-03-04T09:30:00+01:00\n", "")
    cases = [("2024-12-24-sync.vtt", VTT, datetime(2025, 3, 4, 8, 30, tzinfo=UTC)),
             ("2024-12-24-sync.vtt", no_meta, datetime(2024, 12, 24, tzinfo=UTC)),
             ("sync.vtt", no_meta, argument)]
    for name, text, expected in cases:
        path = tmp_path / name
        path.write_text(text)
        assert parse_meeting_file(path.read_bytes(), path, date=argument)[0][0].date == expected
    path = tmp_path / "sync.vtt"
    assert parse_meeting_file(path.read_bytes(), path)[0][0].date is None


def qmsum(n_turns=3, **extra):
    return {"topic_list": [], "general_query_list": [], "specific_query_list": [],
            "meeting_transcripts": [{"speaker": f"S{i % 2}", "content": f"turn {i}"} for i in range(n_turns)], **extra}


def test_qmsum_jsonl_one_document_per_meeting_dated_by_argument(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text("\n".join([json.dumps(qmsum()), json.dumps({"query": "not a meeting"}),
                               json.dumps(qmsum(2, id="ami-42", date="2005-06-01")), "{oops"]) + "\n")
    docs, letters, items = parse_meeting_file(path.read_bytes(), path, date=datetime(2021, 1, 1, tzinfo=UTC))
    assert items == 4
    assert [d.source_id for d in docs] == ["test#1", "ami-42"]
    first, second = docs
    assert first.text == "S0: turn 0\nS1: turn 1\nS0: turn 2" and first.author == "S0"
    assert first.date == datetime(2021, 1, 1, tzinfo=UTC) and second.date == datetime(2005, 6, 1, tzinfo=UTC)
    reasons = {Path(x.path).name: x.reason for x in letters}
    assert reasons["test.jsonl#2"].startswith("meeting_transcripts: missing")
    assert reasons["test.jsonl#4"].startswith("not JSON")


def test_json_file_that_is_not_a_meeting(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(["a", qmsum()]))
    docs, letters, _ = parse_meeting_file(path.read_bytes(), path)
    assert [d.source_id for d in docs] == ["m#2"]
    assert Path(letters[0].path).name == "m.json#1" and "got str" in letters[0].reason


def test_rerun_over_unchanged_files_hands_nothing_and_a_new_date_rereads(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.vtt").write_text(VTT)
    (folder / "b.srt").write_text(SRT)
    (folder / "c.txt").write_text("Ann: hi\n")
    (folder / "meetings.jsonl").write_text(json.dumps(qmsum()) + "\n")
    (folder / "readme.md").write_text("not read")
    data = tmp_path / "data"
    every = ["vtt", "srt", "json", "transcript"]
    got, sink = collect()
    assert run_meetings([folder], sink, ConnectorState(data, "meetings"), formats=every).documents == 4 == len(got)
    again, sink2 = collect()
    report = run_meetings([folder], sink2, ConnectorState(data, "meetings"), formats=every)
    assert (again, report.unchanged, report.documents) == ([], 4, 0)
    report = run_meetings([folder], sink2, ConnectorState(data, "meetings"), date="2022-02-02", formats=every)
    assert report.documents == 4 and again[1].date == datetime(2022, 2, 2, tzinfo=UTC)


def test_bad_date_argument_is_refused_before_reading():
    with pytest.raises(MeetingError, match="date argument"):
        run_meetings([], lambda docs: None, None, date="someday")  # type: ignore[arg-type]


def test_txt_transcripts_not_asked_for_are_counted_with_how_to_read_them(tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for i in range(3):
        (inbox / f"standup-{i}.txt").write_text("Dana: we ship Friday\nLee: agreed\n")
    (inbox / "notes.docx").write_bytes(b"PK")
    got: list = []
    report = run_meetings(inbox, got.extend, ConnectorState(tmp_path / "data", "meetings"))
    assert report.items_seen == 0 and got == []
    assert report.skipped[
        ".txt files: plain 'Speaker: text' transcripts are read with --format transcript "
        '(API: "formats": ["transcript"])'] == 3
    assert any(why.startswith(".docx files:") for why in report.skipped)
    asked = run_meetings(inbox, got.extend, ConnectorState(tmp_path / "data2", "meetings"),
                         formats=["transcript"])
    assert asked.items_seen == 3 and not any(why.startswith(".txt") for why in asked.skipped)


def test_a_speaker_who_names_themself_by_an_address_is_not_that_person_nor_given_their_access():
    # A speaker label is what a participant typed into the meeting tool. As an address it would
    # join the people directory's person of that address, and with --acl-from-participants grant
    # that address the meeting.
    from services.connectors.meetings import Meeting, meeting_document
    from services.core.people import parse

    meeting = Meeting("m-1", [("ceo@corp.example", "I approve the wire."), ("Eve <cfo@corp.example>", "Me too."),
                              ("Sam Ro", "Noted.")], attendees=["sam@corp.example"])
    doc = meeting_document(meeting, acl_from_participants=True)
    assert not any(parse(p).address for p in doc.participants if p != "sam@corp.example"), doc.participants
    assert doc.acl == ["sam@corp.example", "user:ceo＠corp.example", "user:Eve ‹cfo＠corp.example›", "user:Sam Ro"]
    assert doc.author == "ceo＠corp.example" and "ceo＠corp.example: I approve the wire." in doc.text
    assert "speaker:Sam Ro" in doc.tags  # a plain name is kept as written

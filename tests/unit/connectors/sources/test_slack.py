"""The Slack source over generated exports: threads across days, edits, deletions, private
conversations, attachments, mentions, and hostile files (each a dead letter, the rest read); the
runner over an export of later days only: what it lacks from before them is not deleted, a reply
deleted inside them is, and a rerun adds nothing."""

from __future__ import annotations

import json
import zipfile

import pytest

from schemas.documents import DATE_MAX
from services.connectors.base import DeadLetter
from services.connectors.contract import MemoryTree, Version, source_id_of
from services.connectors.sources import slack
from services.connectors.sources.chat import thread_version
from services.connectors.sources.slack import SlackSource
from services.connectors.trees import ZipTree
from tests.unit.connectors.sources.chat_fixtures import export_runs, message, slack_export, ts, write_folder, write_zip

D1, D2, D3 = "2024-01-02", "2024-01-03", "2024-02-10"


def read(files: dict[str, bytes], source: SlackSource | None = None):
    source = source or SlackSource()
    found = list(source.read(MemoryTree(files, label="export"), {}))
    versions = {f.item: f for f in found if isinstance(f, Version)}
    letters = [f for f in found if isinstance(f, DeadLetter)]
    return versions, letters, source


def general_days(edit: bool = False, drop_reply: bool = False) -> dict:
    root = ts(D1)
    reply_1 = message(ts(D1, 60), "U2", "Agreed, <@U1>.", thread_ts=root)
    day1 = [message(root, "U1", "Ship the *beta* on Friday?"), reply_1,
            message(ts(D1, 120), "U3", "Unrelated: lunch?")]
    late = message(ts(D3, 5), "U3", "Shipped" + (" (on Monday, not Friday)" if edit else ""), thread_ts=root,
                   edited=ts(D3, 500) if edit else None)
    if drop_reply:
        day1.remove(reply_1)
    return {"general": {D1: day1, D3: [late]}}


def test_a_thread_spans_days_and_reads_as_one_document():
    versions, letters, _ = read(slack_export(general_days()))
    assert not letters
    thread = versions[f"C1/{ts(D1)}"]
    doc = thread.document
    assert doc.kind == "chat" and doc.thread == "C1" and doc.author == "Dana"
    assert doc.participants == ["Dana", "Lee Park", "sam"]
    lines = doc.text.splitlines()
    assert lines[0] == "[2024-01-02 10:00] Dana: Ship the *beta* on Friday?"
    assert lines[1] == "[2024-01-02 10:01] Lee Park: Agreed, @Dana."
    assert lines[2].startswith("[2024-02-10 10:00] sam: Shipped")
    # Dated by its last message: no word of the row is later than its date.
    assert doc.date.isoformat().startswith("2024-02-10T10:00:05")
    assert thread.parts == {ts(D1), ts(D1, 60), ts(D3, 5)}
    assert not thread.private and thread.readers == ()
    single = versions[f"C1/{ts(D1, 120)}"]
    assert single.parts == {ts(D1, 120)} and single.document.text.endswith("Unrelated: lunch?")
    assert "channel:general" in doc.tags and doc.title.startswith("general: Ship the")


def test_the_same_export_gives_the_same_versions():
    first, _, _ = read(slack_export(general_days()))
    again, _, _ = read(slack_export(general_days()))
    assert {source_id_of(v) for v in first.values()} == {source_id_of(v) for v in again.values()}


def test_an_edit_is_a_new_version_of_the_same_item():
    before, _, _ = read(slack_export(general_days()))
    after, _, _ = read(slack_export(general_days(edit=True)))
    item = f"C1/{ts(D1)}"
    assert before[item].version != after[item].version
    assert before[item].parts == after[item].parts
    assert "(edited): Shipped (on Monday, not Friday)" in after[item].document.text
    # The untouched thread keeps its version.
    other = f"C1/{ts(D1, 120)}"
    assert before[other].version == after[other].version


def test_a_deleted_message_shrinks_the_parts():
    before, _, _ = read(slack_export(general_days()))
    after, _, _ = read(slack_export(general_days(drop_reply=True)))
    item = f"C1/{ts(D1)}"
    assert before[item].parts - after[item].parts == {ts(D1, 60)}
    assert "Agreed" not in after[item].document.text


def test_a_tombstoned_parent_keeps_its_replies():
    root = ts(D1)
    days = {"general": {D1: [message(root, "U1", "This message was deleted.", subtype="tombstone"),
                             message(ts(D1, 9), "U2", "still here", thread_ts=root),
                             message(ts(D1, 20), "U3", "gone", subtype="message_deleted")]}}
    versions, letters, source = read(slack_export(days))
    assert not letters
    thread = versions[f"C1/{root}"]
    assert thread.parts == {ts(D1, 9)} and "deleted" not in thread.document.text
    assert thread.document.author == "Lee Park" and len(versions) == 1
    assert source.counts["deleted"] == 2


@pytest.mark.parametrize(("folder", "cid", "readers"), [("secret-plans", "G1", ("U1", "U2")),
                                                        ("mpdm-dana--lee--sam-1", "G9", ("U1", "U2", "U3")),
                                                        ("D1", "D1", ("U1", "U3"))])
def test_private_channels_mpims_and_dms_are_read_by_their_members(folder, cid, readers):
    versions, letters, _ = read(slack_export({folder: {D1: [message(ts(D1), "U1", "between us")]}}))
    assert not letters
    (version,) = versions.values()
    assert version.item == f"{cid}/{ts(D1)}" and version.private and version.readers == readers


def test_a_folder_no_metadata_lists_is_not_read():
    versions, letters, _ = read(slack_export({"general": {D1: [message(ts(D1), "U1", "hi")]},
                                              "mystery": {D1: [message(ts(D1), "U1", "who can see this?")]}}))
    assert set(versions) == {f"C1/{ts(D1)}"}
    assert len(letters) == 1 and letters[0].path == "export/mystery" and "privacy" in letters[0].reason


def test_a_channel_also_listed_as_private_stays_private():
    groups = [{"id": "C1", "name": "general", "members": ["U1"]}]
    versions, _, _ = read(slack_export({"general": {D1: [message(ts(D1), "U1", "hi")]}}, groups=groups))
    (version,) = versions.values()
    assert version.private and version.readers == ("U1",)


def test_attachments_are_named_and_mentions_of_unknown_ids_counted():
    files = [{"id": "F1", "name": "q3-plan.pdf", "title": "Q3 plan"}, {"id": "F2", "name": "x.png"}, "junk"]
    days = {"general": {D1: [message(ts(D1), "U1", "see <@U404> and <@U2|lee>, <#C1> <https://ex.test|site> &amp; <!here>",
                                     files=files),
                             message(ts(D1, 3), "U1", "", files=[{"name": "only-a-file.txt"}])]}}
    versions, letters, source = read(slack_export(days))
    assert not letters
    text = versions[f"C1/{ts(D1)}"].document.text
    assert "see @U404 and @Lee Park, #general site (https://ex.test) & @here" in text
    assert "[attached: Q3 plan (q3-plan.pdf); x.png]" in text
    tags = versions[f"C1/{ts(D1)}"].document.tags
    assert [t for t in tags if t.startswith("mention:")] == ["mention:Lee Park"]  # U404 names no one
    assert versions[f"C1/{ts(D1, 3)}"].document.text.endswith("[attached: only-a-file.txt]")
    assert source.counts["unknown_mentions"] == 1


def test_a_malformed_day_is_one_dead_letter_and_the_rest_goes_in():
    days = general_days()
    days["general"]["2024-01-05"] = b'[{"ts": "1704448800.000100", "text": "half'
    days["general"]["2024-01-06"] = b'{"not": "a list"}'
    days["general"]["2024-01-07"] = b"\xff\xfe garbage"
    days["general"]["2024-01-08"] = b"[" * 100_000 + b"]" * 100_000
    versions, letters, _ = read(slack_export(days))
    assert sorted(letter.path for letter in letters) == [f"export/general/2024-01-0{d}.json" for d in (5, 6, 7, 8)]
    assert "not JSON" in letters[0].reason and "expected a list" in letters[1].reason
    assert len(versions[f"C1/{ts(D1)}"].parts) == 3


@pytest.mark.parametrize(("stamp", "why"), [("253402300799.000000", "outside the accepted dates"),
                                            ("99999999999999.1", "not a Slack timestamp"),
                                            ("1e9", "not a Slack timestamp"),
                                            ("-5.0", "not a Slack timestamp"),
                                            (1700000000.5, "not a Slack timestamp")])
def test_garbage_or_far_ts_is_a_dead_letter(stamp, why):
    days = {"general": {D1: [message(stamp, "U1", "bad time"), message(ts(D1), "U2", "fine"),
                             message(ts(D1, 1), "U2", "reply to garbage", thread_ts="not-a-ts"),
                             "not an object", {"ts": ts(D1, 2), "text": ["not", "text"]}]}}
    versions, letters, _ = read(slack_export(days))
    assert list(versions) == [f"C1/{ts(D1)}"]
    assert len(letters) == 4 and why in letters[0].reason and letters[0].path == f"export/general/{D1}.json[0]"
    assert all(v.document.date <= DATE_MAX for v in versions.values())


def test_a_huge_day_file_is_refused_by_the_tree_cap():
    class Capped(MemoryTree):
        def read(self, name, limit=0):
            return super().read(name, limit=1000)
    files = slack_export({"general": {D1: [message(ts(D1, i), "U1", "x" * 50) for i in range(50)],
                                      D2: [message(ts(D2), "U1", "small")]}})
    found = list(SlackSource().read(Capped(files, label="export"), {}))
    letters = [f for f in found if isinstance(f, DeadLetter)]
    assert [letter.path for letter in letters] == [f"export/general/{D1}.json"] and "over 1000 bytes" in letters[0].reason
    assert [f.item for f in found if isinstance(f, Version)] == [f"C1/{ts(D2)}"]


def test_many_bad_messages_in_one_file_are_summed():
    versions, letters, _ = read(slack_export({"general": {D1: [{"ts": "x"}] * 500}}))
    assert not versions and len(letters) == 21 and letters[-1].reason == "480 more messages not read"


def test_malformed_metadata_is_a_dead_letter_and_its_folders_are_not_read():
    files = slack_export({"secret-plans": {D1: [message(ts(D1), "U1", "private words")]},
                          "general": {D1: [message(ts(D1), "U1", "<@U2> hi")]}}, groups=b"{broken", users=b"[1, 2")
    versions, letters, _ = read(files)
    reasons = {letter.path: letter.reason for letter in letters}
    assert set(reasons) == {"export/users.json", "export/groups.json", "export/secret-plans"}
    # Without users.json, names fall back to the ids; the public channel still goes in.
    assert list(versions) == [f"C1/{ts(D1)}"] and "U1: @U2 hi" in versions[f"C1/{ts(D1)}"].document.text


def test_a_zip_with_a_top_folder_reads_like_the_folder(tmp_path):
    files = slack_export(general_days(), prefix="Acme Slack export Jan 1 2024/")
    path = write_zip(files, tmp_path / "export.zip")
    with zipfile.ZipFile(path) as archive:
        found = list(SlackSource().read(ZipTree(archive, label=str(path)), {}))
    versions = [f for f in found if isinstance(f, Version)]
    assert len(versions) == 2 and not [f for f in found if isinstance(f, DeadLetter)]
    flat, _, _ = read(slack_export(general_days()))
    assert {source_id_of(v) for v in versions} == {source_id_of(v) for v in flat.values()}


def test_a_message_repeated_in_two_day_files_is_read_once():
    m = message(ts(D1), "U1", "once")
    versions, _, source = read(slack_export({"general": {D1: [m], D2: [m]}}))
    assert len(versions) == 1 and source.counts["repeated"] == 1


def test_a_thread_over_the_text_cap_is_a_dead_letter():
    root = ts(D1)
    big = [message(root, "U1", "x" * 400_000)] + [message(ts(D1, i), "U1", "y" * 400_000, thread_ts=root)
                                                   for i in (1, 2)]
    versions, letters, _ = read(slack_export({"general": {D1: big, D2: [message(ts(D2), "U1", "ok")]}}))
    assert list(versions) == [f"C1/{ts(D2)}"] and "over 1000000" in letters[0].reason


def test_json_metadata_of_the_wrong_shape_is_survived():
    users = [{"id": 5}, "x", {"id": "U1", "profile": "nope", "name": "dana"}]
    channels = [{"id": "../../etc", "name": "general"}, {"id": "C1", "name": "general", "members": "U1"}]
    versions, letters, _ = read(slack_export({"general": {D1: [message(ts(D1), "U1", "hi")]}},
                                             users=users, channels=channels))
    assert not letters and versions[f"C1/{ts(D1)}"].document.author == "dana"
    assert json.dumps(versions[f"C1/{ts(D1)}"].readers) == "[]"


# --- through the runner: an export of later days only ---------------------------------------------
W1, W2, W3 = "2024-03-01", "2024-03-09", "2024-03-12"  # week one; then two days of the next week


def _weeks(*, delete_w3_reply: bool = False, later_only: bool = False) -> dict[str, bytes]:
    """#general over two weeks: a thread started in week one with replies then and later, and a
    thread of week one alone. `later_only`: the export of the later days only (W2 to W3)."""
    root = ts(W1)
    early = [message(root, "U1", "Plan the offsite"), message(ts(W1, 60), "U2", "Lisbon?", thread_ts=root),
             message(ts(W1, 120), "U3", "Week one only")]
    middle = [message(ts(W2), "U2", "Booked the venue", thread_ts=root)]
    late = [message(ts(W3), "U3", "Flights bought", thread_ts=root)]
    if not delete_w3_reply:
        late.insert(0, message(ts(W3, -30), "U1", "Budget is tight", thread_ts=root))
    days = {W2: middle, W3: late} if later_only else {W1: early, W2: middle, W3: late}
    return slack_export({"general": days})


@pytest.fixture
def run(tmp_path):
    return export_runs(SlackSource(), tmp_path)


def test_an_export_of_later_days_removes_no_reply_or_thread_dated_before_them(run):
    go, sunk = run
    assert go(_weeks()).documents == 2
    full = {d.source_id.split("@")[0]: d.source_id for d in sunk}
    report = go(_weeks(later_only=True))
    # The thread's week-one messages and the week-one thread are outside what it covers: not deleted.
    assert report.removed == [] and not report.dead_letters
    assert report.documents == 1 and [s["source_id"] for s in report.superseded] == [full[f"C1/{ts(W1)}"]]
    assert any("2 messages or parts that 1 items held before" in note for note in report.notes)
    again = go(_weeks(later_only=True))
    assert again.documents == 0 and again.removed == [] and again.superseded == []
    # A full export after it lacks nothing: the earlier versions still stand, none reads as deleted.
    assert go(_weeks()).removed == []


def test_a_reply_deleted_on_a_day_the_later_export_covers_is_removed(run):
    go, sunk = run
    go(_weeks())
    held = next(d.source_id for d in sunk if d.source_id.startswith(f"C1/{ts(W1)}@"))
    report = go(_weeks(later_only=True, delete_w3_reply=True))
    # W3's "Budget is tight" is gone from a day the export holds: the version holding it goes.
    assert [(r["source_id"], r["reason"]) for r in report.removed] == [(held, "a part was deleted in slack")]
    assert report.documents == 1 and "Budget is tight" not in sunk[-1].text
    again = go(_weeks(later_only=True, delete_w3_reply=True))
    assert again.documents == 0 and again.removed == [] and again.superseded == []


def test_without_part_dates_every_lost_part_reads_as_deleted(run, monkeypatch):
    # A source that gives no part dates keeps the old rule (as does a cursor written before them:
    # the lost parts' dates come from the versions that held them).
    go, _ = run
    monkeypatch.setattr(slack, "thread_version", lambda *args, dated_parts=False: thread_version(*args))
    go(_weeks())
    report = go(_weeks(later_only=True))
    assert len(report.removed) == 1 and report.removed[0]["reason"] == "a part was deleted in slack"

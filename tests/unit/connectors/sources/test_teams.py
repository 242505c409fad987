"""The Teams source over generated Graph exports: channel threads (replies listed or nested),
chats by day, HTML bodies, edits, deletions, private and shared channels, chats and teams read by
their members, unknown users through the access map, attachments, and hostile files (each a dead
letter, the rest read); the runner over it: a rerun adds nothing, an edit supersedes, a deletion
removes."""

from __future__ import annotations

import json
import time
import zipfile

import pytest

from services.connectors.access import AccessMap
from services.connectors.base import DeadLetter
from services.connectors.contract import MemoryTree, Removed, Version, source_id_of
from services.connectors.sources.teams import TeamsSource, html_text
from services.connectors.trees import ZipTree
from tests.unit.connectors.sources.chat_fixtures import export_runs, write_folder, write_zip
from tests.unit.connectors.sources.teams_fixtures import (
    DANA,
    LEE,
    SAM,
    file_attachment,
    msg,
    teams_export,
)

D1, D2 = "2024-01-02", "2024-01-03"
GENERAL = ("acme", "general")
ROOT = "teams:acme:general/1001"


def read(files: dict[str, bytes]):
    source = TeamsSource()
    found = list(source.read(MemoryTree(files, label="export"), {}))
    versions = {f.item: f for f in found if isinstance(f, Version)}
    letters = [f for f in found if isinstance(f, DeadLetter)]
    return versions, letters, source, found


def general(edit: bool = False, delete_reply: bool = False, nested: bool = False) -> list[dict]:
    root = msg("1001", DANA, '<div><p>Ship the <b>beta</b> on Friday, <at id="0">Lee Park</at>?</p></div>', D1,
               mentions=[(0, LEE, "Lee Park")])
    replies = [msg("1002", LEE, "Agreed.<br>Friday it is", D1, 60, reply_to="1001", deleted=delete_reply),
               msg("1003", SAM, "<p>Shipped" + (" on Monday" if edit else "") + "</p>", D2, 5, reply_to="1001",
                   edited=400 if edit else None)]
    other = msg("1004", SAM, "Unrelated: lunch?", D1, 120, content_type="text")
    if nested:  # Graph's $expand=replies: the replies inside their message, without replyToId
        root["replies"] = [r | {"replyToId": None} for r in replies]
        return [root, other]
    return [root, *replies, other]


def export(**kw) -> dict[str, bytes]:
    chats = kw.pop("chats", None)
    return teams_export({GENERAL: {"membershipType": "standard", "pages": [general(**kw)]}}, chats)


def test_a_message_and_its_replies_are_one_document():
    versions, letters, source, _ = read(export())
    assert not letters
    thread = versions[ROOT]
    doc = thread.document
    assert doc.kind == "chat" and doc.thread == "teams:acme:general" and doc.author == "Dana Lee"
    assert doc.text.splitlines() == ["[2024-01-02 10:00] Dana Lee: Ship the beta on Friday, @Lee Park?",
                                     "[2024-01-02 10:01] Lee Park: Agreed.", "Friday it is",
                                     "[2024-01-03 10:00] Sam Roe: Shipped"]
    assert doc.date.isoformat() == "2024-01-03T10:00:05+00:00"
    assert thread.parts == {"1001", "1002", "1003"} and doc.participants == ["Dana Lee", "Lee Park", "Sam Roe"]
    assert [t for t in doc.tags if t.startswith("mention:")] == ["mention:Lee Park"]  # the people directory's role
    assert "channel:General" in doc.tags and doc.title == "General: Ship the beta on Friday, @Lee Park?"
    # A standard channel of a public team is the tenant's.
    assert not thread.private and thread.readers == ()
    assert versions["teams:acme:general/1004"].document.text.endswith("Sam Roe: Unrelated: lunch?")
    assert source.counts["unknown_mentions"] == 0


def test_nested_replies_read_like_listed_ones():
    flat, _, _, _ = read(export())
    nested, letters, _, _ = read(export(nested=True))
    assert not letters
    assert {source_id_of(v) for v in nested.values()} == {source_id_of(v) for v in flat.values()}


def test_the_same_export_gives_the_same_versions_and_pages_may_repeat_a_message():
    first, _, _, _ = read(export())
    files = teams_export({GENERAL: {"membershipType": "standard", "pages": [general()[:2], general()[1:]]}})
    again, letters, source, _ = read(files)
    assert not letters and source.counts["repeated"] == 1
    assert {source_id_of(v) for v in first.values()} == {source_id_of(v) for v in again.values()}


def test_an_edit_is_a_new_version_and_the_last_modified_copy_wins():
    before, _, _, _ = read(export())
    after, _, _, _ = read(export(edit=True))
    assert before[ROOT].version != after[ROOT].version and before[ROOT].parts == after[ROOT].parts
    assert "Sam Roe (edited): Shipped on Monday" in after[ROOT].document.text
    assert before["teams:acme:general/1004"].version == after["teams:acme:general/1004"].version
    # The edited copy on the first page, the stale one on the next: the later modification is read.
    pages = [general(edit=True), general()]
    mixed, _, _, _ = read(teams_export({GENERAL: {"membershipType": "standard", "pages": pages}}))
    assert mixed[ROOT].version == after[ROOT].version


def test_a_deleted_reply_shrinks_the_parts_and_a_fully_deleted_thread_is_removed():
    before, _, _, _ = read(export())
    after, letters, source, _ = read(export(delete_reply=True))
    assert not letters and before[ROOT].parts - after[ROOT].parts == {"1002"} and source.counts["deleted"] == 1
    assert "Agreed" not in after[ROOT].document.text
    gone = [msg("1001", DANA, "x", D1, deleted=True), msg("1002", LEE, "y", D1, 1, reply_to="1001", deleted=True)]
    _, _, _, found = read(teams_export({GENERAL: {"membershipType": "standard", "pages": [gone]}}))
    assert found == [Removed(ROOT, "every message deleted in teams")]


@pytest.mark.parametrize("kind", ["private", "shared"])
def test_private_and_shared_channels_are_read_by_their_members(kind):
    files = teams_export({("acme", "secret"): {"membershipType": kind, "members": [DANA, LEE],
                                               "pages": [[msg("1", DANA, "between us", D1)]]}})
    versions, letters, _, _ = read(files)
    assert not letters
    (version,) = versions.values()
    assert version.item == "teams:acme:secret/1" and version.private
    assert version.readers == (DANA, LEE) and version.group == "19:secret@thread.tacv2"


def test_standard_channels_of_a_private_team_are_read_by_the_team():
    files = teams_export({GENERAL: {"membershipType": "standard", "pages": [general()]}}, visibility="private",
                         team_members=(DANA, SAM))
    versions, _, _, _ = read(files)
    assert versions[ROOT].private and versions[ROOT].readers == (DANA, SAM) and versions[ROOT].group == "team-acme"
    # Without team.json (visibility unknown) and no members file: nobody but an unrestricted reader.
    files = teams_export({GENERAL: {"membershipType": "standard", "pages": [general()]}}, visibility=None,
                         team_members=None)
    versions, letters, source, _ = read(files)
    assert not letters and versions[ROOT].private and versions[ROOT].readers == ()
    assert source.counts["no_members"] == 1
    assert AccessMap().acl("teams", (), True, []) == ["user:~teams:nobody"]


def test_a_channel_of_unknown_privacy_is_not_read():
    files = teams_export({GENERAL: {"membershipType": "standard", "pages": [general()]},
                          ("acme", "mystery"): {"pages": [[msg("9", DANA, "who can see this?", D1)]]},
                          ("acme", "members-only"): {"members": [DANA], "pages": [[msg("8", DANA, "us", D1)]]}})
    versions, letters, _, _ = read(files)
    assert [d.path for d in letters] == ["export/teams/acme/channels/mystery"] and "privacy" in letters[0].reason
    assert versions["teams:acme:members-only/8"].private and versions["teams:acme:members-only/8"].readers == (DANA,)
    assert not any(v.startswith("teams:acme:mystery") for v in versions)


def test_a_chat_is_one_document_a_day_read_by_its_members():
    chat = {"members": [DANA, SAM], "pages": [[msg("1", DANA, "Can you review the PR?", D1),
                                              msg("2", SAM, "Done", D1, 300),
                                              msg("3", SAM, "Next one tomorrow", D2)]]}
    versions, letters, _, _ = read(export(chats={"c1": chat}))
    assert not letters
    day = versions["chats:c1/2024-01-02"]
    assert day.parts == {"1", "2"} and day.private and day.readers == (DANA, SAM)
    assert day.document.thread == "chats:c1" and "channel:Dana Lee, Sam Roe" in day.document.tags
    assert day.group == "19:c1@unq.gbl.spaces" and versions["chats:c1/2024-01-03"].parts == {"3"}


def test_a_user_id_that_names_no_one_grants_nobody_through_the_access_map():
    ghost = "u-ghost-9999"
    chat = {"members": [DANA, ghost], "pages": [[msg("1", ghost, '<at id="0"></at> hi', D1, name="",
                                                     mentions=[(0, "u-nobody-0000", "")])]]}
    files = export(chats={"c1": chat})
    files["chats/c1/members.json"] = json.dumps({"value": [{"userId": DANA, "displayName": "Dana Lee"},
                                                           {"userId": ghost}]}).encode()
    versions, letters, source, _ = read(files)
    assert not letters
    day = versions["chats:c1/2024-01-02"]
    assert day.document.text == "[2024-01-02 10:00] u-ghost-9999: @u-nobody-0000 hi"
    assert not [t for t in day.document.tags if t.startswith("mention:")]  # an unknown id names no one
    assert source.counts["unknown_users"] == 1 and source.counts["unknown_mentions"] == 1
    access = AccessMap.from_dict({"users": {DANA: "dana@example.com"}})
    assert access.acl("teams", day.readers, day.private, [], day.group) == [
        "user:dana@example.com", f"user:~teams:{ghost}"]


def test_attachments_are_named_and_quotes_and_cards_left_out():
    attachments = [file_attachment("q3-plan.pdf"), {"id": "q", "contentType": "messageReference", "name": "quoted"},
                   {"id": "card", "contentType": "application/vnd.microsoft.card.adaptive", "name": None}, "junk"]
    files = teams_export({GENERAL: {"membershipType": "standard", "pages": [[
        msg("1", DANA, '<attachment id="att-q3-plan.pdf"></attachment>', D1, attachments=attachments)]]}})
    versions, letters, _, _ = read(files)
    assert not letters and versions["teams:acme:general/1"].document.text.endswith("Dana Lee: [attached: q3-plan.pdf]")


def test_html_bodies_read_as_text():
    assert html_text('<p>a &amp; b</p><p>c<emoji alt="👍"></emoji></p><img alt="chart"><script>x()</script>', {}) == \
        "a & b\nc👍\n[image: chart]"
    assert html_text("https://example.com/only-a-url", {}) == "https://example.com/only-a-url"  # no warning noise
    assert html_text('<at id="3"></at>', {"3": "Sam Roe"}) == "@Sam Roe"


def test_system_events_and_empty_messages_are_left_out():
    page = [msg("1", None, "<systemEventMessage/>", D1, kind="systemEventMessage"), msg("2", DANA, "<p> </p>", D1, 1)]
    versions, letters, source, _ = read(teams_export({GENERAL: {"membershipType": "standard", "pages": [page]}}))
    assert not versions and not letters and source.counts["notices"] == 1 and source.counts["empty"] == 1


def test_malformed_files_and_messages_are_dead_letters_and_the_rest_goes_in():
    bad = [msg("1", DANA, "bad time", D1) | {"createdDateTime": "yesterday"},
           msg("2", DANA, "far", D1) | {"createdDateTime": "9999-12-31T23:59:59Z"},
           msg("../3", DANA, "slash", D1), "not an object", msg("4", DANA, "x", D1) | {"body": {"content": 5}}]
    files = teams_export({GENERAL: {"membershipType": "standard",
                                    "pages": [general(), bad, b'{"value": [', b'{"not": "value"}', b"\xff\xfe",
                                              b"[" * 100_000 + b"]" * 100_000]}})
    files["teams/acme/channels/general/members.json"] = b"{broken"
    versions, letters, _, _ = read(files)
    paths = [d.path for d in letters]
    base = "export/teams/acme/channels/general/"
    assert paths == [base + "members.json", *(f"{base}messages-2.json[{i}]" for i in range(5)),
                     *(f"{base}messages-{n}.json" for n in (3, 4, 5, 6))]
    assert "not an ISO 8601 time" in letters[1].reason and "outside the accepted dates" in letters[2].reason
    assert "not JSON" in letters[6].reason and "a 'value' list" in letters[7].reason
    assert set(versions) == {ROOT, "teams:acme:general/1004"} and len(versions[ROOT].parts) == 3


def test_a_zip_with_a_top_folder_reads_like_the_folder(tmp_path):
    path = write_zip(export(chats={"c1": {"members": [DANA], "pages": [[msg("1", DANA, "hi", D1)]]}}) |
                     {"README.txt": b"not read"}, tmp_path / "plain.zip")
    nested = write_zip({f"Teams export/{k}": v for k, v in export().items()}, tmp_path / "nested.zip")
    flat, _, _, _ = read(export())
    with zipfile.ZipFile(nested) as archive:
        found = list(TeamsSource().read(ZipTree(archive, label=str(nested)), {}))
    assert {source_id_of(v) for v in found} == {source_id_of(v) for v in flat.values()}
    source = TeamsSource()
    with zipfile.ZipFile(path) as archive:
        items = {f.item for f in source.read(ZipTree(archive, label=str(path)), {})}
    assert "chats:c1/2024-01-02" in items and source.counts["other_files"] == 1


def test_folder_names_with_separators_cannot_collide():
    files = teams_export({("a:b", "c"): {"membershipType": "standard", "pages": [[msg("1", DANA, "one", D1)]]},
                          ("a", "b:c"): {"membershipType": "standard", "pages": [[msg("1", DANA, "two", D1)]]}})
    versions, _, _, _ = read(files)
    assert set(versions) == {"teams:a%3Ab:c/1", "teams:a:b%3Ac/1"}


@pytest.fixture
def run(tmp_path):
    return export_runs(TeamsSource(), tmp_path)


def test_through_the_runner_a_rerun_adds_nothing_an_edit_supersedes_a_deletion_removes(run):
    go, sunk = run
    assert go(export()).documents == 2
    assert go(export()).documents == 0
    edited = go(export(edit=True))
    first = sunk[0].source_id
    assert first.startswith(ROOT) and [s["source_id"] for s in edited.superseded] == [first]
    deleted = go(export(edit=True, delete_reply=True))
    assert {r["source_id"] for r in deleted.removed} == {first, sunk[2].source_id}
    report = go(export(edit=True, delete_reply=True) | {"teams/acme/channels/general/messages-2.json": b"{"})
    assert report.documents == 0 and len(report.dead_letters) == 1 and report.removed == []


def test_an_export_of_a_later_date_range_deletes_nothing_before_it(run):
    go, _ = run
    early = [msg("1", DANA, "January", D1), msg("2", LEE, "also January", D1, 30)]
    assert go(teams_export({GENERAL: {"membershipType": "standard", "pages": [early]}})).documents == 2
    # The next export holds only later days: the earlier threads are outside what it covers.
    later = teams_export({GENERAL: {"membershipType": "standard", "pages": [[msg("3", SAM, "later", D2)]]}})
    report = go(later)
    assert report.documents == 1 and report.removed == []
    # Inside the dates it covers, a thread it lacks is gone.
    same_day = teams_export({GENERAL: {"membershipType": "standard", "pages": [[early[0], msg("3", SAM, "later", D2)]]}})
    assert [r["source_id"].split("@")[0] for r in go(same_day).removed] == ["teams:acme:general/2"]


def test_a_name_a_message_lacks_is_found_in_any_members_file_whatever_the_order():
    files = teams_export({("acme", "zz-private"): {"membershipType": "private", "members": [SAM],
                                                   "pages": [[msg("1", SAM, "in the channel", D1)]]}},
                         {"a-chat": {"members": [DANA], "pages": [[msg("7", SAM, "no name on me", D1, name="")]]}},
                         team_members=(DANA,))
    versions, letters, source, _ = read(files)
    assert not letters and source.counts["unknown_users"] == 0
    assert versions["chats:a-chat/2024-01-02"].document.author == "Sam Roe"


def test_a_body_of_deeply_nested_tags_reads_in_linear_time():
    # Editing the tree (insert_after per block) walked each tag's descendants: minutes for this.
    start = time.monotonic()
    body = "<div><b>" * 50_000 + "deep" + "</b></div>" * 50_000 + "<!-- not text --><p>after</p>"
    assert html_text(body, {}) == "deep\nafter"
    assert time.monotonic() - start < 20

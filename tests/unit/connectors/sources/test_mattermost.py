"""The Mattermost source over generated bulk exports: threads, edits, deletions, private channels
and direct messages, attachments, unknown users, and hostile lines (each a dead letter, the rest
read); the runner over it: a rerun adds nothing, an edit supersedes, a deletion removes."""

from __future__ import annotations

import zipfile

import pytest

from services.connectors.access import AccessMap
from services.connectors.base import ConnectorState, DeadLetter
from services.connectors.contract import MemoryTree, Removed, Version, source_id_of
from services.connectors.paths import PathGuard
from services.connectors.runner import run_source
from services.connectors.sources.mattermost import MattermostSource
from services.connectors.trees import ZipTree
from tests.unit.connectors.sources.chat_fixtures import write_folder, write_zip
from tests.unit.connectors.sources.mattermost_fixtures import direct, mattermost_export, ms, post, reply, user

D1, D2 = "2024-01-02", "2024-01-03"
ROOT = f"acme:town-square/{ms(D1)}@dana"


def read(files: dict[str, bytes]):
    source = MattermostSource()
    found = list(source.read(MemoryTree(files, label="export"), {}))
    versions = {f.item: f for f in found if isinstance(f, Version)}
    letters = [f for f in found if isinstance(f, DeadLetter)]
    return versions, letters, source, found


def town(edit: bool = False, delete_reply: bool = False) -> list[dict]:
    replies = [reply("lee", "Agreed, @dana.", ms(D1, 60), delete_at=ms(D2) if delete_reply else None),
               reply("sam", "Shipped" + (" on Monday" if edit else ""), ms(D2, 5),
                     edit_at=ms(D2, 500) if edit else None)]
    return [post("town-square", "dana", "Ship the **beta** on Friday?", ms(D1), replies=replies),
            post("town-square", "sam", "Unrelated: lunch?", ms(D1, 120))]


def test_a_post_and_its_replies_are_one_document():
    versions, letters, source, _ = read(mattermost_export(town()))
    assert not letters
    thread = versions[ROOT]
    doc = thread.document
    assert doc.kind == "chat" and doc.thread == "acme:town-square" and doc.author == "Dana Lee"
    assert doc.participants == ["Dana Lee", "Lee P", "sam"]
    assert doc.text.splitlines() == ["[2024-01-02 10:00] Dana Lee: Ship the **beta** on Friday?",
                                     "[2024-01-02 10:01] Lee P: Agreed, @dana.",
                                     "[2024-01-03 10:00] sam: Shipped"]
    assert doc.date.isoformat() == "2024-01-03T10:00:05+00:00"  # its last message
    assert thread.parts == {f"{ms(D1)}@dana", f"{ms(D1, 60)}@lee", f"{ms(D2, 5)}@sam"}
    assert not thread.private and thread.readers == () and thread.group == ""
    assert "channel:Town Square" in doc.tags and doc.title == "Town Square: Ship the **beta** on Friday?"
    assert [t for t in doc.tags if t.startswith("mention:")] == ["mention:Dana Lee"]  # "@dana.", by her name
    assert versions[f"acme:town-square/{ms(D1, 120)}@sam"].parts == {f"{ms(D1, 120)}@sam"}
    assert source.counts["unknown_mentions"] == 0 and source.counts["other_files"] == 1  # data/q3-plan.pdf


def test_the_same_export_gives_the_same_versions():
    first, _, _, _ = read(mattermost_export(town()))
    again, _, _, _ = read(mattermost_export(town()))
    assert {source_id_of(v) for v in first.values()} == {source_id_of(v) for v in again.values()}


def test_an_edit_is_a_new_version_of_the_same_item():
    before, _, _, _ = read(mattermost_export(town()))
    after, _, _, _ = read(mattermost_export(town(edit=True)))
    assert before[ROOT].version != after[ROOT].version and before[ROOT].parts == after[ROOT].parts
    assert "sam (edited): Shipped on Monday" in after[ROOT].document.text
    other = f"acme:town-square/{ms(D1, 120)}@sam"
    assert before[other].version == after[other].version


def test_a_later_line_of_the_same_post_is_the_one_read():
    old = post("town-square", "dana", "draft", ms(D1))
    new = post("town-square", "dana", "final", ms(D1), edit_at=ms(D1, 30))
    for lines in ([old, new], [new, old]):  # the later edit wins, wherever its line is
        versions, letters, source, _ = read(mattermost_export(lines))
        assert not letters and list(versions) == [ROOT]
        assert versions[ROOT].document.text.endswith("Dana Lee (edited): final")
        assert source.counts["repeated"] == 1


def test_a_deleted_reply_shrinks_the_parts_and_a_deleted_root_keeps_its_replies():
    before, _, _, _ = read(mattermost_export(town()))
    after, letters, source, _ = read(mattermost_export(town(delete_reply=True)))
    assert not letters and before[ROOT].parts - after[ROOT].parts == {f"{ms(D1, 60)}@lee"}
    assert "Agreed" not in after[ROOT].document.text and source.counts["deleted"] == 1
    root_gone = [post("town-square", "dana", "oops", ms(D1), delete_at=ms(D1, 9),
                      replies=[reply("lee", "still here", ms(D1, 5))])]
    versions, _, _, _ = read(mattermost_export(root_gone))
    assert versions[ROOT].parts == {f"{ms(D1, 5)}@lee"} and versions[ROOT].document.author == "Lee P"
    assert "oops" not in versions[ROOT].document.text


def test_a_thread_with_every_message_deleted_is_removed():
    lines = [post("town-square", "dana", "gone", ms(D1), delete_at=ms(D1, 9),
                  replies=[reply("lee", "also gone", ms(D1, 5), delete_at=ms(D1, 9))])]
    _, letters, _, found = read(mattermost_export(lines))
    assert not letters and found == [Removed(ROOT, "every message deleted in mattermost")]


def test_private_channels_and_direct_messages_are_read_by_their_members():
    lines = [post("secret-plans", "dana", "Budget cut is 20 percent", ms(D1)),
             direct(["sam", "dana"], "sam", "between us", ms(D1, 3)),
             direct(["dana", "lee", "sam"], "lee", "group chat", ms(D1, 4))]
    versions, letters, _, _ = read(mattermost_export(lines))
    assert not letters
    secret = versions[f"acme:secret-plans/{ms(D1)}@dana"]
    assert secret.private and secret.readers == ("dana", "lee") and secret.group == "acme:secret-plans"
    dm = versions[f"direct:dana,sam/{ms(D1, 3)}@sam"]
    assert dm.private and dm.readers == ("dana", "sam") and dm.document.thread == "direct:dana,sam"
    assert "channel:direct: Dana Lee, sam" in dm.document.tags
    assert versions[f"direct:dana,lee,sam/{ms(D1, 4)}@lee"].readers == ("dana", "lee", "sam")


def test_a_channel_declared_open_and_then_private_stays_private():
    channels = [{"team": "acme", "name": "town-square", "type": "O"},
                {"team": "acme", "name": "town-square", "type": "P"},
                {"team": "acme", "name": "secret-plans", "type": "X"}]  # an unknown type: private
    versions, _, _, _ = read(mattermost_export(town()[:1] + [post("secret-plans", "lee", "hm", ms(D1))],
                                               channels=channels))
    assert versions[ROOT].private and versions[ROOT].readers == ("dana", "lee", "sam")
    assert versions[f"acme:secret-plans/{ms(D1)}@lee"].private


def test_a_user_no_line_names_grants_nobody_through_the_access_map():
    lines = [direct(["dana", "ghost"], "ghost", "who am I? ask @nobody-here", ms(D1))]
    versions, letters, source, _ = read(mattermost_export(lines))
    assert not letters
    (dm,) = versions.values()
    assert dm.document.author == "ghost" and dm.readers == ("dana", "ghost")
    assert not [t for t in dm.document.tags if t.startswith("mention:")]  # @nobody-here names no one
    assert source.counts["unknown_users"] == 1 and source.counts["unknown_mentions"] == 1
    access = AccessMap.from_dict({"users": {"dana": "dana@example.com"}})
    assert access.acl("mattermost", dm.readers, dm.private, [], dm.group) == [
        "user:dana@example.com", "user:~mattermost:ghost"]
    assert access.unmapped == {"ghost": 1}


def test_a_post_to_an_undeclared_channel_is_not_read():
    lines = town() + [post("mystery", "dana", "who can see this?", ms(D1)),
                      post("mystery", "dana", "or this?", ms(D1, 1)), post("x", "dana", "?", ms(D1), team="other")]
    versions, letters, _, _ = read(mattermost_export(lines))
    assert len(versions) == 2 and all(not v.item.startswith(("acme:mystery", "other:")) for v in versions.values())
    assert [(d.path, d.reason.split(":")[0]) for d in letters] == [
        ("export#acme:mystery", "2 posts to a channel no channel line declares"),
        ("export#other:x", "1 posts to a channel no channel line declares")]


def test_attached_files_and_message_attachments_are_text():
    lines = [post("town-square", "dana", "", ms(D1), files=["q3-plan.pdf", "../../etc/notes.txt"]),
             {"type": "post", "post": {"team": "acme", "channel": "town-square", "user": "lee", "create_at": ms(D1, 9),
                                       "message": "", "props": {"attachments": [
                                           {"pretext": "Build", "title": "Build 42 failed", "text": "3 tests"},
                                           {"fallback": "Deploy done"}, "junk"]}}}]
    versions, letters, _, _ = read(mattermost_export(lines))
    assert not letters
    assert versions[ROOT].document.text.endswith("Dana Lee: [attached: q3-plan.pdf; notes.txt]")
    bot = versions[f"acme:town-square/{ms(D1, 9)}@lee"].document.text
    assert bot == "[2024-01-02 10:00] Lee P: Build\nBuild 42 failed\n3 tests\nDeploy done"


def test_malformed_lines_are_one_dead_letter_each_and_the_rest_goes_in():
    bad_reply = post("town-square", "dana", "root", ms(D2), replies=[{"user": "lee"}, reply("sam", "fine", ms(D2, 1))])
    lines = [b'{"type": "post", "post": {"team": "acme"', b"[1, 2]", b'{"no": "type"}', b"\xff\xfe garbage",
             b"[" * 100_000 + b"]" * 100_000, post("town-square", "dana", "no time", 0),
             post("town-square", "dana", "bool time", True), post("town-square", "dana", "far", 253402300799000),
             post("town-square", "../etc", "traversal", ms(D1)), post("a/b", "dana", "slash", ms(D1)),
             {"type": "post", "post": "not an object"}, *town(), bad_reply]
    versions, letters, _, _ = read(mattermost_export(lines))
    assert len(letters) == 12
    assert [d.path for d in letters[:11]] == [f"export/import.jsonl:{n}" for n in range(8, 19)]
    assert "not JSON" in letters[0].reason and "expected an object with a 'type'" in letters[1].reason
    assert "outside the accepted dates" in letters[7].reason and "not a Mattermost name" in letters[8].reason
    assert letters[11].path == "export/import.jsonl:21 replies[0]" and "create_at" in letters[11].reason
    assert len(versions) == 3 and len(versions[ROOT].parts) == 3
    assert versions[f"acme:town-square/{ms(D2)}@dana"].parts == {f"{ms(D2)}@dana", f"{ms(D2, 1)}@sam"}


def test_many_bad_lines_in_one_file_are_summed():
    versions, letters, _, _ = read(mattermost_export([b"{bad"] * 500))
    assert not versions and len(letters) == 21 and letters[-1].reason == "480 more not read"


def test_system_notices_and_empty_posts_are_left_out():
    lines = [post("town-square", "dana", "dana joined the channel", ms(D1), type="system_join_channel"),
             post("town-square", "lee", "   ", ms(D1, 1))]
    versions, letters, source, _ = read(mattermost_export(lines))
    assert not versions and not letters and source.counts["notices"] == 1 and source.counts["empty"] == 1


def test_a_jsonl_over_the_cap_is_a_dead_letter():
    class Capped(MemoryTree):
        def read(self, name, limit=0):
            return super().read(name, limit=100)
    found = list(MattermostSource().read(Capped(mattermost_export(town()), label="export"), {}))
    assert [type(f).__name__ for f in found] == ["DeadLetter"] and "over 100 bytes" in found[0].reason


def test_a_zip_with_a_top_folder_reads_like_the_folder(tmp_path):
    path = write_zip(mattermost_export(town(), prefix="export-2024/"), tmp_path / "export.zip")
    with zipfile.ZipFile(path) as archive:
        found = list(MattermostSource().read(ZipTree(archive, label=str(path)), {}))
    flat, _, _, _ = read(mattermost_export(town()))
    assert {source_id_of(v) for v in found} == {source_id_of(v) for v in flat.values()}


@pytest.fixture
def run(tmp_path):
    export, data = tmp_path / "export", tmp_path / "data"
    sunk: list = []

    def go(lines):
        write_folder(mattermost_export(lines), export)
        state = ConnectorState(data, "mattermost", tenant="default")
        return run_source(MattermostSource(), [export], sunk.extend, state, guard=PathGuard([tmp_path]),
                          access=AccessMap())
    return go, sunk


def test_through_the_runner_a_rerun_adds_nothing_an_edit_supersedes_a_deletion_removes(run):
    go, sunk = run
    first = go(town())
    assert first.documents == 2 and not first.dead_letters
    assert go(town()).documents == 0  # a rerun adds nothing
    edited = go(town(edit=True))
    old_sid = next(d.source_id for d in sunk[:2] if d.source_id.startswith(ROOT))
    assert edited.documents == 1 and [s["source_id"] for s in edited.superseded] == [old_sid]
    deleted = go(town(edit=True, delete_reply=True))
    assert deleted.documents == 1
    # Every version that still held the deleted reply goes, the first one too.
    assert {r["source_id"] for r in deleted.removed} == {old_sid, sunk[2].source_id}
    gone = go(town()[1:])  # the thread is no longer in the export (its channel was read)
    assert [r["source_id"] for r in gone.removed] == [sunk[3].source_id]
    zipped = go([])  # an export without that channel's posts removes nothing of it
    assert zipped.removed == [] and zipped.documents == 0


def test_a_partial_export_lacking_a_reply_removes_nothing(tmp_path):
    data, export, sunk = tmp_path / "data", tmp_path / "export", []

    def go(lines, partial):
        write_folder(mattermost_export(lines), export)
        state = ConnectorState(data, "mattermost", tenant="default")
        return run_source(MattermostSource(), [export], sunk.extend, state, guard=PathGuard([tmp_path]),
                          access=AccessMap(), options={"absence": not partial})

    assert go(town(), partial=False).documents == 2
    first_sid = next(d.source_id for d in sunk if d.source_id.startswith(ROOT))
    # The later export holds the thread without one reply, and the run is told it is partial.
    partial = go(town(delete_reply=True), partial=True)
    assert partial.removed == [] and partial.documents == 1
    assert [s["source_id"] for s in partial.superseded] == [first_sid]
    assert any("partial run removes nothing" in note for note in partial.notes)
    # The same loss in a full run is a deletion: every version holding the reply goes.
    full = go(town(delete_reply=True, edit=True), partial=False)
    assert first_sid in {r["source_id"] for r in full.removed}


def test_users_listing_channels_of_other_teams_do_not_widen_readers():
    users = [user("dana", channels=("secret-plans",)), {"username": "eve", "teams": [
        {"name": "other", "channels": [{"name": "secret-plans"}]}, "junk", {"name": 5}]}]
    versions, letters, _, _ = read(mattermost_export([post("secret-plans", "dana", "x", ms(D1))], users=users))
    assert not letters and versions[f"acme:secret-plans/{ms(D1)}@dana"].readers == ("dana",)


def test_a_direct_channel_of_too_many_or_no_members_is_a_dead_letter():
    lines = [direct([f"user{i}" for i in range(9)], "user0", "too many", ms(D1)), direct([], "dana", "none", ms(D1)),
             direct("dana,lee", "dana", "not a list", ms(D1)), direct(["dana", "../x"], "dana", "bad name", ms(D1)),
             direct(["dana", "lee"], "dana", "fine", ms(D1))]
    versions, letters, _, _ = read(mattermost_export(lines))
    assert len(letters) == 4 and "1 to 8 usernames" in letters[0].reason and "not a Mattermost name" in letters[3].reason
    assert list(versions) == [f"direct:dana,lee/{ms(D1)}@dana"]


def test_a_line_over_the_cap_is_a_dead_letter_and_the_next_line_reads():
    huge = post("town-square", "dana", "x" * (4 * 1024 * 1024), ms(D2))
    versions, letters, _, _ = read(mattermost_export([huge, *town()]))
    assert len(letters) == 1 and letters[0].path == "export/import.jsonl:8" and "over 4194304" in letters[0].reason
    assert set(versions) == {ROOT, f"acme:town-square/{ms(D1, 120)}@sam"}

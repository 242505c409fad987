"""A Microsoft Teams export (Graph JSON, a folder) end to end on a real data folder, through
`orgmem connect teams`: private channels and chats readable by their members only (the access
map), a rerun adds nothing, an edit is a new version that supersedes the old one, a deleted reply
is erased (its marker is in no file)."""

from __future__ import annotations

import json
import uuid

from services.bootstrap import open_memory
from services.connectors.sources.teams import TeamsSource
from services.settings import Settings
from tests.integration.test_erasure import _grep
from tests.unit.connectors.sources.chat_cli import connect, row_ids
from tests.unit.connectors.sources.chat_fixtures import write_folder
from tests.unit.connectors.sources.teams_fixtures import DANA, LEE, SAM, file_attachment, msg, teams_export

SECRET = "zqx" + uuid.uuid4().hex[:10] + "9"  # unique to this run: the deleted reply's marker
DAY = "2024-03-04"


def _export(*, edited: bool = False, deleted: bool = False) -> dict[str, bytes]:
    general = [msg("1", DANA, "<p>Launch moves to Friday" + (" after the review" if edited else "") + "</p>", DAY,
                   edited=50 if edited else None),
               msg("2", LEE, "Noted, I will tell the customer", DAY, 10, reply_to="1",
                   attachments=[file_attachment("launch-plan.pdf")])]
    secret = [msg("5", DANA, "Budget cut is 20 percent", DAY, 20),
              msg("6", LEE, f"Keep <b>{SECRET}</b> quiet until the board meets", DAY, 30, reply_to="5",
                  deleted=deleted)]
    return teams_export({("acme", "general"): {"membershipType": "standard", "pages": [general]},
                         ("acme", "secret"): {"membershipType": "private", "members": [DANA, LEE], "pages": [secret]}},
                        {"c1": {"members": [DANA, SAM], "pages": [[msg("9", SAM, "Lunch?", DAY, 40)]]}})


def test_a_teams_export_keeps_permissions_versions_and_deletions(tmp_path):
    data, export = tmp_path / "data", tmp_path / "export"
    access = tmp_path / "access.json"
    access.write_text(json.dumps({"users": {DANA: "dana@example.com"}}))  # lee and sam: mapped by nobody

    first = _export()
    write_folder(first, export)
    report = connect("teams", data, export, access)
    assert report["documents"] == 3 and report["dead_letters"] == 0
    assert report["unmapped"] == 2  # lee (the private channel), sam (the chat)
    assert connect("teams", data, export, access)["documents"] == 0  # a rerun adds nothing

    before = row_ids(TeamsSource(), first)
    edited = _export(edited=True)
    write_folder(edited, export)
    report = connect("teams", data, export, access)
    assert report["documents"] == 1 and report["superseded"] == 1
    after = row_ids(TeamsSource(), edited)

    deleted = _export(edited=True, deleted=True)
    write_folder(deleted, export)
    report = connect("teams", data, export, access)
    assert report["removed"] == 1 and report["documents"] == 1
    gone = row_ids(TeamsSource(), deleted)

    with open_memory(Settings(data_dir=data), role="indexer") as memory:
        memory.catch_up()
        general, private, chat = "teams:acme:general/1", "teams:acme:secret/5", "chats:c1/2024-03-04"
        assert memory.stored_row(before[general]).superseded_by == after[general]
        assert "[attached: launch-plan.pdf]" in memory.stored_row(after[general]).text
        assert memory.stored_row(after[general]).acl == []  # a standard channel of a public team
        kept = memory.stored_row(gone[private])
        # The private channel: its members only; lee unmapped grants nobody, never the whole tenant.
        assert kept.acl == ["user:dana@example.com", f"user:~teams:{LEE}"]
        assert SECRET not in kept.text
        assert memory.stored_row(before[private]) is None  # the version holding the reply: erased
        assert memory.stored_row(gone[chat]).acl == ["user:dana@example.com", f"user:~teams:{SAM}"]
    assert _grep(data, [SECRET]) == []

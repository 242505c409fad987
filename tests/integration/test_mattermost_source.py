"""A Mattermost bulk export (.zip) end to end on a real data folder, through `orgmem connect
mattermost`: private channels and direct messages readable by their members only (the access
map), a rerun adds nothing, an edit is a new version that supersedes the old one, a deleted reply
is erased (its marker is in no file)."""

from __future__ import annotations

import json
import uuid

from services.bootstrap import open_memory
from services.connectors.sources.mattermost import MattermostSource
from services.settings import Settings
from tests.integration.test_erasure import _grep
from tests.unit.connectors.sources.chat_cli import connect, row_ids
from tests.unit.connectors.sources.chat_fixtures import write_zip
from tests.unit.connectors.sources.mattermost_fixtures import direct, mattermost_export, ms, post, reply

SECRET = "zqx" + uuid.uuid4().hex[:10] + "8"  # unique to this run: the deleted reply's marker
DAY = "2024-03-04"


def _export(*, edited: bool = False, deleted: bool = False) -> dict[str, bytes]:
    town = post("town-square", "dana", "Launch moves to Friday" + (" after the review" if edited else ""), ms(DAY),
                edit_at=ms(DAY, 50) if edited else None,
                replies=[reply("lee", "Noted, I will tell the customer", ms(DAY, 10), files=["launch-plan.pdf"])])
    secret = post("secret-plans", "dana", "Budget cut is 20 percent", ms(DAY, 20), replies=[
        reply("lee", f"Keep {SECRET} quiet until the board meets", ms(DAY, 30),
              delete_at=ms(DAY, 90) if deleted else None)])
    return mattermost_export([town, secret, direct(["dana", "sam"], "sam", "Lunch?", ms(DAY, 40))])


def test_a_mattermost_export_keeps_permissions_versions_and_deletions(tmp_path):
    data, export = tmp_path / "data", tmp_path / "export.zip"
    access = tmp_path / "access.json"
    access.write_text(json.dumps({"users": {"dana": "dana@example.com"}}))  # lee and sam: mapped by nobody

    first = _export()
    write_zip(first, export)
    report = connect("mattermost", data, export, access)
    assert report["documents"] == 3 and report["dead_letters"] == 0
    assert report["unmapped"] == 2  # lee (the private channel), sam (the direct message)
    assert connect("mattermost", data, export, access)["documents"] == 0  # a rerun adds nothing

    before = row_ids(MattermostSource(), first)
    edited = _export(edited=True)
    write_zip(edited, export)
    report = connect("mattermost", data, export, access)
    assert report["documents"] == 1 and report["superseded"] == 1
    after = row_ids(MattermostSource(), edited)

    deleted = _export(edited=True, deleted=True)
    write_zip(deleted, export)
    report = connect("mattermost", data, export, access)
    assert report["removed"] == 1 and report["documents"] == 1
    gone = row_ids(MattermostSource(), deleted)

    with open_memory(Settings(data_dir=data), role="indexer") as memory:
        memory.catch_up()
        town = next(i for i in before if i.startswith("acme:town-square/"))
        private = next(i for i in before if i.startswith("acme:secret-plans/"))
        dm = next(i for i in before if i.startswith("direct:"))
        assert memory.stored_row(before[town]).superseded_by == after[town]
        assert "[attached: launch-plan.pdf]" in memory.stored_row(after[town]).text
        assert memory.stored_row(after[town]).acl == []  # an open channel: the tenant's
        kept = memory.stored_row(gone[private])
        # The private channel: its members only; lee unmapped grants nobody, never the whole tenant.
        assert kept.acl == ["user:dana@example.com", "user:~mattermost:lee"]
        assert SECRET not in kept.text
        assert memory.stored_row(before[private]) is None  # the version holding the reply: erased
        assert memory.stored_row(gone[dm]).acl == ["user:dana@example.com", "user:~mattermost:sam"]
    assert _grep(data, [SECRET]) == []

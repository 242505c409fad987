"""The connector route under attack, over real HTTP (issue 16, findings 1, 3 and 5).

A writer drops links into its own inbox that lead to the server's keys.sqlite and to a file
outside the connector roots, names them in the request, tries another tenant's inbox, and feeds a
meeting dated 9999-12-31T23:00:00-05:00. The server reads none of it, says so in the report (or
refuses the request with 400), answers every run with its report, never a 500; and an item whose
source id the tenant already holds is listed as already known.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.documents import DocumentIn
from services.core.caller import Caller
from tests.conftest import create_key

pytestmark = pytest.mark.slow

SECRET = "ZEBRA-SECRET-7731"


def mail(msg_id: str, body: str = "Hello team.") -> bytes:
    return (f"Message-ID: <{msg_id}>\nDate: Tue, 14 Nov 2000 08:22:00 -0800\nFrom: a@corp.example\n"
            f"To: b@corp.example\nSubject: s {msg_id}\n\n{body}\n").encode()


def logged_documents(memory) -> list[DocumentIn]:
    return [e.event.document for e in memory.event_log.read(0, 100_000) if hasattr(e.event, "document")]


@pytest.fixture
def inbox(settings) -> Path:
    """The default tenant's own inbox, `<data_dir>/inbox/default` (the default connector root)."""
    folder = Path(settings.data_dir) / "inbox" / "default"
    folder.mkdir(parents=True)
    return folder


def test_links_to_the_key_store_and_out_of_the_roots_are_not_read(live_server, memory, settings, inbox, tmp_path):
    keys = Path(settings.data_dir) / "keys.sqlite"
    assert keys.is_file()  # the server's key store, next to the log
    outside = tmp_path / "elsewhere"
    (outside / "box").mkdir(parents=True)
    (outside / "secret.eml").write_bytes(mail("outside@x", SECRET))
    (outside / "box" / "1700000000.1.host").write_bytes(mail("outside-box@x", SECRET))
    (inbox / "ok.eml").write_bytes(mail("ok@x"))
    (inbox / "keys.eml").symlink_to(keys)
    (inbox / "outside.eml").symlink_to(outside / "secret.eml")
    (inbox / "Maildir" / "new").mkdir(parents=True)
    (inbox / "Maildir" / "cur").symlink_to(outside / "box", target_is_directory=True)

    answer = live_server.client.post("/v1/connectors/email", json={"paths": [str(inbox)]})
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["documents"] == 1 and report["stopped"] is None
    refused = {Path(d["path"]).name: d["reason"] for d in report["dead_letters"]}
    assert set(refused) == {"keys.eml", "outside.eml", "cur"}
    assert all("outside the connector roots" in reason for reason in refused.values())
    docs = logged_documents(memory)
    assert [d.source_id for d in docs] == ["ok@x"]
    assert not any(SECRET in d.text or "SQLite format" in d.text for d in docs)

    # Named in the request, a link is judged by where it leads; the data folder is never a root.
    for path in (inbox / "keys.eml", inbox / "outside.eml", keys, settings.data_dir):
        answer = live_server.client.post("/v1/connectors/email", json={"paths": [str(path)]})
        assert answer.status_code == 400, answer.text
        assert "outside the connector roots" in answer.json()["detail"] and str(path) in answer.json()["detail"]
    assert len(logged_documents(memory)) == 1


def test_a_writer_of_another_tenant_cannot_read_this_tenants_inbox(live_server, memory, settings, inbox):
    (inbox / "mine.eml").write_bytes(mail("mine@x", SECRET))
    other = create_key(settings.data_dir, role="writer", tenant="globex", principal="mallory")
    answer = live_server.client.post("/v1/connectors/email", json={"paths": [str(inbox)]},
                                     headers={"Authorization": f"Bearer {other}"})
    assert answer.status_code == 400 and "outside the connector roots" in answer.json()["detail"]
    assert logged_documents(memory) == []


def test_a_far_future_meeting_is_a_dead_letter_and_the_folder_still_goes_in(live_server, memory, inbox):
    meetings = inbox / "meetings"
    meetings.mkdir()
    for name, date in (("a-bad", "9999-12-31T23:00:00-05:00"), ("b-good", "2025-03-04")):
        (meetings / f"{name}.vtt").write_text(
            f"WEBVTT\n\nNOTE date: {date}\n\n00:00:01.000 --> 00:00:02.000\n<v Ann>Budget is {name}.</v>\n")
    (meetings / "notes.txt").write_text(f"user: admin\npassword: {SECRET}\n")  # no transcripts asked for
    tickets = inbox / "tickets.json"
    tickets.write_text(json.dumps([
        {"key": "A-1", "fields": {"summary": "s", "created": "9999-12-31T23:00:00-05:00"}},
        {"key": "A-2", "fields": {"summary": "s", "created": "2024-01-01T00:00:00+00:00"}}]))
    for kind, path in (("meetings", meetings), ("tickets", tickets)):
        answer = live_server.client.post(f"/v1/connectors/{kind}", json={"paths": [str(path)]})
        assert answer.status_code == 200, answer.text
        report = answer.json()
        assert report["stopped"] is None and report["documents"] == 1
        [letter] = report["dead_letters"]
        assert "outside the accepted dates (years 1000 to 9000)" in letter["reason"]
        # The retry is not blocked by the bad item: the files are done, nothing is read twice.
        again = live_server.client.post(f"/v1/connectors/{kind}", json={"paths": [str(path)]})
        assert again.status_code == 200 and again.json()["documents"] == 0 and again.json()["unchanged"] >= 1
    assert sorted(d.source_id for d in logged_documents(memory)) == ["A-2", "b-good"]


def test_an_item_whose_source_id_was_taken_first_is_listed_as_already_known(live_server, memory, inbox):
    # The squat as it was possible before API sources got their own namespace: a document written
    # straight to the log with the Message-ID of a message that has not arrived yet.
    [squatted] = memory.ingest([DocumentIn(text="planted", author="mallory@corp.example", source="email",
                                           source_id="future@x")], Caller(tenant="default")).row_ids
    (inbox / "future.eml").write_bytes(mail("future@x"))
    (inbox / "fresh.eml").write_bytes(mail("fresh@x"))
    answer = live_server.client.post("/v1/connectors/email", json={"paths": [str(inbox)]})
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["documents"] == 2 and report["already_known"] == 1
    assert report["known_items"] == [{"source": "email", "source_id": "future@x", "row_id": squatted}]

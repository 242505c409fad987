"""Source-id squatting over real HTTP (issue 16, finding 3).

A writer knows the Message-ID of a mail it received (every recipient sees it) and posts a document
with that source and source id before the connector imports the mailbox. Were it stored, the
genuine mail would become a `duplicate_source` skip that even an unrestricted admin could not find.
The API refuses any source a connector writes, so the genuine item is the one that is stored.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from services.core.write_rules import CONNECTOR_SOURCES, is_connector_source

pytestmark = pytest.mark.slow

MESSAGE_ID = "budget-final-2025@corp.example"
GENUINE = "The final budget is 4.2M; approved by the board on 3 March."


def test_a_writer_cannot_claim_a_future_mail_before_the_connector_imports_it(live_server, settings):
    client = live_server.client
    for source in ("email", " Email ", "meeting", "jira", "github", "csv:tickets", "slack", "Teams", "documents"):
        squat = {"text": "The final budget is 1M.", "author": "mallory@corp.example", "source": source,
                 "source_id": f"<{MESSAGE_ID}>" if "mail" in source.lower() else "OPS-1"}
        answer = client.post("/v1/documents", json={"documents": [squat]})
        assert answer.status_code == 400, (source, answer.text)
        assert "reserved for orgmem's connectors" in answer.json()["detail"]
    # Any other source name is the writer's own namespace.
    own = client.post("/v1/documents", json={"documents": [
        {"text": "Notes of the budget call.", "source": "notes-app", "source_id": "n1"}]})
    assert own.status_code == 200, own.text

    inbox = Path(settings.data_dir) / "inbox" / "default"
    inbox.mkdir(parents=True, exist_ok=True)
    (inbox / "budget.eml").write_bytes((
        f"Message-ID: <{MESSAGE_ID}>\nDate: Mon, 03 Mar 2025 09:00:00 +0000\nFrom: cfo@corp.example\n"
        f"To: all@corp.example\nSubject: Final budget\n\n{GENUINE}\n").encode())
    report = client.post("/v1/connectors/email", json={"paths": [str(inbox)]})
    assert report.status_code == 200, report.text
    assert report.json()["documents"] == 1
    found = client.post("/v1/query", json={"q": "final budget approved by the board", "k": 5,
                                           "after": report.json()["log_position"]})
    assert found.status_code == 200, found.text
    assert any(row["text"].strip().endswith(GENUINE) for row in found.json()["rows"])


def test_every_connector_source_is_reserved():
    from services.connectors import email, meetings
    from services.connectors.tickets import common

    assert is_connector_source(email.SOURCE) and is_connector_source("meeting")
    assert {"jira", "github"} <= CONNECTOR_SOURCES and is_connector_source("csv:export")
    assert common.CONNECTOR and meetings.CONNECTOR  # the connectors themselves exist under these modules
    assert not is_connector_source("notes-app") and not is_connector_source(None)


def test_every_contract_source_is_reserved():
    # A Slack thread's source id is "<channel>/<ts>", visible to every member: a writer who posts it
    # first would turn the genuine thread into a duplicate skip. Each registered source is reserved.
    from services.connectors.sources import SOURCES

    assert SOURCES and all(is_connector_source(name) for name in SOURCES)
    assert all(is_connector_source(f" {name.upper()} ") for name in SOURCES)

"""The IMAP connector against a real, private Dovecot server (skipped where Dovecot is absent)."""

from __future__ import annotations

import json
import logging
from email.message import EmailMessage

import pytest

from services.connectors.base import ConnectorState
from services.connectors.imap import ImapSettings, run_imap
from services.connectors.mail_files import run_email
from services.errors import BackendUnavailable, ImapError
from tests.integration.dovecot import DovecotServer, dovecot_binary
from tests.sinks import Collector

pytestmark = pytest.mark.skipif(
    dovecot_binary() is None, reason="dovecot is not installed (apt-get install dovecot-imapd)"
)




def mail(n: int, *, date: str | None = "Mon, 02 Jan 2023 09:00:00 +0000", html: bool = False) -> bytes:
    msg = EmailMessage()
    msg["Message-ID"] = f"<msg-{n}@orgmem.test>"
    msg["From"] = f"Sender {n} <Sender{n}@Orgmem.Test>"
    msg["To"] = "alice@orgmem.test"
    msg["Subject"] = f"Status {n}"
    if date:
        msg["Date"] = date
    if html:
        msg.set_content(f"<p>Report <b>{n}</b></p>", subtype="html")
    else:
        msg.set_content(f"Body of message {n}.")
    return msg.as_bytes().replace(b"\n", b"\r\n")


@pytest.fixture
def server():
    with DovecotServer() as running:
        yield running


def settings_for(server: DovecotServer, password: str | None = None) -> ImapSettings:
    return ImapSettings(host=server.host, port=server.port, username=server.user,
                        password=password or server.password, ssl=False, starttls=False, timeout_s=10)


def test_incremental_by_uid(server, tmp_path):
    server.append("INBOX", mail(1), mail(2), mail(3, date=None))
    settings = settings_for(server)

    first = Collector()
    report = run_imap(settings, first, ConnectorState(tmp_path, "imap"))
    assert sorted(d.source_id for d in first.docs) == ["msg-1@orgmem.test", "msg-2@orgmem.test", "msg-3@orgmem.test"]
    assert {d.author for d in first.docs} == {"sender1@orgmem.test", "sender2@orgmem.test", "sender3@orgmem.test"}
    assert report.documents == 3 and report.undated == 1 and report.dead_letters == []

    server.append("INBOX", mail(4), mail(5, html=True))
    second = Collector()
    report = run_imap(settings, second, ConnectorState(tmp_path, "imap"))
    assert [d.source_id for d in second.docs] == ["msg-4@orgmem.test", "msg-5@orgmem.test"]
    assert "Report 5" in second.docs[1].text and "<b>" not in second.docs[1].text
    assert report.documents == 2

    third = Collector()
    report = run_imap(settings, third, ConnectorState(tmp_path, "imap"))
    assert third.docs == [] and report.documents == 0 and report.unchanged == 1

    cursor = json.loads((tmp_path / "connectors" / "imap.cursor.json").read_text())
    [(key, value)] = cursor["mailboxes"].items()
    assert key == f"{server.user}@{server.host}:{server.port}/INBOX"
    assert value == {"uidvalidity": server.uidvalidity("INBOX"), "last_uid": 5}


def test_changed_uidvalidity_reads_the_mailbox_again(server, tmp_path):
    server.create("Projects")
    server.append("Projects", mail(10), mail(11))
    server.append("INBOX", mail(1))
    settings = settings_for(server)
    boxes = ("INBOX", "Projects")

    first = Collector()
    run_imap(settings, first, ConnectorState(tmp_path, "imap"), mailboxes=boxes)
    assert len(first.docs) == 3
    before = server.uidvalidity("Projects")

    # Re-creating the mailbox renumbers it: a new UIDVALIDITY, UIDs from 1 again.
    server.delete("Projects")
    server.create("Projects")
    server.append("Projects", mail(11), mail(12))
    assert server.uidvalidity("Projects") != before

    second = Collector()
    report = run_imap(settings, second, ConnectorState(tmp_path, "imap"), mailboxes=boxes)
    # Every message of the renumbered mailbox goes again (msg-11 is deduplicated downstream by
    # its source_id); INBOX is untouched.
    assert sorted(d.source_id for d in second.docs) == ["msg-11@orgmem.test", "msg-12@orgmem.test"]
    assert any("UIDVALIDITY changed" in w for w in report.warnings)
    assert report.unchanged == 1

    third = Collector()
    assert run_imap(settings, third, ConnectorState(tmp_path, "imap"), mailboxes=boxes).documents == 0


def test_missing_mailbox_is_a_dead_letter_and_the_others_go_in(server, tmp_path):
    server.append("INBOX", mail(1))
    sink = Collector()
    report = run_imap(settings_for(server), sink, ConnectorState(tmp_path, "imap"), mailboxes=("Nope", "INBOX"))
    assert [d.source_id for d in sink.docs] == ["msg-1@orgmem.test"]
    [letter] = report.dead_letters
    assert letter.path.endswith("/Nope") and "SELECT Nope" in letter.reason


def test_the_password_never_shows(server, tmp_path, caplog):
    settings = settings_for(server)
    secret = server.password
    assert secret not in repr(settings) and secret not in str(settings)
    assert secret not in settings.model_dump_json()

    wrong = "Wrong-" + secret
    server.append("INBOX", mail(1))
    with caplog.at_level(logging.DEBUG):
        assert run_imap(settings, Collector(), ConnectorState(tmp_path, "imap")).documents == 1
        # Last: Dovecot slows every login from an address after a failed one.
        with pytest.raises(ImapError) as refused:
            run_imap(settings_for(server, wrong), Collector(), ConnectorState(tmp_path, "imap"))
    assert "login" in str(refused.value) and server.user in str(refused.value)
    assert wrong not in str(refused.value) and refused.value.__cause__ is None
    assert secret not in caplog.text and "imap" in caplog.text
    assert secret not in (tmp_path / "connectors" / "imap.cursor.json").read_text()


def test_unreachable_server_is_backend_unavailable(server, tmp_path):
    settings = settings_for(server)
    server.stop()
    with pytest.raises(BackendUnavailable, match="imap unavailable"):
        run_imap(settings, Collector(), ConnectorState(tmp_path, "imap"))


def test_the_file_connector_reads_dovecots_maildir(server, tmp_path):
    server.append("INBOX", mail(1), mail(2))
    server.create("Archive")
    server.append("Archive", mail(3))
    sink = Collector()
    report = run_email([server.root / "mail" / server.user], sink, ConnectorState(tmp_path, "email"))
    assert sorted(d.source_id for d in sink.docs) == ["msg-1@orgmem.test", "msg-2@orgmem.test", "msg-3@orgmem.test"]
    assert report.dead_letters == []

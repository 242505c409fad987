"""Email connector: parsing of real-world (often malformed) messages and file-based runs."""

from __future__ import annotations

from datetime import UTC, datetime
from email.message import EmailMessage
from pathlib import Path

import time

import pytest

from services.connectors.base import ConnectorState, RunStopped, read_dead_letters
from services.connectors.email import html_to_text, normalise_subject, parse_email
from services.connectors.mail_files import run_email, split_mbox
from services.errors import EmailParseError
from tests.sinks import Collector


def message(
    *,
    msg_id="<m1@example.com>",
    subject="Budget for Q3",
    date="Tue, 14 Nov 2000 08:22:00 -0800",
    sender="Alice Smith <Alice.Smith@Example.COM>",
    body="Hello team.",
    extra="",
) -> bytes:
    head = [f"Message-ID: {msg_id}" if msg_id else "", f"Date: {date}" if date else "",
            f"From: {sender}" if sender else "", "To: bob@example.com, Carol <carol@example.com>",
            "Cc: dave@example.com", f"Subject: {subject}", extra]
    return ("\n".join(h for h in head if h) + "\n\n" + body + "\n").encode()


def test_plain_message_becomes_one_document():
    raw = message(extra="In-Reply-To: <parent@example.com>\nReferences: <root@example.com> <parent@example.com>")
    parsed = parse_email(raw)
    doc = parsed.document
    assert doc.source == "email" and doc.kind == "email"
    assert doc.source_id == "m1@example.com"
    assert doc.author == "alice.smith@example.com"
    assert doc.date == datetime(2000, 11, 14, 16, 22, tzinfo=UTC)
    assert doc.thread == "root@example.com"
    assert doc.title == "Budget for Q3"
    # The sender's From pair closes the list: the people directory joins name and address by it.
    assert doc.participants == ["bob@example.com", "carol@example.com", "dave@example.com",
                                "Alice Smith <alice.smith@example.com>"]
    assert doc.tags == ["subject:budget for q3"]
    assert doc.acl == []
    assert doc.text.startswith("From: Alice Smith <alice.smith@example.com>\nTo: bob@example.com, Carol <carol@example.com>")
    assert "Subject: Budget for Q3\n\nHello team." in doc.text
    assert parsed.warnings == ()


def test_thread_falls_back_to_in_reply_to_then_own_id_then_subject():
    assert parse_email(message(extra="In-Reply-To: <p@x>")).document.thread == "p@x"
    assert parse_email(message()).document.thread == "m1@example.com"
    no_ids = parse_email(message(msg_id=None, subject="RE: Fwd: [ops] Budget  for Q3")).document
    assert no_ids.thread == "subject:budget for q3"
    assert no_ids.tags == ["subject:budget for q3", "label:ops"]


@pytest.mark.parametrize("sender", ["alice@example.com", "<alice@example.com>",
                                    '"bob@evil.example" <alice@example.com>', '"Eve <x>" <alice@example.com>',
                                    '"alice@example.com" <alice@example.com>'])
def test_sender_named_form_only_from_a_plain_display_name(sender):
    # A display name that is itself an address, or holds angle brackets, could be read as
    # another person's address by the directory: only plain names are kept.
    doc = parse_email(message(sender=sender)).document
    assert doc.author == "alice@example.com"
    assert doc.participants == ["bob@example.com", "carol@example.com", "dave@example.com"]


def test_missing_message_id_uses_sha256_of_the_bytes():
    raw = message(msg_id=None)
    parsed = parse_email(raw)
    import hashlib

    assert parsed.document.source_id == "sha256:" + hashlib.sha256(raw).hexdigest()
    assert any(w.startswith("Message-ID: missing") for w in parsed.warnings)


def test_acl_from_participants_only_when_asked():
    raw = message(extra="Bcc: Eve <EVE@example.com>")
    assert parse_email(raw).document.acl == []
    acl = parse_email(raw, acl_from_participants=True).document.acl
    assert acl == ["alice.smith@example.com", "bob@example.com", "carol@example.com", "dave@example.com", "eve@example.com"]


def test_no_date_is_ingested_undated():
    parsed = parse_email(message(date=None))
    assert parsed.document.date is None and parsed.undated
    assert "Date: missing, ingested undated" in parsed.warnings


def test_malformed_headers_degrade_to_warnings():
    parsed = parse_email(message(date="sometime last week", sender=None,
                                 subject="=?utf-8?b?w5xiZXJzaWNodA==?= =?iso-8859-1?q?f=FCr_Q3?="))
    doc = parsed.document
    assert doc.date is None
    assert doc.title == "Übersichtfür Q3"  # adjacent encoded words join without the space between them
    assert doc.author == ""
    assert "From: missing" in parsed.warnings
    assert any("Date: unparseable value 'sometime last week'" in w for w in parsed.warnings)
    # 8-bit bytes straight in a header, and a From without an address
    raw = b"Message-ID: <x@y>\nFrom: Mailer Daemon\nSubject: caf\xe9 \xc3\xa0 la carte\n\nbody\n"
    parsed = parse_email(raw)
    assert parsed.document.author == "Mailer Daemon"
    assert any(w.startswith("From: no address") for w in parsed.warnings)
    assert "\ufffd" not in parsed.document.title


@pytest.mark.parametrize(
    ("charset", "payload", "expected"),
    [
        ("iso-8859-1", "Caf\xe9 cr\xe8me".encode("latin-1"), "Café crème"),
        ("windows-1252", "\u201cquoted\u201d \u20ac5".encode("cp1252"), "\u201cquoted\u201d \u20ac5"),
        ("koi8-r", "Привет".encode("koi8-r"), "Привет"),
        ("x-no-such-charset", "naïve".encode(), "naïve"),
        ("x-no-such-charset", "na\xefve".encode("latin-1"), "na\xefve"),
        ("us-ascii", "r\xe9sum\xe9".encode("cp1252"), "r\xe9sum\xe9"),
    ],
)
def test_charsets_are_decoded(charset, payload, expected):
    raw = message(body="").rstrip(b"\n")
    raw = raw.replace(b"Subject:", f"Content-Type: text/plain; charset={charset}\nSubject:".encode())
    raw += b"\n\n" + payload + b"\n"
    parsed = parse_email(raw)
    assert parsed.document.text.endswith("Subject: Budget for Q3\n\n" + expected)
    unknown = [w for w in parsed.warnings if "unknown charset" in w]
    assert bool(unknown) == charset.startswith("x-no-such")


def _mime(*, html_only=False) -> EmailMessage:
    msg = EmailMessage()
    msg["Message-ID"] = "<mime@example.com>"
    msg["From"] = "=?utf-8?q?J=C3=B6rg?= <joerg@example.com>"
    msg["To"] = "team@example.com"
    msg["Date"] = "Wed, 01 Mar 2023 10:00:00 +0100"
    msg["Subject"] = "Report"
    html = "<html><head><style>p{color:red}</style></head><body><p>Quarterly <b>numbers</b></p>" \
           "<script>alert(1)</script><ul><li>one</li><li>two</li></ul></body></html>"
    if html_only:
        msg.set_content(html, subtype="html")
        return msg
    msg.set_content("Plain version of the report.")
    msg.add_alternative(html, subtype="html")
    msg.add_attachment("id,total\n1,42\n", subtype="csv", filename="totals.csv")
    msg.add_attachment(b"%PDF-1.4 \x00\x01\x02 binary", maintype="application", subtype="pdf", filename="scan.pdf")
    return msg


def test_html_only_body_is_converted_to_text():
    doc = parse_email(_mime(html_only=True).as_bytes()).document
    assert "Quarterly numbers" in doc.text
    assert "one\ntwo" in doc.text
    assert "<" not in doc.text.split("\n\n", 1)[1]
    assert "alert" not in doc.text and "color" not in doc.text
    assert doc.text.startswith("From: Jörg <joerg@example.com>")
    assert doc.date == datetime(2023, 3, 1, 9, 0, tzinfo=UTC)


def test_multipart_prefers_plain_includes_text_attachments_names_binary_ones():
    doc = parse_email(_mime().as_bytes()).document
    assert "Plain version of the report." in doc.text
    assert "Quarterly" not in doc.text  # the HTML alternative of the same content is not repeated
    assert "--- attachment: totals.csv ---\nid,total\n1,42" in doc.text
    assert "[attachment: scan.pdf (application/pdf)]" in doc.text
    assert "PDF-1.4" not in doc.text


def test_encoded_word_attachment_names_are_decoded():
    raw = (
        b"Message-ID: <att@x>\nFrom: a@x\nContent-Type: multipart/mixed; boundary=b\n\n--b\n"
        b"Content-Type: text/plain\n\nSee attached.\n--b\nContent-Type: application/pdf\n"
        b'Content-Disposition: attachment; filename="=?utf-8?q?R=C3=A9sum=C3=A9.pdf?="\n'
        b"Content-Transfer-Encoding: base64\n\nJVBERi0=\n--b--\n"
    )
    parsed = parse_email(raw)
    assert parsed.document.text.endswith("See attached.\n\n[attachment: Résumé.pdf (application/pdf)]")
    assert parsed.warnings == ("Date: missing, ingested undated",)


def test_html_to_text_keeps_block_structure():
    assert html_to_text("<div>a<br>b</div><p>c &amp; d</p><table><tr><td>x</td><td>y</td></tr></table>") == "a\nb\nc & d\nx y"


def test_html_to_text_keeps_text_around_blocks_apart_and_drops_titles():
    assert html_to_text("<title>T</title>before<p>inside</p>after<th>h1</th><th>h2</th>") == "before\ninside\nafter h1 h2"


@pytest.mark.parametrize("body", [
    "<p>paragraph</p>" * 20_000,  # each tag edited in place made these seconds long (quadratic)
    "<table>" + "<tr><td>a</td><td>b</td></tr>" * 20_000 + "</table>",
    "<div>" * 8_000 + "deep" + "</div>" * 8_000,
])
def test_html_to_text_of_a_huge_or_deep_body_is_linear(body):
    started = time.perf_counter()
    text = html_to_text(body)
    took = time.perf_counter() - started
    assert text.count("\n") >= (0 if "deep" in body else 19_999) and ("deep" in text or "a b" in text or "paragraph" in text)
    assert took < 3.0, f"{took:.2f} s for {len(body):,} characters of HTML"


def test_normalise_subject():
    assert normalise_subject("Re: RE: Fw: [Jira] [ops] Outage") == ("Outage", ["jira", "ops"])
    assert normalise_subject("AW: Re[2]:   Status  update") == ("Status update", [])


def test_not_a_message_is_a_clear_error():
    with pytest.raises(EmailParseError, match="empty"):
        parse_email(b"  \n")
    with pytest.raises(EmailParseError, match="headers: none found"):
        parse_email(b"# Just a readme\n\nNothing here.\n")


def _mbox(*messages: bytes) -> bytes:
    return b"".join(b"From sender@example.com Thu Jan  1 00:00:00 2015\n" + m + b"\n" for m in messages)


def test_split_mbox_unescapes_from_lines():
    data = _mbox(message(msg_id="<a@x>", body=">From the start\nok"), message(msg_id="<b@x>"))
    split = split_mbox(data)
    assert len(split.messages) == 2 and split.broken_tail is None
    assert b"\nFrom the start\n" in split.messages[0]


@pytest.mark.parametrize(
    ("cut", "problem"),
    [
        (lambda data, third: data[: third + 120], "middle of a line"),
        (lambda data, third: data[: data.index(b"\n", third + 60) + 1], "headers cut off"),
        (lambda data, third: data[: data.rindex(b"--===", third) - 1], "closing MIME boundary missing"),
    ],
)
def test_truncated_mbox_keeps_complete_messages(tmp_path, cut, problem):
    third = _mime()
    third.replace_header("Message-ID", "<c@x>")
    data = _mbox(message(msg_id="<a@x>"), message(msg_id="<b@x>"), third.as_bytes())
    start = data.index(b"From sender", len(_mbox(message(msg_id="<a@x>"), message(msg_id="<b@x>"))) - 1)
    path = tmp_path / "archive.mbox"
    path.write_bytes(cut(data, start))
    sink, state = Collector(), ConnectorState(tmp_path / "data", "email")
    report = run_email([path], sink, state)
    assert [d.source_id for d in sink.docs] == ["a@x", "b@x"]
    assert report.documents == 2 and report.items_seen == 3
    [letter] = report.dead_letters
    assert letter.path == f"{path}#3"
    assert "truncated" in letter.reason and problem in letter.reason
    assert read_dead_letters(tmp_path / "data") == [letter]


def _tree(root: Path) -> dict[str, int]:
    """A folder with each kind of input, some of them broken. Returns the expected counts."""
    (root / "loose").mkdir(parents=True)
    (root / "loose" / "one.eml").write_bytes(message(msg_id="<eml1@x>"))
    (root / "loose" / "undated.eml").write_bytes(message(msg_id="<eml2@x>", date=None))
    (root / "loose" / "empty.eml").write_bytes(b"")
    (root / "loose" / "README.md").write_text("# not mail\n")
    (root / "loose" / "notes.json").write_text('{"from": "x"}\n')
    (root / "archive.mbox").write_bytes(_mbox(message(msg_id="<mb1@x>"), message(msg_id="<mb2@x>", date="31 Foo 2001")))
    for box in ("cur", "new", "tmp"):
        (root / "Maildir" / box).mkdir(parents=True)
    (root / "Maildir" / "cur" / "1700000000.1.host:2,S").write_bytes(message(msg_id="<md1@x>"))
    (root / "Maildir" / "new" / "1700000001.2.host").write_bytes(_mime().as_bytes())
    (root / "Maildir" / "tmp" / "1700000002.3.host").write_bytes(message(msg_id="<in-delivery@x>"))
    (root / "Maildir" / ".Sent" / "cur").mkdir(parents=True)
    (root / "Maildir" / ".Sent" / "new").mkdir()
    (root / "Maildir" / ".Sent" / "cur" / "1700000003.4.host:2,S").write_bytes(message(msg_id="<sent1@x>"))
    (root / "enron_style").mkdir()
    (root / "enron_style" / "12.").write_bytes(message(msg_id="<noext@x>"))
    # 8 messages and the text attachment of one (mime@example.com): a document of its own.
    return {"documents": 9, "dead": 1, "undated": 2, "files": 8}


def test_run_over_a_folder_detects_every_kind_and_reruns_hand_nothing(tmp_path):
    expected = _tree(tmp_path / "mail")
    sink, data = Collector(), tmp_path / "data"
    report = run_email([tmp_path / "mail"], sink, ConnectorState(data, "email"), batch_size=3)
    ids = sorted(d.source_id for d in sink.docs)
    assert ids == sorted(["eml1@x", "eml2@x", "mb1@x", "mb2@x", "md1@x", "mime@example.com", "sent1@x", "noext@x",
                          "mime@example.com#attachment/1/totals.csv"])
    assert report.documents == expected["documents"]
    assert report.undated == expected["undated"]
    assert all(len(batch) <= 3 for batch in sink.batches) and len(sink.batches) == 3
    # The empty file, and the mime message's fake PDF (a broken attachment, its message still in).
    letter, scan = sorted(report.dead_letters, key=lambda d: "#attachment/" in d.path)
    assert letter.path.endswith("empty.eml") and letter.reason == "message: empty"
    assert scan.path.endswith("#attachment/2/scan.pdf") and "cannot extract text" in scan.reason
    assert any("archive.mbox#2: Date: unparseable" in w for w in report.warnings)
    assert report.to_dict()["undated"] == 2

    # A fresh state object over the same data folder: nothing changed, nothing handed on.
    again = Collector()
    rerun = run_email([tmp_path / "mail"], again, ConnectorState(data, "email"))
    assert again.docs == [] and rerun.documents == 0
    assert rerun.unchanged == expected["files"] and rerun.dead_letters == []

    # One changed file is read again, alone.
    (tmp_path / "mail" / "loose" / "one.eml").write_bytes(message(msg_id="<eml1@x>", body="Edited."))
    third = Collector()
    report3 = run_email([tmp_path / "mail"], third, ConnectorState(data, "email"))
    assert [d.source_id for d in third.docs] == ["eml1@x"]
    assert report3.unchanged == expected["files"] - 1


def test_a_failing_sink_leaves_the_files_to_the_next_run(tmp_path):
    _tree(tmp_path / "mail")
    data = tmp_path / "data"

    def broken(docs):
        raise RuntimeError("log is down")

    with pytest.raises(RunStopped) as stopped:
        run_email([tmp_path / "mail"], broken, ConnectorState(data, "email"))
    assert isinstance(stopped.value.__cause__, RuntimeError)
    sink = Collector()
    report = run_email([tmp_path / "mail"], sink, ConnectorState(data, "email"))
    assert report.documents == 9 and report.unchanged == 0


def test_missing_path_is_a_dead_letter_and_the_rest_goes_in(tmp_path):
    good = tmp_path / "good.eml"
    good.write_bytes(message())
    sink = Collector()
    report = run_email([tmp_path / "nope", good], sink, ConnectorState(tmp_path / "data", "email"))
    assert [d.source_id for d in sink.docs] == ["m1@example.com"]
    assert [(d.path, d.reason) for d in report.dead_letters] == [(str(tmp_path / "nope"), "path: does not exist")]


def test_files_under_a_folder_that_are_not_mail_are_counted_with_how_to_read_them(tmp_path):
    """Issue 41: a run that passes files over says how many and how to include them."""
    root = tmp_path / "mail"
    root.mkdir()
    (root / "one.eml").write_bytes(message(msg_id="<real@x>"))
    (root / "notes.txt").write_text("Agenda: budget\nOwner: Dana\n")
    (root / "minutes.txt").write_text("Just some text, no headers at all.\n")
    (root / ".DS_Store").write_bytes(b"\x00\x01binary")
    report = run_email([root], Collector(), ConnectorState(tmp_path / "data", "email"))
    assert report.documents == 1 and report.dead_letters == []
    [(why_txt, count), (why_hidden, hidden)] = sorted(report.skipped.items())
    assert why_txt.startswith(".txt files: not mail") and "name the file" in why_txt and count == 2
    assert why_hidden.startswith("hidden files") and hidden == 1
    # Named by the caller, the same text file is read (it becomes a dead letter or a document, never silence).
    named = run_email([root / "notes.txt"], Collector(), ConnectorState(tmp_path / "data2", "email"))
    assert named.skipped == {} and named.items_seen == 1

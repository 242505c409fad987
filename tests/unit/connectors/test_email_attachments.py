"""Mail attachments as documents linked to their message (services/connectors/mail_attachments.py):
ids stable across runs, the message's thread, author, date and access list, what fails is a dead
letter naming the file while the message goes in, what cannot be read is counted by type.
Fixtures are generated here: messages by the stdlib, PDF/DOCX files by pypdf and python-docx."""

from __future__ import annotations

import io
from email.message import EmailMessage

import pytest

from services.connectors.base import ConnectorState
from services.connectors.email import parse_email
from services.connectors.mail_attachments import (
    MAX_ATTACHMENT_BYTES,
    attachment_id,
    encoded_size_bound,
    office_extractor,
)
from services.connectors.mail_files import run_email
from services.core.write_rules import parent_row_id, row_id_for
from tests.sinks import Collector

DATE = "Mon, 1 Dec 2025 10:00:00 +0000"
_extract, _reads = office_extractor()
needs_extractor = pytest.mark.skipif(_extract is None or _reads is None,
                                     reason="services/connectors/extract.py (Office/PDF text) is not there yet")


def message(mid: str, subject: str = "Q3 numbers", body: str = "See attached.") -> EmailMessage:
    msg = EmailMessage()
    msg["From"], msg["To"], msg["Cc"] = "ana@example.org", "bo@example.org", "cy@example.org"
    msg["Subject"], msg["Message-ID"], msg["Date"] = subject, f"<{mid}>", DATE
    msg.set_content(body)
    return msg


def pdf_bytes(text: str) -> bytes:
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    page = writer.add_blank_page(612, 792)
    font = DictionaryObject({NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
                             NameObject("/BaseFont"): NameObject("/Helvetica")})
    page[NameObject("/Resources")] = DictionaryObject(
        {NameObject("/Font"): DictionaryObject({NameObject("/F1"): writer._add_object(font)})})
    stream = DecodedStreamObject()
    stream.set_data(f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode())
    page[NameObject("/Contents")] = writer._add_object(stream)
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx_bytes(text: str) -> bytes:
    import docx

    document = docx.Document()
    document.add_paragraph(text)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_text_and_html_attachments_are_documents_of_the_message():
    msg = message("m1@example.org")
    msg.add_attachment("Budget notes: travel 4200", filename="notes.txt")
    msg.add_attachment("<html><body><p>Roadmap <b>phase two</b></p><script>x()</script></body></html>",
                       subtype="html", filename="roadmap.html")
    msg.add_attachment("# Plan\n\n- hire", subtype="markdown", filename="plan.md")
    parsed = parse_email(msg.as_bytes(), acl_from_participants=True)
    parent = parsed.document
    assert [d.source_id for d in parsed.attachments] == [
        "m1@example.org#attachment/1/notes.txt", "m1@example.org#attachment/2/roadmap.html",
        "m1@example.org#attachment/3/plan.md"]
    for doc in parsed.attachments:
        assert doc.parent == parent.source_id and doc.thread == parent.thread and doc.source == "email"
        assert doc.acl == parent.acl == ["ana@example.org", "bo@example.org", "cy@example.org"]
        assert (doc.author, doc.date, doc.participants, doc.kind) == (parent.author, parent.date,
                                                                      parent.participants, "doc")
        assert doc.text.splitlines()[0] == f"Attachment {doc.title} of the message 'Q3 numbers'"
    html = parsed.attachments[1].text
    assert "Roadmap" in html and "phase two" in html and "<b>" not in html and "x()" not in html
    assert parsed.attachments[2].text.endswith("# Plan\n\n- hire")
    assert not parsed.attachment_failures and not parsed.attachment_skips
    # Parsing the same bytes again names the same items: a rerun adds nothing.
    again = parse_email(msg.as_bytes(), acl_from_participants=True)
    assert [d.source_id for d in again.attachments] == [d.source_id for d in parsed.attachments]


def test_the_parent_row_id_is_the_row_id_of_the_message():
    msg = message("m2@example.org")
    msg.add_attachment("x", filename="a.txt")
    parsed = parse_email(msg.as_bytes())
    assert parent_row_id("acme", parsed.attachments[0]) == row_id_for("acme", parsed.document)
    assert parent_row_id("acme", parsed.document) is None
    assert parent_row_id("other", parsed.attachments[0]) != row_id_for("acme", parsed.document)


def test_images_and_archives_are_counted_skipped_not_dead_letters():
    msg = message("m3@example.org")
    msg.add_attachment(b"\x89PNG\r\n\x1a\n" + bytes(64), maintype="image", subtype="png", filename="chart.png")
    msg.add_attachment(b"PK\x03\x04" + bytes(64), maintype="application", subtype="zip", filename="all.zip")
    msg.add_attachment(b"PK\x03\x04" + bytes(64), maintype="application", subtype="octet-stream", filename="b.zip")
    parsed = parse_email(msg.as_bytes())
    assert parsed.attachments == () and parsed.attachment_failures == ()
    assert parsed.attachment_skips == ("attachment: image/png (no text extractor for this type)",
                                       "attachment: application/zip (archives are not unpacked)",
                                       "attachment: application/octet-stream (archives are not unpacked)")
    assert "[attachment: chart.png (image/png)]" in parsed.document.text  # the message still names it


def test_an_oversized_attachment_is_bounded_before_it_is_decoded():
    msg = message("m4@example.org")
    msg.add_attachment("ok", filename="small.txt")
    big = b"A" * (MAX_ATTACHMENT_BYTES + 1024)
    msg.add_attachment(big, maintype="text", subtype="plain", filename="huge.txt")
    part = list(msg.iter_attachments())[1]
    assert encoded_size_bound(part) >= MAX_ATTACHMENT_BYTES
    parsed = parse_email(msg.as_bytes())
    assert [d.title for d in parsed.attachments] == ["small.txt"]
    (label, reason), = parsed.attachment_failures
    assert label == "#attachment/2/huge.txt" and f"over {MAX_ATTACHMENT_BYTES} bytes" in reason


def test_base64_line_breaks_and_padding_do_not_count_toward_the_bound():
    msg = message("m5@example.org")
    msg.add_attachment(b"x" * 3000, maintype="text", subtype="plain", filename="a.txt")
    part = list(msg.iter_attachments())[0]
    assert part["Content-Transfer-Encoding"] == "base64"
    assert 3000 <= encoded_size_bound(part) <= 3003


def test_attachment_ids_fit_the_source_id_cap_and_keep_their_index():
    long_id = "m" * 1020
    first, second = attachment_id(long_id, 1, "a.txt"), attachment_id(long_id, 2, "a.txt")
    assert first != second and len(first) <= 1024 and "#attachment/1/a.txt" in first
    assert len(attachment_id("m@x", 1, "n" * 5000)) <= 1024


@needs_extractor
def test_pdf_and_docx_attachments_are_extracted_and_a_corrupt_pdf_is_a_failure_of_its_own():
    msg = message("m6@example.org")
    msg.add_attachment(pdf_bytes("quarterly budget forecast"), maintype="application", subtype="pdf",
                       filename="forecast.pdf")
    msg.add_attachment(docx_bytes("hiring plan for spring"), maintype="application",
                       subtype="vnd.openxmlformats-officedocument.wordprocessingml.document", filename="plan.docx")
    msg.add_attachment(b"%PDF-1.7\n" + bytes(range(256)) * 8, maintype="application", subtype="pdf",
                       filename="broken.pdf")
    parsed = parse_email(msg.as_bytes())
    texts = {d.title: d.text for d in parsed.attachments}
    assert "quarterly budget forecast" in texts["forecast.pdf"] and "hiring plan" in texts["plan.docx"]
    assert [label for label, _ in parsed.attachment_failures] == ["#attachment/3/broken.pdf"]
    assert parsed.document.source_id == "m6@example.org"  # the message itself goes in


def test_a_run_over_an_mbox_gives_each_message_its_attachment_and_a_rerun_adds_nothing(tmp_path):
    mbox = tmp_path / "mail" / "box.mbox"
    mbox.parent.mkdir()
    chunks = []
    for n in (1, 2):
        msg = message(f"mb{n}@example.org", subject=f"Report {n}")
        msg.add_attachment(f"figures of report {n}", filename=f"report-{n}.txt")
        msg.add_attachment(b"\x89PNG" + bytes(32), maintype="image", subtype="png", filename="logo.png")
        chunks.append(b"From ana@example.org Mon Dec  1 10:00:00 2025\n" + msg.as_bytes() + b"\n")
    mbox.write_bytes(b"".join(chunks))
    sink, state = Collector(), ConnectorState(tmp_path / "data", "email")
    report = run_email([mbox], sink, state)
    docs = {d.source_id: d for d in sink.docs}
    assert set(docs) == {"mb1@example.org", "mb2@example.org", "mb1@example.org#attachment/1/report-1.txt",
                         "mb2@example.org#attachment/1/report-2.txt"}
    assert docs["mb2@example.org#attachment/1/report-2.txt"].parent == "mb2@example.org"
    assert report.documents == 4 and report.items_seen == 2 and not report.dead_letters
    assert report.skipped["attachment: image/png (no text extractor for this type)"] == 2
    again = Collector()
    rerun = run_email([mbox], again, ConnectorState(tmp_path / "data", "email"))
    assert again.docs == [] and rerun.unchanged == 1


def test_a_failed_attachment_is_a_dead_letter_naming_message_and_file(tmp_path):
    msg = message("m7@example.org")
    msg.add_attachment("fine", filename="fine.txt")
    msg.add_attachment(b"B" * (MAX_ATTACHMENT_BYTES + 10), maintype="text", subtype="plain", filename="huge.txt")
    path = tmp_path / "mail" / "one.eml"
    path.parent.mkdir()
    path.write_bytes(msg.as_bytes())
    sink = Collector()
    report = run_email([path], sink, ConnectorState(tmp_path / "data", "email"))
    assert {d.source_id for d in sink.docs} == {"m7@example.org", "m7@example.org#attachment/1/fine.txt"}
    (letter,) = report.dead_letters
    assert letter.path == f"{path}#attachment/2/huge.txt" and "over" in letter.reason

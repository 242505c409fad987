"""Inputs of any size cost bounded memory (issue 16, finding 10, and the low finding on value
lengths): an mbox is read message by message (a 198 MB mbox cost the review 412 MB), a single
message file, structured file or JSONL line over its cap is a dead letter naming the cap, a
document over the text cap is refused with a clear reason, and each name, tag and access-list
value has a length cap (a 9 KB value was accepted)."""

from __future__ import annotations

import io
import re

import pytest
from pydantic import ValidationError

from schemas.documents import (
    MAX_NAME_CHARS,
    MAX_TEXT_CHARS,
    MAX_VALUE_CHARS,
    DocumentIn,
)
from services.cli.common import read_jsonl
from services.connectors import files as file_loop
from services.connectors import mail_files
from services.connectors.base import ConnectorState
from services.connectors.mail_files import iter_mbox, run_email, split_mbox
from services.connectors.tickets import run_tickets
from tests.sinks import Collector


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        return int(re.search(r"VmRSS:\s+(\d+)", status.read()).group(1)) / 1024


def mail(n: int, body: str = "Hello.") -> bytes:
    return (f"From sender@corp.example Thu Jan  1 00:00:00 2015\nMessage-ID: <m{n}@corp.example>\n"
            f"Date: Tue, 14 Nov 2000 08:22:00 -0800\nFrom: a@corp.example\nTo: b@corp.example\n"
            f"Subject: status {n}\n\n{body}\n\n").encode()


class Counter:
    """A sink that keeps nothing, so that the run's own memory is what is measured."""

    def __init__(self):
        self.documents = 0
        self.batches = 0

    def __call__(self, docs):
        self.documents += len(docs)
        self.batches += 1


def state(tmp_path) -> ConnectorState:
    return ConnectorState(tmp_path / "data" / "connectors", "email")


def test_a_100_mb_mbox_is_read_message_by_message_in_bounded_memory(tmp_path):
    body = ("The quarterly sensor budget was reviewed and the vendor contract approved. " * 140).strip()
    messages = 10_000
    path = tmp_path / "inbox" / "archive.mbox"
    path.parent.mkdir()
    with open(path, "wb") as out:
        for n in range(messages):
            out.write(mail(n, body))
    size_mb = path.stat().st_size / 2**20
    assert size_mb > 95
    sink = Counter()
    before = rss_mb()
    report = run_email([path.parent], sink, state(tmp_path))
    grown = rss_mb() - before
    assert report.items_seen == messages and sink.documents == messages and not report.dead_letters
    assert grown < 80, f"RSS grew {grown:.0f} MB reading a {size_mb:.0f} MB mbox"
    print(f"{size_mb:.0f} MB mbox, {messages} messages: RSS +{grown:.0f} MB")
    # Unchanged on the next run, decided by a streamed digest.
    again = run_email([path.parent], Counter(), state(tmp_path))
    assert again.unchanged == 1 and again.items_seen == 0


def test_the_mbox_reader_never_holds_more_than_one_message(tmp_path):
    data = mail(1) + mail(2, "x" * 5000) + mail(3)
    out = list(iter_mbox(io.BytesIO(data), max_message=2000))
    assert [why for _, why in out] == [None, out[1][1], None]
    assert out[1][0] == b"" and out[1][1].startswith("message: over 2000 bytes")
    # The in-memory splitter is the same reader.
    assert split_mbox(data).messages == [raw for raw, _ in iter_mbox(io.BytesIO(data))]


def test_a_line_longer_than_a_read_piece_is_kept_whole(tmp_path):
    long_line = "word " * 40_000  # 200 KB, read in 64 KB pieces
    data = mail(1, long_line + "\n>From here on\n") + mail(2)
    (first, why), (second, _) = iter_mbox(io.BytesIO(data))
    assert why is None and long_line.encode() in first and b"\nFrom here on\n" in first
    assert b"<m2@corp.example>" in second


def test_an_oversized_message_in_an_mbox_is_a_dead_letter_and_the_rest_goes_in(tmp_path, monkeypatch):
    monkeypatch.setattr(mail_files, "MAX_MESSAGE_BYTES", 64 * 1024)
    path = tmp_path / "archive.mbox"
    path.write_bytes(mail(1) + mail(2, "y" * 200_000) + mail(3))
    sink = Collector()
    report = run_email([path], sink, state(tmp_path))
    assert [d.source_id for d in sink.docs] == ["m1@corp.example", "m3@corp.example"]
    (letter,) = report.dead_letters
    assert letter.path == f"{path}#2" and letter.reason.startswith(f"message: over {64 * 1024} bytes")


def test_an_oversized_eml_file_is_a_dead_letter_naming_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(mail_files, "MAX_MESSAGE_BYTES", 1024 * 1024)
    root = tmp_path / "mail"
    root.mkdir()
    (root / "small.eml").write_bytes(mail(1)[mail(1).index(b"\n") + 1:])
    big = mail(2, "z" * (2 * 1024 * 1024))
    (root / "big.eml").write_bytes(big[big.index(b"\n") + 1:])
    sink = Collector()
    report = run_email([root], sink, state(tmp_path))
    assert [d.source_id for d in sink.docs] == ["m1@corp.example"]
    (letter,) = report.dead_letters
    assert letter.path.endswith("big.eml")
    assert letter.reason.startswith(f"message: file over {1024 * 1024} bytes")


def test_a_message_whose_text_is_over_the_document_cap_is_a_dead_letter(tmp_path):
    path = tmp_path / "one.eml"
    raw = mail(1, "w " * (MAX_TEXT_CHARS // 2 + 10))
    path.write_bytes(raw[raw.index(b"\n") + 1:])
    report = run_email([path], Collector(), state(tmp_path))
    (letter,) = report.dead_letters
    assert f"text: over {MAX_TEXT_CHARS} characters" in letter.reason


def test_an_oversized_structured_file_is_a_dead_letter_and_is_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(file_loop, "MAX_FILE_BYTES", 4096)
    root = tmp_path / "tickets"
    root.mkdir()
    (root / "big.json").write_text('{"key": "A-1", "fields": {"summary": "' + "s" * 10_000 + '"}}')
    report = run_tickets(root, Collector(), ConnectorState(tmp_path / "data" / "connectors", "tickets"))
    (letter,) = report.dead_letters
    assert letter.reason.startswith("file: over 4096 bytes")


def test_a_jsonl_line_over_the_cap_is_an_error_and_the_next_lines_are_read(tmp_path, monkeypatch):
    from services.cli import common

    monkeypatch.setattr(common, "MAX_LINE_CHARS", 1000)
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "first"}\n' + '{"text": "' + "x" * 5000 + '"}\n' + '{"text": "third"}\n')
    documents, errors = read_jsonl(path)
    assert [d.text for d in documents] == ["first", "third"]
    assert errors == [f"{path}:2: line: over 1000 characters, not read"]


def test_a_jsonl_document_over_the_text_cap_names_the_field(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text('{"text": "' + "x" * (MAX_TEXT_CHARS + 1) + '"}\n{"text": "ok"}\n')
    documents, errors = read_jsonl(path)
    assert [d.text for d in documents] == ["ok"]
    assert len(errors) == 1 and f"text: String should have at most {MAX_TEXT_CHARS} characters" in errors[0]


@pytest.mark.parametrize(("field", "value", "limit"), [
    ("author", "a" * 9000, MAX_NAME_CHARS),
    ("participants", ["p" * 9000], MAX_NAME_CHARS),
    ("tags", ["t" * 9000], MAX_VALUE_CHARS),
    ("acl", ["g" * 9000], MAX_VALUE_CHARS),
])
def test_a_9_kb_value_is_refused_with_a_field_error(field, value, limit):
    with pytest.raises(ValidationError) as caught:
        DocumentIn(text="x", **{field: value})
    (error,) = caught.value.errors()
    assert error["loc"][0] == field and error["type"] == "string_too_long"
    assert error["ctx"]["max_length"] == limit


def test_values_at_the_cap_are_accepted_and_prefixed_names_fit():
    name = "n" * MAX_NAME_CHARS
    doc = DocumentIn(text="x", author=name, participants=[name], tags=[f"author:{name}"], acl=[f"user:{name}"])
    assert doc.author == name and doc.tags == [f"author:{name}"]


def test_an_email_with_an_over_long_address_keeps_the_message(tmp_path):
    from services.connectors.email import parse_email

    long_address = "x" * 600 + "@corp.example"
    raw = (f"Message-ID: <m@x>\nDate: Tue, 14 Nov 2000 08:22:00 -0800\nFrom: a@corp.example\n"
           f"To: b@corp.example, {long_address}\nSubject: s\n\nbody\n").encode()
    parsed = parse_email(raw, acl_from_participants=True)
    assert parsed.document.participants == ["b@corp.example"]
    assert any("over 512 characters left out" in w for w in parsed.warnings)

"""The email connector over the public Enron sample: every message in, none lost, gold ids found."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from services.connectors.base import ConnectorState
from services.connectors.mail_files import run_email
from tests.sinks import Collector

ARCHIVE = (
    Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "enron_agent_course"
    / "enron_agent_course_student_dataset.tar.gz"
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not ARCHIVE.exists(), reason=f"Enron sample not found at {ARCHIVE} (shared data is absent)"),
]




@pytest.fixture(scope="module")
def extracted(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("enron")
    with tarfile.open(ARCHIVE) as archive:
        # The "data" filter refuses absolute paths and links out of the folder (Python >= 3.11.4).
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        archive.extractall(root, **safe)
    return root


def _message_files_in_archive() -> int:
    # Counted from the archive itself: every regular file under a mail/ folder is one message.
    with tarfile.open(ARCHIVE) as archive:
        return sum(1 for m in archive.getmembers() if m.isfile() and "/mail/" in f"/{m.name}")


def _gold_ids(root: Path) -> set[str]:
    [golden] = root.rglob("golden_set.json")
    records = json.loads(golden.read_text())
    return {i.strip().strip("<>") for r in records for i in r["golden_answer"].get("evidence_message_ids", [])}


def test_every_enron_email_goes_in(extracted, tmp_path):
    expected = _message_files_in_archive()
    sink = Collector()
    # The whole package, README, JSON and scripts included: the connector must pick out the mail.
    report = run_email([extracted], sink, ConnectorState(tmp_path, "email"))
    docs = sink.docs
    print(f"\nEnron: {expected} message files, {report.documents} documents, "
          f"{len(report.dead_letters)} dead letters, {report.undated} undated, {len(report.warnings)} warnings")

    assert report.dead_letters == []
    assert report.documents == len(docs) == expected
    assert all(d.kind == "email" and d.source == "email" for d in docs)
    assert all("@" in d.author and d.author == d.author.lower() for d in docs)
    assert sum(d.date is None for d in docs) == report.undated
    assert all(d.date is None or d.date.utcoffset().total_seconds() == 0 for d in docs)

    gold = _gold_ids(extracted)
    found = gold & {d.source_id for d in docs}
    print(f"Enron: {len(found)} of {len(gold)} golden evidence Message-IDs found as source_id")
    assert gold and found == gold

    again = Collector()
    rerun = run_email([extracted], again, ConnectorState(tmp_path, "email"))
    assert again.docs == [] and rerun.unchanged == expected

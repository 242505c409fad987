"""The public samples go in whole: 300 Apache JIRA issues and 35 QMSum meetings, no dead letters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.connectors.base import ConnectorState
from services.connectors.meetings import run_meetings
from services.connectors.tickets import run_tickets

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
JIRA = DATA / "apache_jira"
QMSUM = DATA / "qmsum" / "test.jsonl"


def raw_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.mark.skipif(not JIRA.is_dir(), reason=f"public Apache JIRA sample absent at {JIRA}")
def test_all_apache_jira_issues_and_comments_go_in(tmp_path):
    issues = [issue for path in sorted(JIRA.glob("*.jsonl")) for issue in raw_lines(path)]
    # Counted from the raw JSONL: one document per issue plus one per non-blank comment.
    expected = len(issues) + sum(1 for issue in issues for c in issue["comments"] if c.strip())
    got: list = []
    report = run_tickets([JIRA], got.extend, ConnectorState(tmp_path, "tickets"))
    assert report.dead_letters == []
    assert len(issues) == report.items_seen == 300
    assert report.documents == len(got) == expected
    assert len({d.source_id for d in got}) == expected  # every source id distinct: idempotent downstream
    assert {d.thread for d in got} == {issue["issue_id"] for issue in issues}
    assert all(d.date is not None and d.date.utcoffset().total_seconds() == 0 for d in got)
    rerun: list = []
    again = run_tickets([JIRA], rerun.extend, ConnectorState(tmp_path, "tickets"))
    assert (rerun, again.documents, again.unchanged) == ([], 0, len(list(JIRA.glob("*.jsonl"))))


@pytest.mark.skipif(not QMSUM.is_file(), reason=f"public QMSum test split absent at {QMSUM}")
def test_all_qmsum_meetings_go_in_one_document_each(tmp_path):
    meetings = raw_lines(QMSUM)
    got: list = []
    report = run_meetings([QMSUM], got.extend, ConnectorState(tmp_path, "meetings"), date="2021-06-01")
    assert report.dead_letters == []
    assert report.items_seen == report.documents == len(got) == len(meetings) == 35
    for doc, meeting in zip(got, meetings, strict=True):
        turns = meeting["meeting_transcripts"]
        # Stored whole: one line per turn, so QMSum's turn-index spans still point at the right line.
        assert len(doc.text.splitlines()) == len(turns)
        assert doc.author == turns[0]["speaker"].strip()
        assert {f"speaker:{t['speaker'].strip()}" for t in turns} <= set(doc.tags)
    assert len({d.source_id for d in got}) == 35

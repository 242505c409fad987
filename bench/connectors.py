"""Connector throughput on the public samples, without the encoder: items parsed per second.

    .venv/bin/python -m bench.connectors

The sink only collects documents, so the figure is what a connector costs before the write path
(appending to the log) and the indexer (embedding) take over.
"""

from __future__ import annotations

import sys
import tarfile
import tempfile
import time
from pathlib import Path

from services.connectors.base import ConnectorState
from services.connectors.mail_files import run_email
from services.connectors.meetings import run_meetings
from services.connectors.tickets import run_tickets

SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def timed(name: str, run, unit: str) -> tuple[str, int, int, float, int]:
    with tempfile.TemporaryDirectory() as state_dir:
        collected: list = []
        started = time.perf_counter()
        report = run(lambda docs: collected.extend(docs), ConnectorState(Path(state_dir), name))
        seconds = time.perf_counter() - started
    return name, report.items_seen, len(collected), seconds, len(report.dead_letters), unit


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        archive = SHARED / "enron_agent_course" / "enron_agent_course_student_dataset.tar.gz"
        if archive.exists():
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
            rows.append(timed("email (Enron maildir)", lambda sink, st: run_email([Path(tmp)], sink, st), "messages"))
        jira = sorted((SHARED / "apache_jira").glob("*.jsonl"))
        if jira:
            rows.append(timed("tickets (Apache JIRA JSONL)", lambda sink, st: run_tickets(jira, sink, st), "issues"))
        qmsum = SHARED / "qmsum" / "test.jsonl"
        if qmsum.exists():
            rows.append(timed("meetings (QMSum JSON)", lambda sink, st: run_meetings([qmsum], sink, st), "meetings"))
    if not rows:
        raise SystemExit(f"no public samples under {SHARED}")
    print("| connector | items | documents | seconds | items/s | documents/s | dead letters |")
    print("|---|---|---|---|---|---|---|")
    for name, items, docs, seconds, dead, unit in rows:
        print(f"| {name} | {items} {unit} | {docs} | {seconds:.2f} | {items / seconds:.0f} | {docs / seconds:.0f} | {dead} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

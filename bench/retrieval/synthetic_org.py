"""The synthetic organisation (`services.demo`) as a harness dataset: one tenant per seed.

Each seed's organisation is generated as files (mbox, Jira JSON, WebVTT) and read by orgmem's own
connectors, so its rows are the ones `orgmem demo` would store; the store then ingests those
documents through `Memory.ingest`. Questions come from the generator with their gold evidence,
their date bound and, where they ask what held at a date, the version then in force and the
versions it superseded.

Split: within each seed, the questions about the first half of its decision threads (in the
order the generator drew them) tune, those about the second half are held out. No thread is in
both halves, so a held-out question never shares its story with a tuning one.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, date, datetime
from pathlib import Path

from bench.retrieval.datasets import Dataset, Group, Question
from schemas.documents import DocumentIn
from services.connectors.base import ConnectorState
from services.connectors.mail_files import run_email
from services.connectors.meetings import run_meetings
from services.connectors.tickets import run_tickets
from services.demo.synthetic_org import GeneratedOrg, generate

# A few hundred artefacts per seed: fewer threads and 40 percent of the demo's everyday traffic.
THREADS = 24
FILLER = 0.4


def tenant_of(seed: int) -> str:
    return f"org-seed-{seed}"


def connector_documents(org: GeneratedOrg) -> list[DocumentIn]:
    """What the email, tickets and meetings connectors make of the generated files."""
    docs: list[DocumentIn] = []
    with tempfile.TemporaryDirectory(prefix="orgmem-bench-") as data:
        for name, run, path in (("email", run_email, org.mbox), ("tickets", run_tickets, org.jira),
                                ("meetings", run_meetings, org.meetings)):
            report = run([path], docs.extend, ConnectorState(Path(data), name))
            if report.dead_letters:
                raise ValueError(f"{path}: the connector refused {len(report.dead_letters)} item(s): "
                                 f"{report.dead_letters[0].reason}")
    return docs


def _start_of(day: str | None) -> datetime | None:
    """A question's date bound: the start of that day, as the generator's gold assumes."""
    return datetime.combine(date.fromisoformat(day), datetime.min.time(), tzinfo=UTC) if day else None


def load_synthetic_org(seeds: Sequence[int], work_dir: Path) -> Dataset:
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: expected distinct seeds, got {list(seeds)}")
    groups, questions, dropped, sources = [], [], Counter(), {}
    for seed in seeds:
        org = generate(Path(work_dir) / "source" / f"seed-{seed}", seed=seed, threads=THREADS, filler=FILLER)
        tenant = tenant_of(seed)
        groups.append(Group(tenant, connector_documents(org)))
        tuning = {t["thread"] for t in org.threads[: len(org.threads) // 2]}
        for q in org.questions:
            if q["known_at"]:
                # The harness ingests everything at once, so ingest time says nothing about the record's dates.
                dropped["bi-temporal (known_at) questions: the harness ingests every document at once"] += 1
                continue
            refs = [*q["gold"], *([q["version"]] if q["version"] else []), *q["superseded"]]
            sources.update({r["source_id"]: r["source"] for r in refs})
            questions.append(Question(
                f"seed-{seed}/{q['id']}", q["question"], q["kind_of_question"], tenant,
                tuple(g["source_id"] for g in q["gold"]), as_of=_start_of(q["as_of"]),
                version=q["version"]["source_id"] if q["version"] else None,
                superseded=tuple(v["source_id"] for v in q["superseded"]),
                half="tune" if q["thread"] in tuning else "held-out"))
    return Dataset("synthetic-org", "email", groups, questions, dropped, sources)

"""`--dataset jsonl` end to end on a tiny pair of generated files: ingest through the write path,
fetch in each question's date scope, replay as the read path ranks, report recall, complete and
version-correct."""

from __future__ import annotations

import io
import json

import pytest

from bench.retrieval.harness import GroupIndex, replay_question
from bench.retrieval.jsonl import TENANT, load_jsonl
from bench.retrieval.runner import run_benchmark
from bench.retrieval.store import cached_candidates, open_store
from bench.retrieval.variants import VARIANTS
from services.core.scope import Scope

pytestmark = pytest.mark.slow

POLICY = [("2025-01-10", "ana", "The travel class for long flights is economy."),
          ("2025-04-02", "ben", "Change: the travel class for long flights is now premium economy."),
          ("2025-09-01", "ana", "Reversal: the travel class for long flights goes back to economy.")]
OTHER = ["Lunch is on Friday at the corner cafe.", "The fire drill is at 11:00.",
         "Laptop shipments are delayed by a week.", "The quarterly survey closes on Monday."]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("own")
    docs = [{"text": text, "author": who, "date": day, "kind": "email", "thread": "travel", "source": "mail",
             "source_id": f"v{n}"} for n, (day, who, text) in enumerate(POLICY, 1)]
    docs += [{"text": text, "author": "cy", "date": f"2025-0{n + 3}-15", "source_id": f"o{n}"}
             for n, text in enumerate(OTHER, 1)]
    questions = [
        {"q": "What is the travel class for long flights?", "gold": ["v3"], "version_source_id": "v3"},
        {"q": "What was the travel class for long flights in June 2025?", "gold": ["v2"],
         "as_of": "2025-06-01", "version_source_id": "v2"},
        {"q": "travel class long flights", "gold": ["v1"], "as_of": "2025-02-01", "version_source_id": "v1"},
        {"q": "When is lunch?", "gold": ["o1"]},
    ]
    (root / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (root / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions) + "{broken\n")
    return root


def test_the_table_reports_recall_complete_and_version_per_question(files, tmp_path):
    log = io.StringIO()
    text = run_benchmark("jsonl", ks=(1, 3), selectors=["vector", "rrf-2-1", "coverage"], out=tmp_path / "out",
                         work=tmp_path / "work", documents=files / "docs.jsonl", questions=files / "questions.jsonl",
                         log=log)
    assert f"{files / 'questions.jsonl'}:5: " in log.getvalue()
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if line.startswith("| selection |"))
    assert lines[start] == ("| selection | recall@1 | recall@3 | complete@1 | complete@3 | version@1 | version@3 | "
                            "questions |")
    overall = lines[start + 2: lines.index("", start)]
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in overall}
    assert list(rows) == ["vector", "rrf-2-1", "coverage"]
    for cells in rows.values():
        assert cells[-1] == "4 |" and all(0.0 <= float(c) <= 1.0 for c in cells[:-1])
        assert float(cells[0]) <= float(cells[1]) and float(cells[4]) <= float(cells[5])  # grows with K
    assert "Dropped: bad question lines: 1." in text
    assert "| version@1 | all (n=3) |" in text  # three questions name a version
    assert (tmp_path / "out" / "jsonl.md").exists()
    assert (tmp_path / "out" / "img" / "jsonl.png").read_bytes()[:4] == b"\x89PNG"


def test_dated_questions_are_fetched_and_replayed_in_their_scope(files, tmp_path):
    data = load_jsonl(files / "docs.jsonl", files / "questions.jsonl", log=io.StringIO())
    cands = cached_candidates(data, tmp_path / "jsonl")
    by_qid = {q.qid: q for q in data.questions}
    june = next(q for q in cands.questions if by_qid[q.qid].as_of and by_qid[q.qid].as_of.month == 6)
    rows = {rid for hits in june.legs.values() for rid, _ in hits}
    assert june.version in rows and june.superseded and set(june.superseded) < rows
    assert len(june.scope_ids) == 4  # v1, v2 and the two other documents dated before June
    assert not rows - set(june.scope_ids)  # no leg saw a row from after the date
    memory, lock = open_store(data, tmp_path / "jsonl")
    try:
        index = GroupIndex(cands.groups[TENANT])
        for config in (VARIANTS["rrf-2-1"].config, VARIANTS["coverage"].config.with_overrides(reserve=3)):
            for q in cands.questions:
                asked = by_qid[q.qid]
                online = memory.query(asked.text, Scope(tenant=TENANT, as_of=asked.as_of), config.with_overrides(k=5))
                assert [s.row.row_id for s in online.selected] == replay_question(q, index, config, 5), q.qid
    finally:
        memory.close()
        lock.release()

"""The harness's organisational datasets without a store: your own JSONL files, and the synthetic
organisation as the connectors read it."""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import UTC, datetime

import pytest

from bench.retrieval.jsonl import load_jsonl, read_questions
from bench.retrieval.synthetic_org import load_synthetic_org
from schemas.documents import DocumentIn

DOCS = [
    {"text": "Remote work: up to 2 days a week.", "author": "ana", "date": "2025-01-10", "kind": "email",
     "thread": "remote", "source": "mail", "source_id": "m1"},
    {"text": "Remote work changes: up to 3 days a week.", "author": "ben", "date": "2025-04-02", "kind": "email",
     "thread": "remote", "source": "mail", "source_id": "m2"},
    {"text": "Remote work back to 2 days a week.", "author": "ana", "date": "2025-09-01", "kind": "ticket",
     "thread": "remote", "source": "jira", "source_id": "T-1"},
    {"text": "Lunch on Friday.", "author": "cy", "date": "2025-05-05", "source_id": "m3"},
]


def _write(path, lines) -> None:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))


@pytest.fixture
def files(tmp_path):
    documents, questions = tmp_path / "docs.jsonl", tmp_path / "questions.jsonl"
    _write(documents, [DOCS[0], DOCS[1], '{"text": 5}', DOCS[2], "", DOCS[3]])
    _write(questions, [
        {"q": "remote work now?", "gold": ["T-1"], "version_source_id": "T-1", "category": "current"},
        {"q": "remote work in June?", "gold": ["m2"], "as_of": "2025-06-01", "version_source_id": "m2"},
        "not json",
        {"q": "lunch?", "gold": ["m3", "nope"]},
        {"q": "typo", "gold": ["m1"], "as_off": "2025-01-01"},
        {"q": "", "gold": ["m1"]},
        {"q": "explicit history", "gold": ["m2"], "version_source_id": "m2", "superseded_source_ids": [],
         "known_at": "2026-01-01T00:00:00+01:00", "id": "mine"},
        {"q": "again", "gold": ["m2"], "id": "mine"},
        {"q": "lunch plans?", "gold": ["m3", "m3"]},
    ])
    return documents, questions


def test_bad_lines_of_both_files_are_named_by_line_number_and_the_rest_is_kept(files):
    documents, questions = files
    log = io.StringIO()
    data = load_jsonl(documents, questions, log=log)
    messages = log.getvalue().splitlines()
    assert any(m.startswith(f"{documents}:3: text") for m in messages)
    for number, problem in ((3, ""), (4, "not in the documents file: nope"), (5, "as_off"), (6, "q:"),
                            (8, "used by an earlier question")):
        assert any(m.startswith(f"{questions}:{number}: ") and problem in m for m in messages), (number, messages)
    assert len(messages) == 6
    assert [q.text for q in data.questions] == ["remote work now?", "remote work in June?", "explicit history",
                                                "lunch plans?"]
    assert data.dropped == Counter({"bad document lines": 1, "bad question lines": 5})
    assert len(data.groups) == 1 and len(data.groups[0].documents) == 4


def test_questions_carry_bounds_versions_sources_and_a_half_split(files):
    data = load_jsonl(*files, log=io.StringIO())
    now, june, mine, lunch = data.questions
    assert june.as_of == datetime(2025, 6, 1, tzinfo=UTC) and now.as_of is None
    assert mine.known_at == datetime(2025, 12, 31, 23, tzinfo=UTC) and mine.qid == "mine"
    # Left out, the superseded versions are the version's thread's earlier documents.
    assert now.superseded == ("m1", "m2") and june.superseded == ("m1",) and mine.superseded == ()
    assert lunch.gold == ("m3",) and lunch.version is None and lunch.category == "all"
    assert [q.half for q in data.questions] == ["tune", "tune", "held-out", "held-out"]
    assert data.source_for("T-1") == "jira" and data.source_for("m1") == "mail" and data.source_for("m3") == ""


def test_a_file_without_a_usable_question_is_refused(tmp_path, files):
    documents, _ = files
    empty = tmp_path / "none.jsonl"
    _write(empty, [{"q": "x", "gold": ["missing"]}])
    with pytest.raises(ValueError, match="no usable question"):
        load_jsonl(documents, empty, log=io.StringIO())
    with pytest.raises(FileNotFoundError):
        load_jsonl(documents, tmp_path / "absent.jsonl", log=io.StringIO())


def test_hostile_question_values_are_refused_per_line(tmp_path):
    docs = [DocumentIn.model_validate(d) for d in DOCS]
    path = tmp_path / "q.jsonl"
    _write(path, [{"q": "x", "gold": []}, {"q": "x", "gold": "m1"}, {"q": "x", "gold": ["m1"], "as_of": "yesterday"},
                  {"q": "x", "gold": ["m1"], "version_source_id": "../../etc/passwd"}, [1, 2]])
    questions, errors = read_questions(path, docs)
    assert questions == [] and [e.split(":")[1] for e in errors] == ["1", "2", "3", "4", "5"]


@pytest.fixture(scope="module")
def org_work(tmp_path_factory):
    work = tmp_path_factory.mktemp("org")
    return load_synthetic_org([1, 2], work), work


def test_the_synthetic_organisation_is_one_tenant_per_seed_with_every_reference_stored(org_work):
    org_data, _ = org_work
    assert [g.key for g in org_data.groups] == ["org-seed-1", "org-seed-2"]
    for group in org_data.groups:
        stored = {(d.source, d.source_id) for d in group.documents}
        assert 400 <= len(stored) == len(group.documents) <= 800
        asked = [q for q in org_data.questions if q.group == group.key]
        assert len(asked) >= 60
        for q in asked:
            for sid in (*q.gold, *((q.version,) if q.version else ()), *q.superseded):
                assert (org_data.source_for(sid), sid) in stored, f"{q.qid}: {sid}"
    assert org_data.dropped["bi-temporal (known_at) questions: the harness ingests every document at once"] >= 2
    assert not any(q.known_at for q in org_data.questions)
    dated = [q for q in org_data.questions if q.as_of]
    assert dated and all(q.as_of.tzinfo is UTC and q.as_of.hour == 0 for q in dated)


def test_its_split_keeps_each_decision_thread_in_one_half(org_work):
    org_data, work = org_work
    thread_of = {}
    for seed in (1, 2):
        for q in json.loads((work / "source" / f"seed-{seed}" / "questions.json").read_text()):
            thread_of[f"seed-{seed}/{q['id']}"] = (seed, q["thread"])
    halves_of: dict[tuple[int, str], set[str]] = {}
    for q in org_data.questions:
        halves_of.setdefault(thread_of[q.qid], set()).add(q.half)
    assert all(len(h) == 1 for h in halves_of.values())
    halves = Counter(q.half for q in org_data.questions)
    assert set(halves) == {"tune", "held-out"} and min(halves.values()) >= 0.35 * sum(halves.values())


def test_the_command_line_says_what_each_dataset_needs(tmp_path, capsys):
    from bench.retrieval.cli import main

    common = ["--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")]
    assert main(["--dataset", "jsonl", *common]) == 2
    assert "needs --documents FILE and --questions FILE" in capsys.readouterr().err
    assert main(["--dataset", "jsonl", "--documents", str(tmp_path / "no.jsonl"), "--questions",
                 str(tmp_path / "no.jsonl"), *common]) == 2
    assert "no.jsonl: not found" in capsys.readouterr().err
    assert main(["--dataset", "synthetic-org", "--seeds", "1", "1", *common]) == 2
    assert "distinct seeds" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()

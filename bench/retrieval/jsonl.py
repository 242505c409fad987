"""Your own records as a harness dataset: documents in the ingest JSONL format and questions in JSONL.

A question line: `{"q": "...", "gold": ["<source_id>", ...]}` plus, optionally, `id`, `category`,
`as_of` and `known_at` (ISO dates or times; a date is the start of that day, UTC),
`version_source_id` (the version that holds at the asked date) and `superseded_source_ids` (the
versions it replaced; when left out, the documents of the version's thread dated before it).
Every gold id must name a document of the documents file. A bad line of either file is reported
with its line number and left out; the rest is scored. All documents go into one tenant; the
first half of the questions is the tuning split, the second the held-out one.

`known_at` bounds ingest time, and the harness ingests every document when it first builds the
store, so only a `known_at` after that build admits rows.
"""

from __future__ import annotations

import sys
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bench.retrieval.datasets import Dataset, Group, Question, need_file
from schemas.documents import DocumentIn
from services.cli.common import read_jsonl

TENANT = "jsonl"


class QuestionLine(BaseModel):
    model_config = ConfigDict(extra="forbid")

    q: str = Field(min_length=1)
    gold: list[str] = Field(min_length=1)
    id: str | None = None
    category: str = "all"
    as_of: datetime | None = None
    known_at: datetime | None = None
    version_source_id: str | None = None
    superseded_source_ids: list[str] | None = None

    @field_validator("as_of", "known_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}" for e in exc.errors()[:5])


def _superseded(version: DocumentIn, documents: list[DocumentIn]) -> tuple[str, ...]:
    """The documents of the version's thread dated before it: what it replaced, by default."""
    if version.thread is None or version.date is None:
        return ()
    return tuple(d.source_id for d in documents if d.thread == version.thread and d.source_id
                 and d.date is not None and d.date < version.date)


def read_questions(path: Path, documents: list[DocumentIn]) -> tuple[list[Question], list[str]]:
    """Questions and one message per bad line (`path:line: problem`)."""
    by_id: dict[str, DocumentIn] = {}
    for doc in documents:
        if doc.source_id:
            by_id.setdefault(doc.source_id, doc)
    questions, errors, seen = [], [], set()
    for number, line in enumerate(need_file(path).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = QuestionLine.model_validate_json(line)
        except ValidationError as exc:
            errors.append(f"{path}:{number}: {_problems(exc)}")
            continue
        named = [*item.gold, *([item.version_source_id] if item.version_source_id else []),
                 *(item.superseded_source_ids or [])]
        missing = [sid for sid in dict.fromkeys(named) if sid not in by_id]
        qid = item.id or f"line-{number}"
        if missing:
            errors.append(f"{path}:{number}: source id(s) not in the documents file: {', '.join(missing[:5])}")
            continue
        if qid in seen:
            errors.append(f"{path}:{number}: id: {qid!r} is used by an earlier question")
            continue
        seen.add(qid)
        superseded = item.superseded_source_ids
        if superseded is None and item.version_source_id:
            superseded = _superseded(by_id[item.version_source_id], documents)
        questions.append(Question(qid, item.q, item.category, TENANT, tuple(dict.fromkeys(item.gold)),
                                  as_of=item.as_of, known_at=item.known_at, version=item.version_source_id,
                                  superseded=tuple(superseded or ())))
    for n, q in enumerate(questions):  # the first half of the lines tune, the second is held out
        questions[n] = replace(q, half="tune" if n < len(questions) // 2 else "held-out")
    return questions, errors


def load_jsonl(documents_path: Path, questions_path: Path, log=sys.stderr) -> Dataset:
    documents, errors = read_jsonl(need_file(documents_path))
    questions, bad_questions = read_questions(questions_path, documents)
    for message in [*errors, *bad_questions]:
        print(message, file=log)
    if not questions:
        raise ValueError(f"{questions_path}: no usable question")
    sources: dict[str, str] = {}
    for doc in documents:
        if doc.source_id:
            sources.setdefault(doc.source_id, doc.source or "")
    dropped = Counter({"bad document lines": len(errors), "bad question lines": len(bad_questions)})
    return Dataset("jsonl", "", [Group(TENANT, documents)], questions, +dropped, sources)

"""Build (once) the orgmem data folder of a dataset, and fetch each question's leg candidates.

Ingestion goes through orgmem's own write path: `Memory.ingest` (or the email connector) into the
event log, then `Memory.catch_up` projects rows, the tantivy index and the Qdrant Edge vectors.
A fingerprint of the documents sits next to the folder, so a rerun skips ingestion.

Selection experiments replay offline from `Candidates`: each question's ranked leg lists, its
query embedding, and the embeddings and thread of every row of its group, fetched once.
"""

from __future__ import annotations

import hashlib
import pickle
import shutil
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from bench.retrieval.datasets import Dataset, Group
from bench.retrieval.rules import question_scope
from schemas.documents import DocumentIn
from services.app.memory import Memory
from services.core.caller import Caller
from services.core.retrieval_config import RetrievalConfig
from services.core.scope import Scope
from services.core.write_rules import row_id_for

# 2: the query encoder's export changed (eager attention), so its questions fetch slightly other legs.
# 3: the rows a question names by source id are fetched too (the "named" leg).
CANDIDATE_CACHE_VERSION = 3
BATCH = 1000


@dataclass
class GroupRows:
    """Every stored row of one group (tenant), in ingest order."""

    ids: list[str]
    threads: list[str | None]
    recency: list[tuple[datetime, int]]  # (event time or ingest time, ingest position)
    vectors: np.ndarray  # (n, d) unit rows aligned with ids
    kinds: list[str] | None = None  # each row's kind (None in caches written before kinds were kept)


@dataclass
class QuestionCandidates:
    qid: str
    category: str
    group: str
    query: np.ndarray  # (d,)
    legs: dict[str, list[tuple[str, float]]]  # leg -> ranked (row id, score), C at most
    gold: list[str]  # gold row ids (repeats mapped to the row they repeat)
    version: str | None = None  # row id of the version that holds at the asked date
    superseded: tuple[str, ...] = ()  # row ids of the versions it replaced
    scope_ids: list[str] | None = None  # a dated question's in-scope row ids, in ingest order


@dataclass
class Candidates:
    dataset: str
    candidates: int
    groups: dict[str, GroupRows]
    questions: list[QuestionCandidates]
    dropped: dict[str, int]
    questions_digest: str | None = None  # of the questions fetched (None in caches written before it)
    rules: str = ""  # fetched with these rules: people, time or both (bench/retrieval/rules.py)


def fingerprint(dataset: Dataset) -> str:
    h = hashlib.sha256(dataset.name.encode())
    for group in dataset.groups:
        h.update(group.key.encode())
        for doc in group.documents:
            h.update(doc.model_dump_json().encode())
        for path in group.mail_paths:
            h.update(str(sorted(p.name for p in Path(path).rglob("*"))).encode())
    return h.hexdigest()[:16]


def questions_digest(dataset: Dataset) -> str:
    """Changes when a question, its bounds or its gold change, so cached candidates are refetched."""
    h = hashlib.sha256()
    for q in dataset.questions:
        h.update(repr((q.qid, q.text, q.group, q.gold, q.as_of, q.known_at, q.version, q.superseded)).encode())
    return h.hexdigest()[:16]


def _ingest_group(memory: Memory, group: Group, folder: Path) -> None:
    caller = Caller(tenant=group.key)
    for start in range(0, len(group.documents), BATCH):
        memory.ingest(group.documents[start : start + BATCH], caller)
    if group.mail_paths:
        from services.connectors.base import ConnectorState
        from services.connectors.mail_files import run_email

        state = ConnectorState(folder / "connectors" / group.key, "email")
        run_email(group.mail_paths, lambda docs: memory.ingest(docs, caller), state)


def open_store(dataset: Dataset, folder: Path, log=sys.stderr):
    """(memory, lock) over the dataset's data folder under `folder`, ingesting it if needed.
    The caller closes both: `memory.close(); lock.release()`."""
    from services.bootstrap import build_memory
    from services.settings import Settings

    folder = Path(folder)
    marker = folder / "built.txt"
    want = fingerprint(dataset)
    if marker.exists() and marker.read_text().strip() != want:
        print(f"{dataset.name}: documents changed since the last build; rebuilding {folder}", file=log)
        shutil.rmtree(folder / "data", ignore_errors=True)
        shutil.rmtree(folder / "connectors", ignore_errors=True)
        marker.unlink()
    memory, lock = build_memory(Settings(data_dir=folder / "data"))
    try:
        if not marker.exists():
            docs = sum(len(g.documents) for g in dataset.groups)
            print(f"{dataset.name}: ingesting {len(dataset.groups)} groups ({docs or 'email'} documents)", file=log)
            for group in dataset.groups:
                _ingest_group(memory, group, folder)
            memory.catch_up(progress=lambda pos, s: print(f"  indexed to {pos}: {s.rows_added} rows", file=log))
            marker.write_text(want)
        else:
            memory.catch_up()
    except BaseException:
        memory.close()
        lock.release()
        raise
    return memory, lock


def gold_rows(memory: Memory, tenant: str, source: str, source_ids: tuple[str, ...]) -> list[str]:
    """Row ids of gold documents; a document skipped as a repeat maps to the row it repeats."""
    out = []
    for sid in source_ids:
        rid = row_id_for(tenant, DocumentIn(text="-", source=source, source_id=sid))
        if memory.stored_row(rid) is None:
            # Memory has no public read of the skip records yet.
            skipped = memory.skipped(rid)
            rid = skipped.duplicate_of if skipped and skipped.duplicate_of else None
        if rid is not None:
            out.append(rid)
    return list(dict.fromkeys(out))


def _group_rows(memory: Memory, tenant: str) -> GroupRows:
    rows = memory.rows_in_scope(Scope(tenant=tenant))  # in ingest order
    vectors = memory.stored_vectors([r.row_id for r in rows])
    rows = [r for r in rows if r.row_id in vectors]
    matrix = np.stack([vectors[r.row_id] for r in rows]).astype(np.float32) if rows else np.zeros((0, 0), np.float32)
    return GroupRows([r.row_id for r in rows], [r.thread for r in rows],
                     [(r.event_time or r.ingested_at, r.ingest_position) for r in rows], matrix, [r.kind for r in rows])


def fetch_candidates(memory: Memory, dataset: Dataset, candidates: int = 200, rules: str = "") -> Candidates:
    """Each question's three legs (disjunctive BM25, tags, vectors; C rows each) and the rows it
    names by source id, in its own scope, as the read path fetches them (`Memory.query`, asked
    for no rows). `rules` ("people", "time" or "both"): with those rules, as the query route applies
    them (the window of the question's time phrase, the leg of the persons it names)."""
    legs_only = RetrievalConfig(candidates=candidates, lexical_match="any", k=0, reserve=0, selector="rrf",
                                named_rows=True)
    groups = {g.key: _group_rows(memory, g.key) for g in dataset.groups}
    out, dropped = [], dict(dataset.dropped)
    def rows(ids: tuple[str, ...]) -> list[str]:
        return [r for sid in ids for r in gold_rows(memory, q.group, dataset.source_for(sid), (sid,))]

    for q in dataset.questions:
        gold = rows(q.gold)
        if not gold:
            dropped["questions whose gold rows were not stored"] = dropped.get("questions whose gold rows were not stored", 0) + 1
            continue
        version = rows((q.version,)) if q.version else []
        scope, people = question_scope(memory, q, rules)
        found = memory.query(q.text, scope, legs_only, None, 30.0, people)
        dated = scope.as_of is not None or scope.since is not None or scope.known_at is not None
        out.append(QuestionCandidates(
            q.qid, q.category, q.group, np.asarray(found.query_vector, np.float32), found.legs, gold,
            version=version[0] if version else None,
            superseded=tuple(r for r in dict.fromkeys(rows(q.superseded)) if r not in version),
            scope_ids=[r.row_id for r in memory.rows_in_scope(scope)] if dated else None))
    return Candidates(dataset.name, candidates, groups, out, dropped, questions_digest(dataset), rules)


def cached_candidates(dataset: Dataset, folder: Path, candidates: int = 200, log=sys.stderr,
                      rules: str = "") -> Candidates:
    """Candidates from `folder`'s cache when it matches the documents, else built (and cached)."""
    from services.settings import Settings

    folder = Path(folder)
    # Keyed by the query encoder's precision too: int8 and fp32 questions fetch different legs.
    precision = Settings().embedder.query_vectors
    path = folder / (f"candidates-C{candidates}-v{CANDIDATE_CACHE_VERSION}-{precision}{rules_tag(rules)}-"
                     f"{fingerprint(dataset)}.pkl")
    if path.exists():
        with open(path, "rb") as handle:
            cached = pickle.load(handle)
        if cached.questions_digest in (None, questions_digest(dataset)):
            _kinds_from_documents(cached, dataset)
            return cached
    memory, lock = open_store(dataset, folder, log)
    try:
        result = fetch_candidates(memory, dataset, candidates, rules)
    finally:
        memory.close()
        lock.release()
    folder.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        pickle.dump(result, handle)
    return result


def rules_tag(rules: str) -> str:
    """Part of a cache file's name: candidates fetched with the rules are kept apart."""
    return f"-rules-{rules}" if rules else ""


def _kinds_from_documents(cands: Candidates, dataset: Dataset) -> None:
    """Row kinds for a cache written before rows kept them: each document's kind under the row id
    the write path gives it (rows the email connector wrote are mail)."""
    for group in dataset.groups:
        rows = cands.groups.get(group.key)
        if rows is None or rows.kinds is not None:
            continue
        kinds = {row_id_for(group.key, doc): doc.kind for doc in group.documents}
        rows.kinds = [kinds.get(rid, "email" if group.mail_paths else None) for rid in rows.ids]

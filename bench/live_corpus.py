"""The document stream and the questions of the live benchmark, read from ../shared/data (never
copied into the project) and from the synthetic organisation's generator.

The stream mixes LoCoMo turns, QMSum meeting turns, BEAM chat messages, Enron emails (through the
email connector) and the synthetic organisation (through its connectors), each source spread
evenly over a pass so that every stretch of the run holds all of them in proportion. A dataset
that is absent is skipped with a message. Past the end of a pass the same documents come again
as distinct ones (a `[pass N]` prefix, their own source id and thread), as bench/corpus.py does.
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from bench.retrieval.datasets import (
    SHARED_DATA,
    Dataset,
    DatasetMissing,
    load_beam,
    load_locomo,
    load_qmsum,
)
from schemas.documents import DocumentIn
from services.core.write_rules import is_connector_source

ORG_SEEDS = (1, 2, 3)  # about 1,270 documents each at the demo's size


def _grouped_docs(dataset: Dataset) -> list[DocumentIn]:
    """A dataset's documents in one tenant: each thread is named after its conversation, meeting
    or chat too, so that `session_1` of two conversations stays two threads."""
    out = []
    for group in dataset.groups:
        for doc in group.documents:
            thread = doc.thread
            if thread is not None and not thread.startswith(group.key):
                thread = f"{group.key}/{thread}"
            out.append(doc.model_copy(update={"thread": thread}))
    return out


def enron_documents(work: Path, root: Path = SHARED_DATA) -> list[DocumentIn]:
    from bench.retrieval.enron import load_enron
    from services.connectors.base import ConnectorState
    from services.connectors.mail_files import run_email

    dataset = load_enron(root / "enron_agent_course" / "enron_agent_course_student_dataset.tar.gz", work)
    docs: list[DocumentIn] = []
    # A fresh connector state each time: a kept one would skip every file it has already read.
    with tempfile.TemporaryDirectory(prefix="enron-state-", dir=work) as state:
        for group in dataset.groups:
            run_email(group.mail_paths, docs.extend, ConnectorState(Path(state) / group.key, "email"))
    return docs


def org_documents(work: Path, seeds: Sequence[int] = ORG_SEEDS) -> tuple[list[DocumentIn], list[str]]:
    """The synthetic organisation of each seed as its connectors read it, and its questions."""
    from bench.retrieval.synthetic_org import connector_documents
    from services.demo.synthetic_org import generate

    docs, questions = [], []
    for seed in seeds:
        org = generate(work / "org" / f"seed-{seed}", seed=seed)
        key = f"org-seed-{seed}"
        docs += [d.model_copy(update={"thread": f"{key}/{d.thread}" if d.thread else None,
                                      "source_id": f"{key}/{d.source_id}"}) for d in connector_documents(org)]
        questions += [q["question"] for q in org.questions]
    return docs, questions


def load_sources(work: Path, root: Path = SHARED_DATA, log=sys.stderr) -> dict[str, list[DocumentIn]]:
    """Every source that is present, by name; a missing one is reported on `log` and left out."""
    loaders: dict[str, Callable[[], list[DocumentIn]]] = {
        "locomo": lambda: _grouped_docs(load_locomo(root / "locomo" / "locomo10.json")),
        "qmsum": lambda: _grouped_docs(load_qmsum(root / "qmsum" / "test.jsonl")),
        "beam": lambda: _grouped_docs(load_beam(root / "beam" / "100K")),
        "enron": lambda: enron_documents(work, root),
        "synthetic-org": lambda: org_documents(work)[0],
    }
    sources = {}
    for name, load in loaders.items():
        try:
            sources[name] = load()
        except DatasetMissing as exc:
            print(f"skipping {name}: {exc}", file=log)
    if not sources:
        raise SystemExit("no document source found: the shared data folder is absent and the generator failed")
    return sources


def as_api_document(doc: DocumentIn) -> DocumentIn:
    """The API refuses sources that connectors write (an API writer could otherwise claim a future
    item's id): emails and tickets read by a connector here are posted under `bench-<source>`."""
    return doc.model_copy(update={"source": f"bench-{doc.source}"}) if is_connector_source(doc.source) else doc


def interleave(sources: Sequence[Sequence]) -> list:
    """All items of all sources, each source spread evenly: item k of a source of n items sits at
    the fraction (k + 1/2) / n of the whole (ties keep the sources' order)."""
    keyed = [((k + 0.5) / len(items), s, k) for s, items in enumerate(sources) for k in range(len(items))]
    return [sources[s][k] for _, s, k in sorted(keyed)]


def as_pass(doc: DocumentIn, n: int) -> DocumentIn:
    """Pass 0 is the document itself; pass n a distinct document with the same words."""
    if n == 0:
        return doc
    return doc.model_copy(update={
        "text": f"[pass {n}] {doc.text}",
        "source_id": f"{doc.source_id}#pass{n}" if doc.source_id else None,
        "thread": f"{doc.thread}#pass{n}" if doc.thread else None,
    })


def document_stream(mixed: Sequence[DocumentIn]) -> Iterator[DocumentIn]:
    """The mixed documents as the API takes them, pass after pass, without end."""
    api_documents = [as_api_document(doc) for doc in mixed]
    for n in itertools.count():
        for doc in api_documents:
            yield as_pass(doc, n)


def query_questions(work: Path, root: Path = SHARED_DATA, log=sys.stderr) -> tuple[str, list[str]]:
    """The LoCoMo questions (all of them, in file order), or the organisation's when LoCoMo is absent."""
    path = root / "locomo" / "locomo10.json"
    if not path.exists():
        print(f"LoCoMo questions unavailable ({path}: not found): querying with the synthetic organisation's", file=log)
        return "synthetic-org", org_documents(work)[1]
    data = json.loads(path.read_text())
    return "locomo", [qa["question"] for conv in data for qa in conv["qa"] if qa.get("question")]

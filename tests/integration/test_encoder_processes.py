"""The embedded memory over two encoder processes: the same rows, vectors and answers as with one
encoder in process, and a worker killed with SIGKILL in the middle of a backlog costs neither a
row nor a duplicate; the pool replaces it and goes on."""

from __future__ import annotations

import os
import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from schemas.documents import DocumentIn
from services.bootstrap import build_memory
from services.core.caller import Caller
from tests.adapters.test_encoder_processes import encoder_workers
from tests.integration.test_rebuild import corpus, top_ids

pytestmark = pytest.mark.slow


def with_processes(settings, n: int, data_dir: Path):
    return settings.model_copy(update={"data_dir": data_dir,
                                       "embedder": settings.embedder.model_copy(update={"encoder_processes": n})})


def filled(settings):
    memory, lock = build_memory(settings)
    try:
        memory.ingest(corpus())
        memory.catch_up()
        rows = memory.rows_in_scope(memory.scope_for(Caller()))
        workers = encoder_workers()
        return top_ids(memory), {r.source_id: r.row_id for r in rows}, memory.stored_vectors([r.row_id for r in rows]), workers
    finally:
        memory.close()
        lock.release()


def test_two_encoder_processes_store_and_answer_as_one(settings, tmp_path):
    answers_1, rows_1, vectors_1, workers_1 = filled(with_processes(settings, 1, tmp_path / "one"))
    answers_2, rows_2, vectors_2, workers_2 = filled(with_processes(settings, 2, tmp_path / "two"))
    assert workers_1 == [] and len(workers_2) == 2  # the backlog went through the pool
    assert encoder_workers() == []  # closing the memory stopped them
    assert len(rows_1) == len(corpus()) and sorted(rows_1) == sorted(rows_2)
    assert answers_2 == answers_1
    for source_id, row_id in rows_1.items():
        np.testing.assert_allclose(np.asarray(vectors_2[rows_2[source_id]]), np.asarray(vectors_1[row_id]),
                                   rtol=0, atol=1e-6)


def test_with_encoder_processes_the_server_never_loads_a_document_model_of_its_own(settings, tmp_path):
    from services.bootstrap import components

    settings = with_processes(settings, 2, tmp_path / "data")
    components._embedder.cache_clear()  # a fresh process's encoders, not those earlier tests used
    memory, lock = build_memory(settings)
    try:
        memory.ingest(corpus())
        memory.catch_up()
        assert len(encoder_workers()) == 2
        answers = top_ids(memory)
    finally:
        memory.close()
        lock.release()
    assert all(answers)  # the query encoder is loaded and answers
    assert components.embedder_for(settings.embedder, "query").loaded
    assert not components.embedder_for(settings.embedder).loaded  # the workers encoded every batch


def backlog(n: int, prefix: str) -> list[DocumentIn]:
    base = datetime(2025, 3, 1, tzinfo=UTC)
    # Long texts (about 130 word pieces), so that a batch keeps the workers busy for seconds.
    return [DocumentIn(text=f"{prefix} report {i}: " + " ".join(f"item {i}-{j} shipped to site {j % 11}" for j in range(20)),
                       author=f"p{i % 5}@corp.example", date=base + timedelta(hours=i), kind="doc",
                       source="notes", source_id=f"{prefix}-{i}") for i in range(n)]


def test_a_worker_killed_mid_backlog_loses_and_duplicates_nothing(settings, tmp_path, caplog):
    settings = with_processes(settings, 2, tmp_path / "data")
    memory, lock = build_memory(settings)
    try:
        warm = backlog(40, "warm")
        memory.ingest(warm)
        memory.catch_up()  # the workers are started and have loaded the model
        workers = encoder_workers()
        assert len(workers) == 2
        documents = [*warm, *backlog(120, "first")]  # the second batch of the indexer
        memory.ingest(documents[len(warm):])
        done = threading.Event()
        threading.Thread(target=lambda: (memory.catch_up(), done.set()), daemon=True).start()
        time.sleep(0.5)  # inside their runs (60 long texts each)
        victim = workers[0]
        os.kill(victim, signal.SIGKILL)
        assert done.wait(300), "the backlog did not finish after a worker was killed"
        assert "died" in caplog.text  # in the middle of its run, which was sent again
        rows = memory.rows_in_scope(memory.scope_for(Caller()))
        assert sorted(r.source_id for r in rows) == sorted(d.source_id for d in documents)  # none lost, none twice
        assert memory.counts()["active"] == len(documents) and memory.checkpoint() == memory.head()
        assert len(memory.stored_vectors([r.row_id for r in rows])) == len(documents)
        memory.ingest(backlog(40, "second"))  # the pool goes on
        memory.catch_up()
        workers = encoder_workers()
        assert len(workers) == 2 and victim not in workers
        assert memory.counts()["active"] == len(documents) + 40
        hit = memory.query("report 7 item 7-3 shipped", memory.scope_for(Caller()), memory.config_for(k=5))
        assert any(s.row.source_id in ("first-7", "second-7") for s in hit.selected)
    finally:
        memory.close()
        lock.release()
    assert encoder_workers() == []


def test_int8_documents_come_from_the_int8_encoder_in_every_process(settings, tmp_path):
    from services.adapters.embedder.onnx_runtime import OnnxEmbedder
    from services.core.write_path import embedding_text

    settings = with_processes(settings, 2, tmp_path / "data")
    settings = settings.model_copy(update={"embedder": settings.embedder.model_copy(update={"document_precision": "int8"})})
    documents = backlog(40, "int8")
    memory, lock = build_memory(settings)
    try:
        memory.ingest(documents)
        memory.catch_up()
        assert len(encoder_workers()) == 2
        rows = memory.rows_in_scope(memory.scope_for(Caller()))
        stored = memory.stored_vectors([r.row_id for r in rows])
        texts = [embedding_text(r.title, r.text) for r in rows]
    finally:
        memory.close()
        lock.release()
    got = np.stack([np.asarray(stored[r.row_id]) for r in rows])
    np.testing.assert_allclose(got, OnnxEmbedder("all-MiniLM-L6-v2", precision="int8").encode(texts), rtol=0, atol=1e-6)
    cosines = np.sum(got * OnnxEmbedder("all-MiniLM-L6-v2").encode(texts), axis=1)
    assert cosines.min() > 0.9 and cosines.max() < 0.99999  # close to fp32, and not fp32 under another name
    # The vector cache keys them as int8, apart from fp32 vectors of the same texts.
    from services.adapters.vector_cache.sqlite import SqliteVectorCache
    from services.app.vector_cache import cache_key

    cache = SqliteVectorCache(settings.data_dir / "cache" / "vectors.sqlite", 384)
    try:
        as_int8 = cache.get_many([cache_key("onnx/all-MiniLM-L6-v2/256/int8", t) for t in texts])
        as_fp32 = cache.get_many([cache_key("onnx/all-MiniLM-L6-v2/256/fp32", t) for t in texts])
    finally:
        cache.close()
    assert len(as_int8) == len(texts) and as_fp32 == {}

"""The composition root: the only place that picks adapters for a profile."""

from __future__ import annotations

import fcntl
import logging
import os
from functools import lru_cache
from pathlib import Path

from services.core.retrieval_config import PRESETS
from services.memory import Memory
from services.ports import Embedder, OrgmemError
from services.settings import EmbedderSettings, Settings

log = logging.getLogger(__name__)


@lru_cache(maxsize=8)
def _embedder(model: str, max_tokens: int, batch_size: int, threads: int, role: str) -> Embedder:
    from services.adapters.embedder.sentence_transformers import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder(model, max_tokens=max_tokens, batch_size=batch_size, threads=threads)


def embedder_for(settings: EmbedderSettings, role: str = "ingest") -> Embedder:
    """One encoder per process, model and role. Queries get their own copy of the model (~90 MB)
    so that a query never queues behind the indexer's batch encode."""
    return _embedder(settings.model, settings.max_tokens, settings.batch_size, settings.threads, role)


def retrieval_config(settings: Settings):
    r = settings.retrieval
    if r.preset not in PRESETS:
        raise OrgmemError(f"retrieval.preset: unknown preset {r.preset!r}; known: {', '.join(sorted(PRESETS))}")
    base = PRESETS[r.preset]
    weights = dict(base.weights)
    for leg, value in (("lex", r.weight_lex), ("tag", r.weight_tag), ("vec", r.weight_vec)):
        if value is not None:
            weights[leg] = value
    return base.with_overrides(
        weights=weights, candidates=r.candidates, k=r.k, conjunctive=r.conjunctive, selector=r.selector
    )


class DataFolderLock:
    """One process at a time owns the projections of a data folder (the index writers are
    single-process). Appending to the log needs no lock: SQLite serialises writers."""

    def __init__(self, data_dir: Path):
        self.path = Path(data_dir) / "projections.lock"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(self.path, "a+")
        try:
            fcntl.flock(self._handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._handle.seek(0)
            holder = self._handle.read().strip() or "unknown"
            self._handle.close()
            raise OrgmemError(
                f"data folder {data_dir} is in use by another orgmem process (pid {holder}); "
                "stop it, or talk to it over its HTTP API"
            ) from None
        self._handle.seek(0)
        self._handle.truncate()
        self._handle.write(str(os.getpid()))
        self._handle.flush()

    def release(self) -> None:
        if not self._handle.closed:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()


def open_event_log(settings: Settings):
    if settings.profile == "cluster":
        from services.adapters.event_log.kafka import KafkaEventLog  # noqa: WPS433 (cluster profile only)

        return KafkaEventLog.from_settings(settings.cluster)
    from services.adapters.event_log.sqlite import SqliteEventLog

    return SqliteEventLog(Path(settings.data_dir) / "log.sqlite")


def build_memory(settings: Settings) -> tuple[Memory, DataFolderLock | None]:
    """Open the memory of a data folder (embedded profile) with its projections locked."""
    if settings.profile != "embedded":
        raise OrgmemError(f"profile: {settings.profile!r} is not available in this build; use 'embedded'")
    from services.adapters.lexical.tantivy import TantivyLexicalIndex
    from services.adapters.row_store.sqlite import SqliteRowStore
    from services.adapters.vector.qdrant_edge import QdrantEdgeVectorIndex

    data = Path(settings.data_dir)
    lock = DataFolderLock(data)
    try:
        embedder = embedder_for(settings.embedder)
        memory = Memory(
            open_event_log(settings),
            SqliteRowStore(data / "projections" / "rows.sqlite"),
            TantivyLexicalIndex(data / "projections" / "lexical"),
            QdrantEdgeVectorIndex(data / "projections" / "vectors", embedder.dim),
            embedder,
            retrieval_config(settings),
            query_embedder=embedder_for(settings.embedder, "query"),
            indexer_batch=settings.indexer_batch,
        )
    except BaseException:
        lock.release()
        raise
    return memory, lock

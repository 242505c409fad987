"""The composition root: the only place that picks adapters for a profile."""

from __future__ import annotations

import fcntl
import logging
import os
from functools import lru_cache
from pathlib import Path

from services.app.memory import Memory
from services.core.retrieval_config import PRESETS
from services.errors import OrgmemError
from services.ports import Embedder
from services.settings import EmbedderSettings, Settings

log = logging.getLogger(__name__)


@lru_cache(maxsize=8)
def _embedder(settings: EmbedderSettings, role: str) -> Embedder:
    if settings.backend == "onnx":
        from services.adapters.embedder.onnx_runtime import OnnxEmbedder

        return OnnxEmbedder(settings.model, max_tokens=settings.max_tokens, batch_size=settings.batch_size,
                            threads=settings.threads, cache_dir=settings.cache_dir,
                            precision=settings.query_vectors if role == "query" else "fp32")
    from services.adapters.embedder.sentence_transformers import (
        SentenceTransformerEmbedder,
    )

    return SentenceTransformerEmbedder(settings.model, max_tokens=settings.max_tokens,
                                       batch_size=settings.batch_size, threads=settings.threads)


def embedder_for(settings: EmbedderSettings, role: str = "ingest") -> Embedder:
    """One encoder per process, model and role. Queries get their own copy of the model (int8 by
    default, see `EmbedderSettings.query_precision`), so that a query never queues behind the
    indexer's batch encode."""
    return _embedder(settings, role)


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
    """Open the memory of a data folder (embedded profile) with its projections locked; in the
    cluster profile, the memory of a process that reads the projections (see build_cluster_memory)."""
    if settings.profile == "cluster":
        return build_cluster_memory(settings, role="reader")
    if settings.profile != "embedded":
        raise OrgmemError(f"profile: {settings.profile!r} is unknown; use 'embedded' or 'cluster'")
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
            QdrantEdgeVectorIndex(data / "projections" / "vectors", embedder.dim, settings.vector_search_ef),
            embedder,
            retrieval_config(settings),
            query_embedder=embedder_for(settings.embedder, "query"),
            indexer_batch=settings.indexer_batch,
        )
    except BaseException:
        lock.release()
        raise
    return memory, lock


class NoLock:
    """The cluster profile's stand-in for DataFolderLock: ownership of the projections is decided
    by the Kafka consumer group and fenced by the row store's checkpoint, not by a file lock."""

    def release(self) -> None:
        pass


def assemble_cluster_memory(settings: Settings, event_log, rows, lexical, vectors, role: str = "reader") -> Memory:
    """Wire a cluster-profile Memory from opened adapters. role "indexer": this process projects
    the log (`orgmem indexer`); role "reader": it never projects (the API, Celery workers) and
    follows the projections' checkpoint instead."""
    from services.app.projection import ProjectionFollower

    if role not in ("reader", "indexer"):
        raise OrgmemError(f"role: expected 'reader' or 'indexer', got {role!r}")
    embedder = embedder_for(settings.embedder)
    memory = Memory(
        event_log, rows, lexical, vectors, embedder, retrieval_config(settings),
        query_embedder=embedder_for(settings.embedder, "query") if role == "reader" else embedder,
        indexer_batch=settings.indexer_batch,
    )
    if role == "reader":
        memory.projector = ProjectionFollower(event_log, rows, poll_s=settings.indexer_poll_s)  # type: ignore[assignment]
    return memory


def build_cluster_memory(settings: Settings, role: str = "reader") -> tuple[Memory, NoLock]:
    """The cluster profile: Kafka log, Elasticsearch row store and lexical index (one ES index),
    Qdrant server vectors. Every part is named by `settings.cluster`."""
    from services.adapters.event_log.kafka import KafkaEventLog
    from services.adapters.lexical.elasticsearch import ElasticsearchLexicalIndex
    from services.adapters.row_store.elasticsearch import ElasticsearchRowStore
    from services.adapters.vector.qdrant_server import QdrantServerVectorIndex

    cluster = settings.cluster
    missing = [name for name in ("kafka_bootstrap", "es_url", "qdrant_url") if not getattr(cluster, name)]
    if missing:
        raise OrgmemError("profile 'cluster' needs " + ", ".join(f"cluster.{m} (ORGMEM_CLUSTER__{m.upper()})"
                                                                  for m in missing))
    opened: list = []
    try:
        event_log = KafkaEventLog.from_settings(cluster)
        opened.append(event_log)
        shards = getattr(cluster, "es_shards", 1)
        replicas = getattr(cluster, "es_replicas", 0)
        rows = ElasticsearchRowStore(cluster.es_url, cluster.es_index, shards=shards, replicas=replicas,
                                     writer=role == "indexer")
        opened.append(rows)
        # One ES index holds the rows and their lexical index; the row store writes it (see the
        # lexical adapter's module doc for why the lexical side does not).
        lexical = ElasticsearchLexicalIndex(client=rows.client, index=cluster.es_index, shards=shards, writes=False)
        from qdrant_client import QdrantClient

        embedder = embedder_for(settings.embedder)
        vectors = QdrantServerVectorIndex(QdrantClient(url=cluster.qdrant_url, timeout=30), cluster.qdrant_collection,
                                          embedder.dim, search_ef=settings.vector_search_ef)
        opened.append(vectors)
        return assemble_cluster_memory(settings, event_log, rows, lexical, vectors, role), NoLock()
    except BaseException:
        for part in reversed(opened):
            try:
                part.close()
            except Exception:
                log.exception("closing %s failed", type(part).__name__)
        raise

"""A Memory from a profile's adapters: embedded (one data folder) or cluster (Kafka, Elasticsearch,
Qdrant); rebuilding projections aside; the feed an indexer process follows."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from services.adapters.data_folder import projections as projection_folders
from services.app.indexer import LogFeed
from services.app.memory import Memory
from services.app.projection import ProjectionFollower, Projector
from services.app.retrieval import Retriever
from services.bootstrap.components import (
    cached_document_embedder,
    embedder_for,
    retrieval_config,
    tracer_for,
)
from services.bootstrap.data_folder import (
    DataFolderLock,
    NoLock,
    open_event_log,
    private_data_folder,
    sealed_log,
)
from services.errors import Invalid
from services.ports import (
    EventFeed,
    EventLog,
    LexicalIndex,
    RowStore,
    Subscribable,
    VectorIndex,
)
from services.settings import Settings

log = logging.getLogger(__name__)


def assemble_memory(settings: Settings, event_log: EventLog, rows: RowStore, lexical: LexicalIndex,
                    vectors: VectorIndex, role: str = "indexer", preload_queries: bool = True) -> Memory:
    """Wire a Memory from opened adapters. role "indexer": this process projects the log (the
    embedded server, `orgmem indexer`); role "reader": it never projects (the cluster's API and
    Celery workers) and follows the projections' checkpoint instead."""
    if role not in ("reader", "indexer"):
        raise Invalid(f"role: expected 'reader' or 'indexer', got {role!r}")
    embedder = cached_document_embedder(settings)
    if role == "indexer":
        projection = Projector(event_log, rows, lexical, vectors, embedder, batch_size=settings.indexer_batch,
                               tracer=tracer_for(settings))
    else:
        projection = ProjectionFollower(event_log, rows, poll_s=settings.indexer_poll_s)
    # An indexer process of the cluster answers no queries: it needs no second copy of the model.
    answers_queries = role == "reader" or settings.profile == "embedded"
    # A server loads its query encoder now, so that no query pays for it; a CLI command (most never
    # query) loads it at its first query, if any.
    query_embedder = (embedder_for(settings.embedder, "query", load_now=preload_queries) if answers_queries
                      else embedder)
    retriever = Retriever(rows, lexical, vectors, query_embedder, tracer=tracer_for(settings))
    return Memory(event_log, rows, lexical, vectors, embedder, projection, retriever, retrieval_config(settings))


def embedded_adapters(settings: Settings, folder: str = projection_folders.LIVE
                      ) -> tuple[EventLog, RowStore, LexicalIndex, VectorIndex]:
    """The embedded profile's adapters over the data folder (the caller holds its lock); `folder`
    names the projections' folder in it (`rebuild_aside` builds in another one)."""
    from services.adapters.lexical.tantivy import TantivyLexicalIndex
    from services.adapters.row_store.sqlite import SqliteRowStore
    from services.adapters.vector.qdrant_edge_tiers import TieredEdgeVectorIndex

    projections = Path(settings.data_dir) / folder
    return (open_event_log(settings), SqliteRowStore(projections / "rows.sqlite"),
            TantivyLexicalIndex(projections / "lexical"),
            TieredEdgeVectorIndex(projections / "vectors", embedder_for(settings.embedder).dim,
                                  settings.vector_search_ef, seal_rows=settings.vector_seal_rows))


def build_memory(settings: Settings, preload_queries: bool = True) -> tuple[Memory, DataFolderLock | NoLock]:
    """Open the memory of a data folder (embedded profile) with its projections locked; in the
    cluster profile, the memory of a process that reads the projections (see build_cluster_memory)."""
    if settings.profile == "cluster":
        return build_cluster_memory(settings, role="reader", preload_queries=preload_queries)
    if settings.profile != "embedded":
        raise Invalid(f"profile: {settings.profile!r} is unknown; use 'embedded' or 'cluster'")
    lock = DataFolderLock(Path(settings.data_dir))
    try:
        projection_folders.recover(Path(settings.data_dir))
        missing = projection_folders.missing_before_open(Path(settings.data_dir))
        memory = assemble_memory(settings, *embedded_adapters(settings), preload_queries=preload_queries)
        memory.problems = _check_projections(memory, missing)
    except BaseException:
        lock.release()
        raise
    return memory, lock


def _check_projections(memory: Memory, missing: dict[str, str]) -> dict[str, str]:
    """Which projection is missing or far behind the row store (logged; `/readyz` reports it)."""
    counts = memory.counts()
    parts = {"lexical": memory._lexical, "vectors": memory._vectors}
    sizes = {name: part.count() if hasattr(part, "count") else None for name, part in parts.items()}
    problems = projection_folders.check(counts["active"] + counts["archived"], sizes, missing)
    for name, state in problems.items():
        log.error("projection %s is %s beside the row store (checkpoint %d): run `orgmem rebuild`",
                  name, state, memory.checkpoint())
    return problems


def rebuild_aside(settings: Settings, progress=None, audit=None):
    """Rebuild the embedded projections from the log alone, whatever state they are in: fresh
    ones are built in `projections.rebuild/` with the data folder locked, then swapped in.
    `audit(event_log)`, once the folder is locked, appends the command's audit event."""
    data = Path(settings.data_dir)
    lock = DataFolderLock(data)
    try:
        projection_folders.recover(data)
        projection_folders.fresh_aside(data)
        memory = assemble_memory(settings, *embedded_adapters(settings, projection_folders.ASIDE))
        try:
            if audit is not None:
                audit(memory.event_log)
            stats = memory.catch_up(progress=progress)
            counts = memory.stats()
        finally:
            memory.close()
        projection_folders.mark_finished(data)
        projection_folders.swap_in(data)
        return stats, counts
    finally:
        lock.release()


def build_cluster_memory(settings: Settings, role: str = "reader", aside: bool = False,
                         preload_queries: bool = True) -> tuple[Memory, NoLock]:
    """The cluster profile: Kafka log, Elasticsearch row store and lexical index (one ES index),
    Qdrant server vectors. Every part is named by `settings.cluster`: the aliases of the live
    generation (generation 1 is made where there is none), or with `aside` a new generation's own
    names (a rebuild beside the live one, services/bootstrap/cluster_rebuild.py). With
    `cluster.stores` "shared-folder" the rows and the lexical index are SQLite and tantivy in
    `cluster.shared_dir` instead, and the collection has no generations (no rebuild beside)."""
    from qdrant_client import QdrantClient

    from services.adapters.event_log.kafka import KafkaEventLog
    from services.adapters.vector.qdrant_server import QdrantServerVectorIndex

    cluster = settings.cluster
    shared = cluster.stores == "shared-folder"
    needed = ("kafka_bootstrap", "qdrant_url") if shared else ("kafka_bootstrap", "es_url", "qdrant_url")
    missing = [name for name in needed if not getattr(cluster, name)]
    if missing:
        raise Invalid("profile 'cluster' needs " + ", ".join(f"cluster.{m} (ORGMEM_CLUSTER__{m.upper()})"
                                                             for m in missing))
    opened: list = []
    try:
        event_log = sealed_log(settings, KafkaEventLog.from_settings(cluster))
        opened.append(event_log)
        qdrant = QdrantClient(url=cluster.qdrant_url, timeout=30)
        opened.append(qdrant)
        dim = embedder_for(settings.embedder).dim
        if shared:
            rows, lexical = _shared_folder_stores(settings)
            opened += [rows, lexical]
        else:
            rows, lexical = _elasticsearch_stores(settings, role, aside, qdrant, dim, opened)
        vectors = QdrantServerVectorIndex(qdrant, cluster.qdrant_collection, dim, search_ef=settings.vector_search_ef)
        return assemble_memory(settings, event_log, rows, lexical, vectors, role, preload_queries), NoLock()
    except BaseException:
        for part in reversed(opened):
            try:
                part.close()
            except Exception:
                log.exception("closing %s failed", type(part).__name__)
        raise


def _elasticsearch_stores(settings: Settings, role: str, aside: bool, qdrant, dim: int,
                          opened: list) -> tuple[RowStore, LexicalIndex]:
    from services.adapters.elasticsearch_common import connect
    from services.adapters.lexical.elasticsearch import ElasticsearchLexicalIndex
    from services.adapters.row_store.elasticsearch import ElasticsearchRowStore

    cluster = settings.cluster
    es_client = connect(cluster.es_url)
    opened.append(es_client)
    if not aside:
        from services.bootstrap.cluster_rebuild import ensure_generations

        ensure_generations(settings, es_client, qdrant, dim)
    rows = ElasticsearchRowStore(client=es_client, index=cluster.es_index, shards=cluster.es_shards,
                                 replicas=cluster.es_replicas, writer=role == "indexer")
    # One ES index holds the rows and their lexical index; the row store writes it (see the
    # lexical adapter's module doc for why the lexical side does not).
    lexical = ElasticsearchLexicalIndex(client=rows.client, index=cluster.es_index, shards=cluster.es_shards,
                                        writes=False)
    return rows, lexical


def _shared_folder_stores(settings: Settings) -> tuple[RowStore, LexicalIndex]:
    """Rows and lexical index of every process of a one-host cluster: SQLite (WAL: readers and
    writers from several processes; stale writes fenced by log position) and tantivy (its
    directory lock is held per commit, and a writer waits for it)."""
    from services.adapters.lexical.tantivy import TantivyLexicalIndex
    from services.adapters.row_store.sqlite import SqliteRowStore

    # Every tenant's rows: kept private (0700) as the data folder is.
    folder = private_data_folder(Path(settings.cluster.shared_dir or Path(settings.data_dir) / "shared"))
    rows = SqliteRowStore(folder / "rows.sqlite")
    try:
        return rows, TantivyLexicalIndex(folder / "lexical")
    except BaseException:
        rows.close()
        raise


@contextmanager
def open_memory(settings: Settings, role: str = "reader") -> Iterator[Memory]:
    """The memory of the settings' profile, closed (and its data folder released) on exit. In the
    embedded profile the process always owns the folder; `role` picks the cluster's side."""
    if settings.profile == "cluster":
        memory, lock = build_cluster_memory(settings, role=role, preload_queries=False)
    else:
        memory, lock = build_memory(settings, preload_queries=False)
    try:
        yield memory
    finally:
        memory.close()
        lock.release()


def indexer_feed(settings: Settings, memory: Memory, group: str, batch: int) -> EventFeed:
    """What an indexer process reads: a member of the Kafka consumer group in the cluster, the
    log itself in the embedded profile (one indexer per data folder)."""
    event_log = memory.event_log
    if settings.profile == "cluster":
        if not isinstance(event_log, Subscribable):
            raise Invalid(f"the cluster's event log ({type(event_log).__name__}) cannot be followed as a group")
        return event_log.subscribe(group, checkpoint=memory.checkpoint, max_poll_records=batch)  # per lane
    return LogFeed(event_log, memory.checkpoint())

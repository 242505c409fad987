"""The composition root: the only place that picks adapters for a profile and wires them.

Everything a process needs is built here: the memory (its adapters, the projection — the
projector where this process projects, a follower where it only reads — and the retriever),
the embedded server's indexer thread, the key store, the judge and the maintenance task runner.
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from services.adapters.data_folder import projections as projection_folders
from services.app.disk import DiskGuard, GuardedEventLog
from services.app.indexer import IndexerThread, LogFeed
from services.app.maintenance import MaintenanceService
from services.app.memory import Memory
from services.app.projection import ProjectionFollower, Projector
from services.app.retrieval import Retriever
from services.app.task_runner import InProcessRunner
from services.core.maintenance import Judge
from services.core.retrieval_config import PRESETS, RetrievalConfig
from services.errors import Invalid, OrgmemError
from services.ports import (
    Embedder,
    EventFeed,
    EventLog,
    KeyStore,
    LexicalIndex,
    RowStore,
    Subscribable,
    TaskRunner,
    VectorIndex,
)
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


def retrieval_config(settings: Settings) -> RetrievalConfig:
    r = settings.retrieval
    if r.preset not in PRESETS:
        raise Invalid(f"retrieval.preset: unknown preset {r.preset!r}; known: {', '.join(sorted(PRESETS))}")
    base = PRESETS[r.preset]
    weights = dict(base.weights)
    for leg, value in (("lex", r.weight_lex), ("tag", r.weight_tag), ("vec", r.weight_vec)):
        if value is not None:
            weights[leg] = value
    return base.with_overrides(
        weights=weights, candidates=r.candidates, k=r.k, conjunctive=r.conjunctive, selector=r.selector
    )


def judge_for(settings: Settings) -> Judge:
    """An OpenAI-compatible judge when `judge_base_url` and `judge_model` are set, else the rule judge."""
    from services.adapters.judge import OpenAICompatJudge, RuleJudge

    if settings.judge_base_url and settings.judge_model:
        return OpenAICompatJudge(settings.judge_base_url, settings.judge_model, settings.judge_api_key)
    if settings.judge_base_url or settings.judge_model:
        raise Invalid("judge_base_url, judge_model: set both to use a model judge, or neither for the rule judge")
    return RuleJudge()


_PRIVATE_CHECKED: set[Path] = set()


def private_data_folder(data_dir: Path) -> Path:
    """The data folder, private to orgmem's user: it holds every tenant's documents.

    The process umask gains 077 (never loses bits), so that every file and folder created from now
    on by any part of orgmem — SQLite and its -wal/-shm, tantivy and Qdrant Edge (which create
    files in native code), the lock, cursors and dead letters — is 0600/0700 without each writer
    having to ask. The folder is created 0700; one found with group or other bits (made by an
    earlier version) is tightened in place, its contents too, once per process, with a warning."""
    path = Path(data_dir)
    os.umask(os.umask(0o077) | 0o077)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = path.resolve()
    if key not in _PRIVATE_CHECKED:
        tightened = _tighten(path)
        if tightened:
            log.warning("data folder %s: removed group/other permissions from %d files and folders "
                        "(it holds every tenant's documents; orgmem keeps it 0700, its files 0600)", path, tightened)
        _PRIVATE_CHECKED.add(key)
    return path


def _tighten(root: Path) -> int:
    count = 0
    for folder, dirs, files in os.walk(root):  # does not follow symbolic links
        for name in (".", *dirs, *files):
            entry = Path(folder, name)
            try:
                st = entry.lstat()
                if not entry.is_symlink() and st.st_mode & 0o077:
                    entry.chmod(st.st_mode & 0o7700)
                    count += 1
            except OSError:  # vanished meanwhile, or not ours: nothing to tighten
                continue
    return count


class DataFolderLock:
    """One process at a time owns the projections of a data folder (the index writers are
    single-process). Appending to the log needs no lock: SQLite serialises writers."""

    def __init__(self, data_dir: Path):
        self.path = private_data_folder(Path(data_dir)) / "projections.lock"
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


class NoLock:
    """The cluster profile's stand-in for DataFolderLock: ownership of the projections is decided
    by the Kafka consumer group and fenced by the row store's checkpoint, not by a file lock."""

    def release(self) -> None:
        pass


def open_event_log(settings: Settings) -> EventLog:
    if settings.profile == "cluster":
        from services.adapters.event_log.kafka import KafkaEventLog

        return KafkaEventLog.from_settings(settings.cluster)
    from services.adapters.event_log.sqlite import SqliteEventLog

    folder = private_data_folder(Path(settings.data_dir))
    return GuardedEventLog(SqliteEventLog(folder / "log.sqlite"), disk_guard_for(settings))


def disk_guard_for(settings: Settings) -> DiskGuard | None:
    """The free-space floor of the data folder (embedded profile; the cluster's stores are remote)."""
    if settings.profile == "cluster":
        return None
    return DiskGuard(Path(settings.data_dir), settings.limits.min_free_bytes)


def assemble_memory(settings: Settings, event_log: EventLog, rows: RowStore, lexical: LexicalIndex,
                    vectors: VectorIndex, role: str = "indexer") -> Memory:
    """Wire a Memory from opened adapters. role "indexer": this process projects the log (the
    embedded server, `orgmem indexer`); role "reader": it never projects (the cluster's API and
    Celery workers) and follows the projections' checkpoint instead."""
    if role not in ("reader", "indexer"):
        raise Invalid(f"role: expected 'reader' or 'indexer', got {role!r}")
    embedder = embedder_for(settings.embedder)
    if role == "indexer":
        projection = Projector(event_log, rows, lexical, vectors, embedder, batch_size=settings.indexer_batch)
    else:
        projection = ProjectionFollower(event_log, rows, poll_s=settings.indexer_poll_s)
    # An indexer process of the cluster answers no queries: it needs no second copy of the model.
    answers_queries = role == "reader" or settings.profile == "embedded"
    query_embedder = embedder_for(settings.embedder, "query") if answers_queries else embedder
    retriever = Retriever(rows, lexical, vectors, query_embedder)
    return Memory(event_log, rows, lexical, vectors, embedder, projection, retriever, retrieval_config(settings))


def embedded_adapters(settings: Settings, folder: str = projection_folders.LIVE
                      ) -> tuple[EventLog, RowStore, LexicalIndex, VectorIndex]:
    """The embedded profile's adapters over the data folder (the caller holds its lock); `folder`
    names the projections' folder in it (`rebuild_aside` builds in another one)."""
    from services.adapters.lexical.tantivy import TantivyLexicalIndex
    from services.adapters.row_store.sqlite import SqliteRowStore
    from services.adapters.vector.qdrant_edge import QdrantEdgeVectorIndex

    projections = Path(settings.data_dir) / folder
    return (open_event_log(settings), SqliteRowStore(projections / "rows.sqlite"),
            TantivyLexicalIndex(projections / "lexical"),
            QdrantEdgeVectorIndex(projections / "vectors", embedder_for(settings.embedder).dim,
                                  settings.vector_search_ef))


def build_memory(settings: Settings) -> tuple[Memory, DataFolderLock | NoLock]:
    """Open the memory of a data folder (embedded profile) with its projections locked; in the
    cluster profile, the memory of a process that reads the projections (see build_cluster_memory)."""
    if settings.profile == "cluster":
        return build_cluster_memory(settings, role="reader")
    if settings.profile != "embedded":
        raise Invalid(f"profile: {settings.profile!r} is unknown; use 'embedded' or 'cluster'")
    lock = DataFolderLock(Path(settings.data_dir))
    try:
        projection_folders.recover(Path(settings.data_dir))
        missing = projection_folders.missing_before_open(Path(settings.data_dir))
        memory = assemble_memory(settings, *embedded_adapters(settings))
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


def build_cluster_memory(settings: Settings, role: str = "reader") -> tuple[Memory, NoLock]:
    """The cluster profile: Kafka log, Elasticsearch row store and lexical index (one ES index),
    Qdrant server vectors. Every part is named by `settings.cluster`."""
    from qdrant_client import QdrantClient

    from services.adapters.event_log.kafka import KafkaEventLog
    from services.adapters.lexical.elasticsearch import ElasticsearchLexicalIndex
    from services.adapters.row_store.elasticsearch import ElasticsearchRowStore
    from services.adapters.vector.qdrant_server import QdrantServerVectorIndex

    cluster = settings.cluster
    missing = [name for name in ("kafka_bootstrap", "es_url", "qdrant_url") if not getattr(cluster, name)]
    if missing:
        raise Invalid("profile 'cluster' needs " + ", ".join(f"cluster.{m} (ORGMEM_CLUSTER__{m.upper()})"
                                                             for m in missing))
    opened: list = []
    try:
        event_log = KafkaEventLog.from_settings(cluster)
        opened.append(event_log)
        rows = ElasticsearchRowStore(cluster.es_url, cluster.es_index, shards=cluster.es_shards,
                                     replicas=cluster.es_replicas, writer=role == "indexer")
        opened.append(rows)
        # One ES index holds the rows and their lexical index; the row store writes it (see the
        # lexical adapter's module doc for why the lexical side does not).
        lexical = ElasticsearchLexicalIndex(client=rows.client, index=cluster.es_index, shards=cluster.es_shards,
                                            writes=False)
        vectors = QdrantServerVectorIndex(QdrantClient(url=cluster.qdrant_url, timeout=30), cluster.qdrant_collection,
                                          embedder_for(settings.embedder).dim, search_ef=settings.vector_search_ef)
        opened.append(vectors)
        return assemble_memory(settings, event_log, rows, lexical, vectors, role), NoLock()
    except BaseException:
        for part in reversed(opened):
            try:
                part.close()
            except Exception:
                log.exception("closing %s failed", type(part).__name__)
        raise


@contextmanager
def open_memory(settings: Settings, role: str = "reader") -> Iterator[Memory]:
    """The memory of the settings' profile, closed (and its data folder released) on exit. In the
    embedded profile the process always owns the folder; `role` picks the cluster's side."""
    if settings.profile == "cluster":
        memory, lock = build_cluster_memory(settings, role=role)
    else:
        memory, lock = build_memory(settings)
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
        return event_log.subscribe(group, checkpoint=memory.checkpoint, max_poll_records=batch)
    return LogFeed(event_log, memory.checkpoint())


def maintenance_for(settings: Settings, memory: Memory, indexer: IndexerThread | None = None,
                    owns_runs: bool = True) -> MaintenanceService:
    """The maintenance use cases with the settings' judge. owns_runs: this process is the one that
    runs maintenance for its memory, so a run the log shows running was interrupted: it is
    recorded as failed before the first listing or run."""
    return MaintenanceService(memory, judge_for(settings), indexer=indexer, owns_runs=owns_runs)


def _runner_kind(settings: Settings) -> str:
    return settings.task_runner or ("celery" if settings.profile == "cluster" else "in-process")


def task_runner_for(settings: Settings, service: MaintenanceService) -> TaskRunner:
    if _runner_kind(settings) == "celery":
        from services.adapters.task_runner.celery import CeleryTaskRunner

        return CeleryTaskRunner(settings.cluster.redis_url, service.tracker)
    return InProcessRunner(service)


@dataclass
class ServerParts:
    """What the HTTP server runs beside its memory."""

    indexer: IndexerThread
    keys: KeyStore | None  # when auth is on
    maintenance: MaintenanceService
    runner: TaskRunner
    disk: DiskGuard | None = None  # the data folder's free-space floor (embedded profile)

    def close(self) -> None:
        self.runner.close()
        self.maintenance.close()
        if self.keys is not None:
            self.keys.close()


def key_store_for(settings: Settings) -> KeyStore:
    from services.adapters.key_store.sqlite import SqliteKeyStore

    return SqliteKeyStore(settings.auth.keys_file or private_data_folder(Path(settings.data_dir)) / "keys.sqlite")


def server_parts(settings: Settings, memory: Memory) -> ServerParts:
    disk = disk_guard_for(settings)
    indexer = IndexerThread(memory.projection, settings.indexer_poll_s, disk=disk)
    # Where jobs run on Celery workers, those workers own the runs, not this process.
    runs_here = _runner_kind(settings) == "in-process"
    maintenance = maintenance_for(settings, memory, indexer, owns_runs=runs_here)
    keys = key_store_for(settings) if settings.auth.enabled else None
    return ServerParts(indexer, keys, maintenance, task_runner_for(settings, maintenance), disk)

"""The composition root: the only place that picks adapters for a profile and wires them.

Everything a process needs is built here: the memory (its adapters, the projection — the
projector where this process projects, a follower where it only reads — and the retriever),
the embedded server's indexer thread, the key store, the judge, the answers' chat model and the
maintenance task runner.

    cluster_rebuild  the cluster's projection generations and its rebuild beside the live one
    components   encoders (behind the vector cache), tracing, presets, the judge, key stores
    data_folder  the embedded data folder: private modes, its lock, the (guarded, sealed) log
    memory       a Memory of either profile; rebuilding aside; an indexer process's feed
    server       what a server runs beside its memory; backup, export and restore mechanics
"""

from services.bootstrap.cluster_rebuild import rebuild_cluster_beside
from services.bootstrap.components import (
    answer_model_for,
    cached_document_embedder,
    embedder_for,
    judge_for,
    key_store_for,
    retrieval_config,
    tracer_for,
    tracer_provider_for,
)
from services.bootstrap.data_folder import (
    DataFolderLock,
    NoLock,
    data_key_store_for,
    disk_guard_for,
    migrate_encrypt,
    open_event_log,
    private_data_folder,
    sealed_log,
)
from services.bootstrap.memory import (
    assemble_memory,
    build_cluster_memory,
    build_memory,
    embedded_adapters,
    indexer_feed,
    open_memory,
    rebuild_aside,
)
from services.bootstrap.server import (
    ServerParts,
    backup_files,
    export_sink,
    maintenance_for,
    restore_data_folder,
    server_parts,
    task_runner_for,
)

__all__ = [
    "DataFolderLock",
    "NoLock",
    "ServerParts",
    "answer_model_for",
    "assemble_memory",
    "backup_files",
    "build_cluster_memory",
    "build_memory",
    "cached_document_embedder",
    "data_key_store_for",
    "disk_guard_for",
    "embedded_adapters",
    "embedder_for",
    "export_sink",
    "indexer_feed",
    "judge_for",
    "key_store_for",
    "maintenance_for",
    "migrate_encrypt",
    "open_event_log",
    "open_memory",
    "private_data_folder",
    "rebuild_aside",
    "rebuild_cluster_beside",
    "restore_data_folder",
    "retrieval_config",
    "sealed_log",
    "server_parts",
    "task_runner_for",
    "tracer_for",
    "tracer_provider_for",
]

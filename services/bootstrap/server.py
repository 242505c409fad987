"""What a server process runs beside its memory: the indexer thread, maintenance and its task
runner, the key store, projection holds; and the backup, export and restore mechanics."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from services.app.backup import ProjectionHolds
from services.app.disk import DiskGuard
from services.app.indexer import IndexerThread
from services.app.maintenance import MaintenanceService
from services.app.memory import Memory
from services.app.task_runner import InProcessRunner
from services.app.vector_graph import VectorGraphKeeper
from services.bootstrap.components import answer_model_for, judge_for, key_store_for, tracer_for
from services.bootstrap.data_folder import DataFolderLock, disk_guard_for
from services.bootstrap.memory import open_memory
from services.errors import Invalid
from services.ports import (
    ChatModel,
    KeyStore,
    TaskRunner,
)
from services.settings import Settings


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
    tracer: object | None = None  # an OpenTelemetry tracer when tracing is on
    holds: ProjectionHolds | None = None  # a backup holds the projector between batches (embedded)
    vector_graph: VectorGraphKeeper | None = None  # seals the vector graph live (embedded)
    answerer: ChatModel | None = None  # POST /v1/answer's model, when answer_base_url and answer_model are set

    def close(self) -> None:
        if (close_answerer := getattr(self.answerer, "close", None)) is not None:
            close_answerer()
        if self.vector_graph is not None:
            self.vector_graph.stop()
        if self.holds is not None:
            self.holds.close()
        self.runner.close()
        self.maintenance.close()
        if self.keys is not None:
            self.keys.close()


def server_parts(settings: Settings, memory: Memory) -> ServerParts:
    disk = disk_guard_for(settings)
    answerer = answer_model_for(settings)  # first: a half-configured endpoint stops the start before anything runs
    indexer = IndexerThread(memory.projection, settings.indexer_poll_s, disk=disk)
    # Where jobs run on Celery workers, those workers own the runs, not this process.
    runs_here = _runner_kind(settings) == "in-process"
    maintenance = maintenance_for(settings, memory, indexer, owns_runs=runs_here)
    keys = key_store_for(settings) if settings.auth.enabled else None
    holds = (ProjectionHolds(memory.projection, memory.event_log, Path(settings.data_dir), memory.vector_builds_held)
             if settings.profile == "embedded" else None)
    vector_graph = None
    if settings.profile == "embedded":
        vector_graph = VectorGraphKeeper(memory, settings.vector_seal_check_s, disk=disk)
        vector_graph.start()
    return ServerParts(indexer, keys, maintenance, task_runner_for(settings, maintenance), disk,
                       tracer_for(settings), holds, vector_graph, answerer)


def backup_files():
    """The embedded data folder's backup mechanics (what services/app/backup.py calls BackupFiles)."""
    from services.adapters.data_folder import backup

    return backup


def export_sink(fmt: str, path: Path, metadata: dict | None = None):
    """An export file of `fmt` ("jsonl" or "parquet") at `path`, written aside and renamed when whole."""
    from services.adapters.data_folder.export_files import JsonlFile, ParquetFile
    from services.app.export import jsonl_line

    if fmt == "jsonl":
        return JsonlFile(path, jsonl_line)
    if fmt == "parquet":
        return ParquetFile(path, metadata)
    raise Invalid(f"format: expected 'jsonl' or 'parquet', got {fmt!r}")


def restore_data_folder(settings: Settings, backup: Path, replace: bool, progress=None):
    """Restore a backup as the settings' data folder (services/app/backup.py's restore_backup)."""
    from services.app.backup import restore_backup

    def opened(data: Path):
        return open_memory(settings.model_copy(update={"data_dir": Path(data)}))

    return restore_backup(backup, Path(settings.data_dir), backup_files(), replace=replace,
                          lock_folder=DataFolderLock, open_memory=opened, progress=progress)

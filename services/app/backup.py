"""Backup and restore of an embedded data folder, online or offline.

What is consistent: the projections (row store with its checkpoint, lexical index, vector index)
are copied while the projector is held between two batches, so all three stand at one checkpoint
C; the log is copied after them, at a head H >= C (it only grows, and restore projects C..H as
any start does); connector state (cursors, dead letters) and API keys before the log, so that a
cursor never runs ahead of the copied log (an item read again is known by its source id); the data
keys after the log, so that every event the copy holds has its key (a key destroyed meanwhile
leaves its tombstone, and erasure wins). The server holds its projector
for the copy of the projections only (`ProjectionHolds`, `POST /v1/admin/projection-holds`);
queries and ingests go on meanwhile. Offline, the data folder lock is the hold.

The folder is built as `<name>.partial` and renamed once its manifest is written: a backup that
stopped half way is never found under its name, and restore refuses a folder without a manifest.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from schemas.backup import MAX_HOLD_S
from services.app.audit import HOST_WIDE, record_admin_action
from services.errors import Conflict, Invalid, NotFound, NotReady, OrgmemError
from services.ports import EventLog

log = logging.getLogger(__name__)

# How long a hold may wait for the batch in progress to finish before it gives up.
HOLD_WAIT_S = 120.0

Progress = Callable[[str], None]


@dataclass
class Hold:
    """The projector of a data folder held between batches, at `checkpoint`."""

    hold_id: str
    checkpoint: int
    log_head: int
    expires_at: datetime
    data_dir: str = ""


class Holder(Protocol):
    """Who holds the projector for a backup: the running server (over its API) or, offline, the
    data folder lock. `release` says whether the hold lasted until then."""

    def hold(self) -> Hold: ...

    def release(self, hold: Hold) -> bool: ...


class BackupFiles(Protocol):
    """The data folder's file mechanics (services/adapters/data_folder/backup.py)."""

    PROJECTIONS: str
    LOG: str
    DATA_KEYS: str
    API_KEYS: str

    def plan(self, data_dir: Path) -> Any: ...

    def copy_files(self, data_dir: Path, rels, target: Path) -> list[dict]: ...

    def checkpoint_of(self, rows_file: Path) -> int: ...

    def log_head_of(self, log_file: Path) -> int: ...

    def write_manifest(self, folder: Path, entries: list[dict], details: dict) -> dict: ...

    def publish(self, partial: Path, final: Path) -> None: ...

    def read_manifest(self, backup: Path) -> dict: ...

    def copy_verified(self, backup: Path, manifest: dict, target: Path, progress=None) -> None: ...

    def tombstones_of(self, data_keys: Path) -> list: ...

    def apply_tombstones(self, data_keys: Path, tombstones) -> int: ...

    def revocations_of(self, api_keys: Path) -> list: ...

    def apply_revocations(self, api_keys: Path, revocations) -> int: ...


# --- the server's side: holding its projector ----------------------------------------------------

@dataclass
class _HoldState:
    hold: Hold
    released: threading.Event = field(default_factory=threading.Event)
    entered: threading.Event = field(default_factory=threading.Event)
    expired: bool = False
    failure: BaseException | None = None


class ProjectionHolds:
    """At most one hold of this process's projector at a time, each for at most MAX_HOLD_S seconds:
    a hold that is not released by then lapses by itself (a backup that died cannot stop indexing),
    and its backup is refused when it asks to release."""

    def __init__(self, projection, event_log: EventLog, data_dir: Path | None = None,
                 builds_held: Callable[[], AbstractContextManager[None]] = nullcontext):
        # builds_held: the vector index's own file changes (graph builds swap shards) wait too.
        self._projection, self._log, self._builds_held = projection, event_log, builds_held
        self._data_dir = str(Path(data_dir).resolve()) if data_dir is not None else ""
        self._lock = threading.Lock()
        self._current: _HoldState | None = None

    def hold(self, seconds: float, actor: str, tenant: str) -> Hold:
        paused = getattr(self._projection, "paused", None)
        if paused is None:
            raise Invalid("this process does not project the log, so it has no projector to hold "
                          "(cluster profile: see docs/backup.md)")
        if not 0 < seconds <= MAX_HOLD_S:
            raise Invalid(f"seconds: expected more than 0 and at most {MAX_HOLD_S}, got {seconds:g}")
        with self._lock:
            if self._current is not None and not self._current.released.is_set():
                raise Conflict(f"the projector is already held (hold {self._current.hold.hold_id}, until "
                               f"{self._current.hold.expires_at.isoformat()}): one backup at a time")
            state = _HoldState(Hold(uuid.uuid4().hex, 0, 0, datetime.now(UTC), self._data_dir))
            self._current = state
        threading.Thread(target=self._run, args=(state, paused, seconds), name="orgmem-hold", daemon=True).start()
        if not state.entered.wait(HOLD_WAIT_S):
            state.released.set()  # the thread lets go at once when it gets in
            raise NotReady(f"the projector did not reach the end of its batch within {HOLD_WAIT_S:g} s")
        if state.failure is not None:
            raise state.failure
        try:
            record_admin_action(self._log, tenant, "projections.held", actor,
                                {"hold_id": state.hold.hold_id, "seconds": seconds, "checkpoint": state.hold.checkpoint})
        except BaseException:  # no unaudited hold
            state.released.set()
            raise
        return state.hold

    def _run(self, state: _HoldState, paused, seconds: float) -> None:
        try:
            with paused() as checkpoint, self._builds_held():
                state.hold.checkpoint = checkpoint
                state.hold.log_head = self._log.head()
                state.hold.expires_at = datetime.now(UTC) + timedelta(seconds=seconds)
                state.entered.set()
                state.expired = not state.released.wait(seconds)
                if state.expired:
                    log.warning("projection hold %s lapsed after %g s without a release", state.hold.hold_id, seconds)
        except BaseException as exc:  # reported to the caller that waits on `entered`
            state.failure = exc
            state.entered.set()
        finally:
            state.released.set()

    def release(self, hold_id: str) -> bool:
        """Let the projector go on; True when the hold lasted until now."""
        with self._lock:
            state = self._current
            if state is None or state.hold.hold_id != hold_id:
                raise NotFound(f"hold {hold_id} not found")
            held = not state.released.is_set()
            state.released.set()
        return held

    def close(self) -> None:
        with self._lock:
            if self._current is not None:
                self._current.released.set()


# --- backup --------------------------------------------------------------------------------------

def take_backup(data_dir: Path, dest: Path, holder: Holder, files: BackupFiles, details: dict,
                progress: Progress | None = None, record: Callable[[Path, dict], None] | None = None) -> dict:
    """Copy the data folder into `dest` (which must not exist) and return its manifest.
    `record(dest, manifest)` puts the backup in the audit trail once it is whole; should that
    fail, the backup is removed again: no copy of the data without its record."""
    data, dest = Path(data_dir), Path(dest).absolute()
    say = progress or (lambda _message: None)
    if dest.exists():
        raise Conflict(f"backup: {dest} exists; name a new folder")
    if dest == data.absolute() or data.absolute() in dest.parents:
        raise Invalid(f"backup: {dest} lies inside the data folder {data}; put backups elsewhere")
    partial = dest.with_name(dest.name + ".partial")
    try:
        partial.mkdir(mode=0o700, parents=False)
    except FileExistsError:
        raise Conflict(f"backup: {partial} exists: another backup is being written there, or one stopped "
                       "half way (remove it if none is running)") from None
    except FileNotFoundError:
        raise Invalid(f"backup: the folder {dest.parent} does not exist") from None
    started = time.monotonic()
    try:
        files.plan(data)  # refuses a folder that is no data folder before anything is held
        say("holding the projector")
        hold = holder.hold()
        held_from = time.monotonic()
        try:
            plan = files.plan(data)  # listed under the hold: the batch before may have added segments
            entries = files.copy_files(data, plan.projections, partial)
        finally:
            held = holder.release(hold)
            held_s = time.monotonic() - held_from
        if not held:
            raise OrgmemError("backup: the projector hold lapsed before the projections were copied; "
                              "nothing was kept (allow a longer hold)")
        copied = files.checkpoint_of(partial / files.PROJECTIONS / "rows.sqlite")
        if copied != hold.checkpoint:
            raise OrgmemError(f"backup: the copied row store stands at {copied}, the hold at {hold.checkpoint}: "
                              "the projector that was held does not write this data folder")
        say(f"{len(entries)} projection files copied at checkpoint {copied}; copying the log and the key stores")
        for rels in (plan.state, plan.log, plan.data_keys):  # in this order: see the module doc
            entries += files.copy_files(data, rels, partial)
        log_head = files.log_head_of(partial / files.LOG)
        manifest = files.write_manifest(partial, entries, {
            **details, "created_at": datetime.now(UTC).isoformat(), "checkpoint": copied, "log_head": log_head,
            "held_seconds": round(held_s, 3), "seconds": round(time.monotonic() - started, 3)})
        files.publish(partial, dest)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if record is not None:
        try:
            record(dest, manifest)
        except BaseException:
            shutil.rmtree(dest, ignore_errors=True)
            raise
    say(f"backup complete: {len(entries)} files, checkpoint {copied}, log head {log_head}")
    return manifest


class LockHolder:
    """Offline: the data folder lock keeps every other process from projecting while it is held."""

    def __init__(self, data_dir: Path, lock_folder: Callable[[Path], Any], files: BackupFiles):
        self._data, self._lock_folder, self._files = Path(data_dir), lock_folder, files
        self._lock = None

    def hold(self) -> Hold:
        self._lock = self._lock_folder(self._data)
        rows = self._data / self._files.PROJECTIONS / "rows.sqlite"
        return Hold("offline", self._files.checkpoint_of(rows), self._files.log_head_of(self._data / self._files.LOG),
                    datetime.now(UTC), str(self._data.resolve()))

    def release(self, hold: Hold) -> bool:
        if self._lock is not None:
            self._lock.release()
            self._lock = None
        return True


# --- restore -------------------------------------------------------------------------------------

@dataclass
class RestoreReport:
    manifest: dict
    data_dir: str
    replaced: str | None = None  # where the folder that was there went
    keys_destroyed: int = 0
    revocations: int = 0
    purged: int | None = None  # None: no erasure support in this orgmem
    indexed_events: int = 0


def _non_empty(folder: Path) -> bool:
    return folder.exists() and (not folder.is_dir() or any(folder.iterdir()))


def restore_backup(backup: Path, data_dir: Path, files: BackupFiles, *, replace: bool,
                   lock_folder: Callable[[Path], Any], open_memory: Callable[[Path], AbstractContextManager],
                   progress: Progress | None = None, actor: str = "system") -> RestoreReport:
    """Bring a backup back as `data_dir`: verify every file against the manifest while copying it
    into a folder beside the target, carry over the erasures (data-key tombstones) and key
    revocations of the folder being replaced, swap it in (the old folder is kept aside), then open
    it: record the restore in its log (so the record is in the folder that is now live, not the
    one put aside), project the log past the checkpoint and purge every row whose data key is destroyed."""
    backup, data = Path(backup), Path(data_dir).absolute()
    say = progress or (lambda _message: None)
    manifest = files.read_manifest(backup)
    if _non_empty(data) and not replace:
        raise Conflict(f"restore: {data} is not empty; pass --replace to put it aside and restore in its place")
    staging = data.with_name(data.name + ".restoring")
    shutil.rmtree(staging, ignore_errors=True)  # left by a restore that stopped: never a live folder
    staging.mkdir(mode=0o700, parents=True)
    report = RestoreReport(manifest, str(data))
    held = None
    try:
        files.copy_verified(backup, manifest, staging)
        say(f"{len(manifest['files'])} files copied, each matching the manifest's size and sha256")
        sources = [staging / files.DATA_KEYS] + ([data / files.DATA_KEYS] if data.is_dir() else [])
        tombstones = {t[0]: t for source in sources for t in files.tombstones_of(source)}
        report.keys_destroyed = files.apply_tombstones(staging / files.DATA_KEYS, tombstones.values())
        if data.is_dir():
            report.revocations = files.apply_revocations(staging / files.API_KEYS,
                                                         files.revocations_of(data / files.API_KEYS))
        if _non_empty(data):
            held = lock_folder(data)  # refuses while a server runs on it
            aside = data.with_name(f"{data.name}.replaced-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S%f')}")
            data.rename(aside)
            report.replaced = str(aside)
        elif data.exists():
            data.rmdir()
        staging.rename(data)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        if held is not None:
            held.release()
    say(f"restored into {data}" + (f"; the folder that was there is now {report.replaced}" if report.replaced else ""))
    try:
        with open_memory(data) as memory:
            record_admin_action(memory.event_log, HOST_WIDE, "restore", actor, restore_details(backup, report, replace))
            report.indexed_events = memory.catch_up().events
            purge = _purge_erased()
            if purge is not None:  # rows, and the dead letters an erasure had dropped
                report.purged = purge(memory, data_dir=data)
    except OrgmemError as exc:
        raise OrgmemError(f"restore: the backup is in place at {data}, but opening it failed ({exc}); until it "
                          "opens, erased rows of older backups are not purged from it") from exc
    return report


def _purge_erased():
    """The erasure use case's purge, where this orgmem has one (services/app/erasure.py)."""
    if importlib.util.find_spec("services.app.erasure") is None:
        return None
    return getattr(importlib.import_module("services.app.erasure"), "purge_erased", None)


def backup_details(version: str, online: bool) -> dict:
    return {"orgmem_version": version, "profile": "embedded", "online": online}


# --- the audit records (docs/audit.md): where, what and how much, never what the files hold -------

def record_backup(event_log: EventLog, actor: str, dest: Path, manifest: dict) -> int:
    """A backup of the whole data folder (every tenant) in the source folder's audit trail."""
    return record_admin_action(event_log, HOST_WIDE, "backup", actor, {
        "dir": str(Path(dest).absolute()), "online": manifest.get("online"), "files": len(manifest["files"]),
        "bytes": sum(f["size"] for f in manifest["files"]), "checkpoint": manifest["checkpoint"],
        "log_head": manifest["log_head"], "created_at": manifest.get("created_at")})


def restore_details(backup: Path, report: RestoreReport, replace: bool) -> dict:
    manifest = report.manifest
    return {"backup": str(Path(backup).absolute()), "backup_created_at": manifest.get("created_at"),
            "checkpoint": manifest["checkpoint"], "log_head": manifest["log_head"], "data_dir": report.data_dir,
            "replace": replace, "replaced": report.replaced, "keys_destroyed": report.keys_destroyed,
            "revocations": report.revocations}

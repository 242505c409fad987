"""The embedded profile's data folder: private modes, the lock, and the event log in it (guarded
against a full disk, sealed for erasure)."""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

from services.app.disk import DiskGuard, GuardedEventLog
from services.app.sealing import Sealer, check_sealed, sealing
from services.errors import Invalid, OrgmemError
from services.ports import (
    DataKeyStore,
    EventLog,
)
from services.settings import Settings

log = logging.getLogger(__name__)

# Data folders already checked by this process (the walk over every file runs once per folder).
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


def open_event_log(settings: Settings, raw: bool = False) -> EventLog:
    """The profile's log, sealing documents on the way in and opening them on the way out
    (services/app/sealing.py) unless encryption is off; `raw`: the log as stored (migration)."""
    if settings.profile == "cluster":
        from services.adapters.event_log.kafka import KafkaEventLog

        event_log = KafkaEventLog.from_settings(settings.cluster)
    else:
        from services.adapters.event_log.sqlite import SqliteEventLog

        folder = private_data_folder(Path(settings.data_dir))
        inner = SqliteEventLog(folder / "log.sqlite")
        # The floor is checked before sealing: a key written on a full disk would fail first.
        return GuardedEventLog(inner if raw else sealed_log(settings, inner), disk_guard_for(settings))
    return event_log if raw else sealed_log(settings, event_log)


def migrate_encrypt(settings: Settings) -> int:
    """Seal, in place and once, every plaintext document of an embedded data folder's log
    (written before encryption); resumable. Row ids and projections stay as they are. Returns
    how many events were converted."""
    if settings.profile != "embedded":
        raise Invalid("migrate encrypt converts an embedded data folder's SQLite log; a Kafka log cannot be "
                      "rewritten in place (export the rows and ingest them into a fresh cluster)")
    from services.adapters.event_log.sqlite import SqliteEventLog
    from services.app.sealing import MARKER, is_plaintext_document

    lock = DataFolderLock(Path(settings.data_dir))
    try:
        keys = data_key_store_for(settings)
        event_log = SqliteEventLog(private_data_folder(Path(settings.data_dir)) / "log.sqlite")
        try:
            sealer = Sealer(keys)
            converted = event_log.rewrite_bodies(
                lambda event: sealer.seal([event])[0] if is_plaintext_document(event) else None)
            keys.set_marker(MARKER, "1")
        finally:
            event_log.close()
            keys.close()
    finally:
        lock.release()
    return converted


def data_key_store_for(settings: Settings) -> DataKeyStore:
    """The data keys (crypto-shredding): `<data_dir>/data-keys.sqlite`, or Redis in the cluster."""
    path = data_keys_file(settings)
    if path is None:
        from services.adapters.key_store.data_keys_redis import RedisDataKeyStore

        return RedisDataKeyStore(settings.erasure.redis_url or settings.cluster.redis_url)
    from services.adapters.key_store.data_keys_sqlite import SqliteDataKeyStore

    if settings.erasure.data_keys_file is None:
        private_data_folder(Path(settings.data_dir))  # the default file sits in the private folder
    return SqliteDataKeyStore(path)


def data_keys_file(settings: Settings) -> Path | None:
    """Where the data keys live when they are a file (None: in Redis)."""
    kind = settings.erasure.key_store or ("redis" if settings.profile == "cluster" else "sqlite")
    if kind == "redis":
        return None
    return Path(settings.erasure.data_keys_file or Path(settings.data_dir) / "data-keys.sqlite")


def sealed_log(settings: Settings, event_log: EventLog) -> EventLog:
    """`event_log` behind the sealing wrapper; refused where it still holds plaintext documents
    (`orgmem migrate encrypt`), or where encryption is off for a log that was sealed."""
    keys_file = data_keys_file(settings)
    if not settings.erasure.encrypt:
        if settings.profile == "embedded" and keys_file is not None and keys_file.exists():
            event_log.close()
            raise Invalid(f"erasure.encrypt: this data folder's log is encrypted ({keys_file} exists); "
                          "encryption cannot be turned off for it")
        return event_log
    new_keys_file = keys_file is not None and not keys_file.exists()
    keys = None
    try:
        keys = data_key_store_for(settings)
        wrapped = sealing(event_log, Sealer(keys))
        check_sealed(wrapped)
    except BaseException:
        event_log.close()
        if new_keys_file and keys is not None:
            # Refused before anything was sealed: the key file this open made goes again, or it
            # would mark a plaintext log as encrypted and refuse the error's own remedy
            # (ORGMEM_ERASURE__ENCRYPT=false).
            keys.close()
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{keys_file}{suffix}").unlink(missing_ok=True)
        raise
    return wrapped


def disk_guard_for(settings: Settings) -> DiskGuard | None:
    """The free-space floor of the data folder (embedded profile; the cluster's stores are remote)."""
    if settings.profile == "cluster":
        return None
    return DiskGuard(Path(settings.data_dir), settings.limits.min_free_bytes)

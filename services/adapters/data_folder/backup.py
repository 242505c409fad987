"""The embedded data folder's backup mechanics: which files there are, how each is copied, the
manifest that proves a copy whole, and the restore-time merges (data-key tombstones, key revocations).

Every SQLite file is copied with SQLite's online backup API in one step (one read transaction:
a consistent image, while other processes keep writing in WAL mode) and written out as one
self-contained file (rollback journal, no -wal beside it); SQLite files are opened read-write
(never created) even to be read, since a read-only connection to a WAL database that no other
process has open leaves -wal and -shm files behind. Other files (the tantivy and Qdrant
Edge folders, connector cursors and dead letters) are copied byte for byte; the caller makes sure
nothing writes them meanwhile. Every file's size and sha256 go into `manifest.json`, written last;
the folder is built under `<name>.partial` and renamed into place only when whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from services.errors import Invalid, OrgmemError

MANIFEST = "manifest.json"
FORMAT = "orgmem-backup"
FORMAT_VERSION = 1
PROJECTIONS = "projections"
LOG = "log.sqlite"
DATA_KEYS = "data-keys.sqlite"
API_KEYS = "keys.sqlite"
# Not part of a data folder's state: the lock, SQLite's sidecars (the backup API reads through
# them), folders a rebuild or a vector-id copy leaves only while it runs, connector inputs
# (`inbox/`: the operator's own files, read by connectors, never written by orgmem) and the vector
# cache (`cache/`: derived from texts and refilled on demand; left out, a backup holds one copy
# fewer of what an erasure must reach).
_SKIP_NAMES = {"projections.lock"}
_SKIP_SUFFIXES = ("-wal", "-shm", "-journal", ".partial")
_SKIP_DIRS = {"projections.rebuild", "projections.old", "inbox", "cache"}
_SKIP_DIR_SUFFIXES = (".carrying", ".retired")
_CHUNK = 1 << 16  # small enough that the holes of a preallocated file stay holes


@dataclass
class FolderPlan:
    """The files of a data folder, in the order a backup copies them (relative POSIX paths)."""

    projections: list[str] = field(default_factory=list)  # copied while the projector is held
    # Before the log: connector cursors never run ahead of the copied log (an item read again is
    # recognised by its source id), and API keys.
    state: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    data_keys: list[str] = field(default_factory=list)  # after the log: every copied event has its key


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def private_files() -> None:
    """Backups and restored folders hold every tenant's documents: what this process creates from
    now on is 0600/0700 (the umask gains 077, as for the data folder itself)."""
    os.umask(os.umask(0o077) | 0o077)


def is_sqlite(path: Path) -> bool:
    """By name, not by reading it: opening and closing a live database outside SQLite would drop
    this process's locks on it (see services/adapters/sqlite_common.py). Every SQLite file orgmem
    writes ends in .sqlite."""
    return Path(path).suffix == ".sqlite"


def plan(data_dir: Path) -> FolderPlan:
    data = Path(data_dir)
    if not (data / LOG).is_file():
        raise Invalid(f"data: {data} holds no event log ({LOG}); nothing to back up")
    out = FolderPlan()
    for folder, dirs, files in os.walk(data):  # symbolic links are neither followed nor copied
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if not (here == data and d in _SKIP_DIRS)
                         and not d.endswith(_SKIP_DIR_SUFFIXES) and not (here / d).is_symlink())
        for name in sorted(files):
            path = here / name
            if name in _SKIP_NAMES or name.endswith(_SKIP_SUFFIXES) or not path.is_file() or path.is_symlink():
                continue
            rel = path.relative_to(data).as_posix()
            if rel == LOG:
                out.log.append(rel)
            elif rel == DATA_KEYS:
                out.data_keys.append(rel)
            elif rel.startswith(PROJECTIONS + "/"):
                out.projections.append(rel)
            else:
                out.state.append(rel)
    return out


def copy_files(data_dir: Path, rels: Iterable[str], target: Path) -> list[dict]:
    """Copy each file into `target` at the same relative path; SQLite files by the backup API."""
    private_files()
    entries = []
    for rel in rels:
        source, dest = Path(data_dir) / rel, Path(target) / rel
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        kind = "sqlite" if is_sqlite(source) else "file"
        try:
            if kind == "sqlite":
                _backup_sqlite(source, dest)
                size, digest = dest.stat().st_size, sha256_of(dest)
            else:
                size, digest = copy_sparse(source, dest)
                if rel.endswith(".jsonl") and _drop_cut_line(dest):
                    size, digest = dest.stat().st_size, sha256_of(dest)
        except FileNotFoundError:  # removed since the plan (a segment merged away): not state any more
            continue
        except (OSError, sqlite3.Error) as exc:
            raise OrgmemError(f"backup: copying {rel} failed: {type(exc).__name__}: {exc}") from exc
        entries.append({"path": rel, "kind": kind, "size": size, "sha256": digest})
    return entries


_ZEROS = bytes(_CHUNK)


def copy_sparse(source: Path, dest: Path) -> tuple[int, str]:
    """Copy a file, keeping its holes (Qdrant Edge preallocates tens of MiB per segment and
    writes a few KiB of them); return the size and sha256 of what was copied."""
    digest, size = hashlib.sha256(), 0
    with open(source, "rb") as src, open(dest, "wb") as out:
        while chunk := src.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
            if chunk == _ZEROS[: len(chunk)]:
                out.seek(len(chunk), os.SEEK_CUR)
            else:
                out.write(chunk)
        out.truncate(size)
    return size, digest.hexdigest()


def _drop_cut_line(path: Path) -> bool:
    """An append-only JSONL file (dead letters) copied while a line was being written ends in
    part of it: keep the whole lines only. Returns whether anything was cut."""
    with open(path, "r+b") as handle:
        end = handle.seek(0, os.SEEK_END)
        position = end
        while position > 0:
            start = max(0, position - _CHUNK)
            handle.seek(start)
            newline = handle.read(position - start).rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            position = start
        else:
            keep = 0
        if keep == end:
            return False
        handle.truncate(keep)
        return True


def _backup_sqlite(source: Path, dest: Path) -> None:
    src = sqlite3.connect(f"file:{source}?mode=rw", uri=True, timeout=30.0)
    try:
        out = sqlite3.connect(str(dest))
        try:
            src.backup(out)  # pages=-1: the whole database in one step, one consistent read
            out.execute("PRAGMA journal_mode=DELETE")  # one file; orgmem turns WAL on again when it opens it
        finally:
            out.close()
    finally:
        src.close()


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_of(rows_file: Path) -> int:
    """The projection checkpoint a copied row store holds (0 for none)."""
    return _scalar(rows_file, "SELECT value FROM meta WHERE key = 'applied_position'")


def log_head_of(log_file: Path) -> int:
    return _scalar(log_file, "SELECT MAX(position) FROM events")


def _scalar(path: Path, sql: str) -> int:
    if not Path(path).is_file():
        return 0
    conn = sqlite3.connect(f"file:{path}?mode=rw", uri=True)
    try:
        found = conn.execute(sql).fetchone()
    except sqlite3.OperationalError:  # no such table: an empty store
        return 0
    finally:
        conn.close()
    return int(found[0]) if found and found[0] is not None else 0


def write_manifest(folder: Path, entries: list[dict], details: dict) -> dict:
    """The manifest of the copied files (each entry with its size and sha256), on disk with every
    file and folder of the copy before return (synced here, not while copying: the projector is
    held only for the copy itself)."""
    for entry in entries:
        _fsync(Path(folder) / entry["path"])
    manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, **details, "files": entries}
    target = Path(folder) / MANIFEST
    target.write_text(json.dumps(manifest, indent=1) + "\n")
    _fsync(target)
    for each in sorted({(Path(folder) / e["path"]).parent for e in entries} | {Path(folder)}, reverse=True):
        _fsync(each)
    return manifest


def publish(partial: Path, final: Path) -> None:
    """The whole backup appears at once under its name (one rename), or not at all."""
    partial.rename(final)
    _fsync(final.parent)


def _safe_rel(rel: object) -> str:
    path = PurePosixPath(str(rel))
    if not isinstance(rel, str) or not rel or path.is_absolute() or ".." in path.parts or rel != path.as_posix():
        raise Invalid(f"backup manifest: file path {rel!r} is not a plain relative path")
    return rel


def read_manifest(backup: Path) -> dict:
    target = Path(backup) / MANIFEST
    if not target.is_file():
        raise Invalid(f"backup: {backup} has no {MANIFEST}: not a complete orgmem backup")
    try:
        manifest = json.loads(target.read_text())
    except (OSError, ValueError) as exc:
        raise Invalid(f"backup: {target} cannot be read: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise Invalid(f"backup: {target} is not an orgmem backup manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise Invalid(f"backup: format version {manifest.get('format_version')!r}; this orgmem reads {FORMAT_VERSION}")
    files = manifest.get("files")
    if not isinstance(files, list) or not all(isinstance(f, dict) for f in files):
        raise Invalid(f"backup: {target} lists no files")
    for entry in files:
        _safe_rel(entry.get("path"))
    return manifest


def copy_verified(backup: Path, manifest: dict, target: Path, progress: Callable[[str], None] | None = None) -> None:
    """Copy every file the manifest lists into `target`, hashing what was written: a file whose
    size or sha256 differs from the manifest's is refused (Invalid) before anything is used."""
    private_files()
    for entry in manifest["files"]:
        rel = _safe_rel(entry["path"])
        source, dest = Path(backup) / rel, Path(target) / rel
        if not source.is_file() or source.is_symlink():
            raise Invalid(f"backup: {rel} is listed in the manifest but missing from {backup}")
        dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        size, digest = copy_sparse(source, dest)
        _fsync(dest)
        if size != entry.get("size") or digest != entry.get("sha256"):
            raise Invalid(f"backup: {rel} does not match the manifest (size {size}, sha256 {digest}; "
                          f"expected {entry.get('size')}, {entry.get('sha256')}): the backup is damaged")
        if progress is not None:
            progress(rel)


_DATA_KEYS_SCHEMA = """
CREATE TABLE IF NOT EXISTS data_keys (key_id TEXT PRIMARY KEY, key BLOB NOT NULL, created_at TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS destroyed_keys (key_id TEXT PRIMARY KEY, destroyed_at TEXT NOT NULL, erasure_id TEXT NOT NULL);
"""


def tombstones_of(data_keys: Path) -> list[tuple[str, str, str]]:
    if not Path(data_keys).is_file():
        return []
    conn = sqlite3.connect(f"file:{data_keys}?mode=rw", uri=True)
    try:
        return conn.execute("SELECT key_id, destroyed_at, erasure_id FROM destroyed_keys").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def apply_tombstones(data_keys: Path, tombstones: Iterable[tuple[str, str, str]]) -> int:
    """Destroy in a restored data-key store every key that a tombstone names, record the tombstones,
    and rewrite the file (secure_delete, VACUUM) so that no freed page keeps a key. Returns how
    many keys this destroyed."""
    tombstones = list(tombstones)
    if not tombstones and not Path(data_keys).exists():
        return 0
    conn = sqlite3.connect(str(data_keys), isolation_level=None)
    try:
        conn.execute("PRAGMA secure_delete=ON")
        conn.executescript(_DATA_KEYS_SCHEMA)
        conn.execute("BEGIN IMMEDIATE")
        destroyed = 0
        for key_id, destroyed_at, erasure_id in tombstones:
            destroyed += conn.execute("DELETE FROM data_keys WHERE key_id = ?", (key_id,)).rowcount
            conn.execute("INSERT OR IGNORE INTO destroyed_keys(key_id, destroyed_at, erasure_id) VALUES (?,?,?)",
                         (key_id, destroyed_at, erasure_id))
        conn.execute("COMMIT")
        conn.execute("VACUUM")
        return destroyed
    finally:
        conn.close()


def revocations_of(api_keys: Path) -> list[tuple[str, str, str]]:
    if not Path(api_keys).is_file():
        return []
    conn = sqlite3.connect(f"file:{api_keys}?mode=rw", uri=True)
    try:
        return conn.execute("SELECT key_id, revoked_at, revoked_by FROM api_keys WHERE revoked_at IS NOT NULL").fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        conn.close()


def apply_revocations(api_keys: Path, revocations: Iterable[tuple[str, str, str]]) -> int:
    """A key revoked in the folder being replaced stays revoked in the restored one."""
    revocations = list(revocations)
    if not revocations or not Path(api_keys).is_file():
        return 0
    conn = sqlite3.connect(str(api_keys), isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        changed = sum(conn.execute("UPDATE api_keys SET revoked_at = ?, revoked_by = ? WHERE key_id = ? "
                                   "AND revoked_at IS NULL", (at, by, key_id)).rowcount
                      for key_id, at, by in revocations)
        conn.execute("COMMIT")
        return changed
    finally:
        conn.close()

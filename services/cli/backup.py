"""`orgmem export`, `orgmem backup` and `orgmem restore` (docs/backup.md).

`backup` copies the data folder itself, as its owner on this host. With `--server` it first asks
the running server to hold its projector (`POST /v1/admin/projection-holds`), so the projections
are copied at one checkpoint while the server keeps answering; without it, it takes the data
folder lock (no server may run) for the same copy.

Each is an audited act (docs/audit.md): an export in the log of the folder exported (with
`--server`, the server records it), a backup in the log of the folder copied, a restore in the
log of the folder restored, after the swap (the folder put aside keeps its own trail).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import httpx

from services.cli.common import settings_from
from services.cli.keys import _actor
from services.errors import OrgmemError


def _version() -> str:
    try:
        return version("orgmem")
    except PackageNotFoundError:
        return "unknown"


class _Throttled:
    """Progress on stderr at most once a second (and the last line always)."""

    def __init__(self, label: str):
        self.label, self._last = label, 0.0

    def __call__(self, count: int, final: bool = False) -> None:
        now = time.monotonic()
        if final or now - self._last >= 1.0:
            self._last = now
            print(f"  {self.label} {count} rows", file=sys.stderr)


def _client(args: argparse.Namespace) -> httpx.Client:
    token = args.key or os.environ.get("ORGMEM_API_KEY")
    if not token:
        raise OrgmemError("--server needs an admin key: --key TOKEN or ORGMEM_API_KEY")
    return httpx.Client(base_url=args.server.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=180)


def _checked(response: httpx.Response) -> dict:
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise OrgmemError(f"server answered {response.status_code}: {detail}")
    return response.json()


class ServerHolder:
    """The running server holds its projector over its API; the hold is checked to be on this folder."""

    def __init__(self, client: httpx.Client, data_dir: Path, seconds: int):
        self.client, self.data_dir, self.seconds = client, Path(data_dir).resolve(), seconds

    def hold(self):
        from services.app.backup import Hold

        try:
            body = _checked(self.client.post("/v1/admin/projection-holds", json={"seconds": self.seconds}))
        except httpx.HTTPError as exc:
            raise OrgmemError(f"backup: the server cannot be reached: {exc}") from exc
        hold = Hold(body["hold_id"], body["checkpoint"], body["log_head"],
                    datetime.fromisoformat(body["expires_at"]), body["data_dir"])
        if Path(hold.data_dir) != self.data_dir:
            self.release(hold)
            raise OrgmemError(f"backup: the server projects {hold.data_dir}, not {self.data_dir}; pass its --data")
        return hold

    def release(self, hold) -> bool:
        try:
            body = _checked(self.client.delete(f"/v1/admin/projection-holds/{hold.hold_id}"))
        except (httpx.HTTPError, OrgmemError) as exc:
            # The server died or restarted meanwhile: nothing says the copy was taken under the hold.
            print(f"orgmem: releasing the projector hold failed: {exc}", file=sys.stderr)
            return False
        return bool(body["held_throughout"])


def _recorder(settings, actor: str):
    """Puts a backup in the data folder's own audit trail (the log takes appends while a server runs)."""
    def record(dest: Path, manifest: dict) -> None:
        from services.app.backup import record_backup
        from services.bootstrap import open_event_log

        event_log = open_event_log(settings)
        try:
            record_backup(event_log, actor, dest, manifest)
        finally:
            event_log.close()
    return record


def cmd_backup(args: argparse.Namespace) -> int:
    from services.app.backup import LockHolder, backup_details, take_backup
    from services.bootstrap import DataFolderLock, backup_files

    settings = settings_from(args)
    data, files = Path(settings.data_dir), backup_files()
    record = _recorder(settings, _actor(args))
    if args.server:
        with _client(args) as client:
            manifest = take_backup(data, Path(args.dir), ServerHolder(client, data, args.hold_s), files,
                                   backup_details(_version(), online=True), progress=_say, record=record)
    else:
        def lock(folder: Path):
            try:
                return DataFolderLock(folder)
            except OrgmemError as exc:
                raise OrgmemError(f"{exc}; to back up a running server: orgmem backup DIR --data {folder} "
                                  "--server URL --key TOKEN") from None

        manifest = take_backup(data, Path(args.dir), LockHolder(data, lock, files), files,
                               backup_details(_version(), online=False), progress=_say, record=record)
    size = sum(f["size"] for f in manifest["files"])
    print(f"backup {args.dir}: {len(manifest['files'])} files, {size} bytes, checkpoint {manifest['checkpoint']}, "
          f"log head {manifest['log_head']}")
    return 0


def _say(message: str) -> None:
    print(f"  {message}", file=sys.stderr)


def cmd_restore(args: argparse.Namespace) -> int:
    from services.app.backup import restore_backup
    from services.bootstrap import DataFolderLock, backup_files, open_memory

    if not args.data:
        raise OrgmemError("restore: name the folder to restore into with --data DIR")
    settings = settings_from(args)

    def opened(data: Path):
        return open_memory(settings.model_copy(update={"data_dir": Path(data)}))

    # As services.bootstrap.restore_data_folder, with who restores for the record it leaves.
    report = restore_backup(Path(args.backup), Path(settings.data_dir), backup_files(), replace=args.replace,
                            lock_folder=DataFolderLock, open_memory=opened, progress=_say, actor=_actor(args))
    purged = "no erasure support" if report.purged is None else f"{report.purged} erased rows purged"
    print(f"restored {args.backup} into {report.data_dir} (checkpoint {report.manifest['checkpoint']}, log head "
          f"{report.manifest['log_head']}, {report.indexed_events} events projected since; {report.keys_destroyed} "
          f"data keys destroyed by later erasures, {report.revocations} key revocations carried over; {purged})"
          + (f"; the previous folder is {report.replaced}" if report.replaced else ""))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from services.app.audit import HOST_WIDE, record_admin_action
    from services.app.export import PAGE_ROWS, export_rows, record_from_json
    from services.bootstrap import export_sink, open_memory

    settings = settings_from(args)
    out = Path(args.out)
    progress = _Throttled("exported")
    if args.server and args.tenant:
        raise OrgmemError("export: with --server the export is of the key's tenant; --tenant is for --data")
    if args.server:  # the running server streams JSONL of the key's tenant; written here in either format
        with _client(args) as client, client.stream("GET", "/v1/admin/export", params={"format": "jsonl"}) as response:
            if response.status_code >= 400:
                response.read()
                _checked(response)
            sink, count, page = export_sink(args.format, out, {"tenant": "(the key's)", "orgmem_version": _version()}), 0, []
            try:
                for line in response.iter_lines():
                    if line.strip():
                        page.append(record_from_json(line))
                    if len(page) >= PAGE_ROWS:
                        sink.write(page)
                        count, page = count + len(page), []
                        progress(count)
                if page:
                    sink.write(page)
                    count += len(page)
            except BaseException:
                sink.close(complete=False)
                raise
            sink.close()
        progress(count, final=True)
        print(f"exported {count} rows to {out}")
        return 0
    with open_memory(settings) as memory:
        checkpoint = memory.checkpoints().summary()
        sink = export_sink(args.format, out, {"tenant": args.tenant or "*", "checkpoint": checkpoint,
                                              "orgmem_version": _version()})
        summary = export_rows(memory, sink, args.tenant, progress=progress)
        try:
            record_admin_action(memory.event_log, args.tenant or HOST_WIDE, "export", _actor(args), {
                "format": args.format, "file": str(out.absolute()), "via": "cli", "rows": summary.rows,
                "checkpoint": summary.checkpoint, "complete": True})
        except BaseException:
            out.unlink(missing_ok=True)  # no export without its record
            raise
    progress(summary.rows, final=True)
    print(json.dumps({"rows": summary.rows, "checkpoint": summary.checkpoint, "out": str(out),
                      "seconds": round(summary.seconds, 2)}))
    return 0


def register(command, _sub) -> None:
    p = command("export", cmd_export, "write every row with its state and history to a JSONL or Parquet file")
    p.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl")
    p.add_argument("--tenant", help="one tenant (default: every tenant; with --server, the key's)")
    p.add_argument("--out", required=True, help="the file to write (must not exist)")
    p.add_argument("--server", help="read from a running server (URL) instead of the data folder")
    p.add_argument("--key", help="an admin key for --server (or ORGMEM_API_KEY)")
    p.add_argument("--actor", help="who exports, for the audit log (default cli:<user>; with --server the key's name)")
    p = command("backup", cmd_backup, "copy the data folder consistently into DIR (online with --server)")
    p.add_argument("dir", help="the backup folder to create (must not exist)")
    p.add_argument("--server", help="the URL of the server running on the data folder")
    p.add_argument("--key", help="an admin key for --server (or ORGMEM_API_KEY)")
    p.add_argument("--hold-s", type=int, default=300, help="longest the server's projector is held (default 300)")
    p.add_argument("--actor", help="who backs up, for the audit log (default cli:<user>)")
    p = command("restore", cmd_restore, "bring a backup back as the data folder")
    p.add_argument("backup", help="a folder made by `orgmem backup`")
    p.add_argument("--replace", action="store_true", help="put a non-empty data folder aside and restore in its place")
    p.add_argument("--actor", help="who restores, for the audit log of the restored folder (default cli:<user>)")

"""Chat exports generated in their documented layouts, for the source tests (nothing is copied
from a real export): a Slack workspace export as a MemoryTree's files, a folder or a .zip."""

from __future__ import annotations

import json
import shutil
import stat
import zipfile
from datetime import UTC, datetime
from pathlib import Path

from services.connectors.access import AccessMap
from services.connectors.base import ConnectorState
from services.connectors.paths import PathGuard
from services.connectors.runner import run_source

USERS = [
    {"id": "U1", "name": "dana", "real_name": "Dana Lee", "profile": {"display_name": "Dana", "real_name": "Dana Lee"}},
    {"id": "U2", "name": "lee", "profile": {"display_name": "", "real_name": "Lee Park"}},
    {"id": "U3", "name": "sam", "profile": {}},
]
CHANNELS = [{"id": "C1", "name": "general", "members": ["U1", "U2", "U3"]}]
GROUPS = [{"id": "G1", "name": "secret-plans", "members": ["U1", "U2"]}]
MPIMS = [{"id": "G9", "name": "mpdm-dana--lee--sam-1", "members": ["U1", "U2", "U3"]}]
DMS = [{"id": "D1", "members": ["U1", "U3"]}]


def ts(day: str, second: int = 0, micro: int = 100) -> str:
    """A Slack ts on `day` (YYYY-MM-DD) at 10:00 UTC plus `second` seconds."""
    start = datetime.fromisoformat(day).replace(hour=10, tzinfo=UTC)
    return f"{int(start.timestamp()) + second}.{micro:06d}"


def message(stamp: str, user: str, text: str, *, thread_ts: str | None = None, edited: str | None = None,
            files: list[dict] | None = None, subtype: str | None = None) -> dict:
    msg: dict = {"type": "message", "user": user, "text": text, "ts": stamp}
    if thread_ts:
        msg["thread_ts"] = thread_ts
    if edited:
        msg["edited"] = {"user": user, "ts": edited}
    if files:
        msg["files"] = files
    if subtype:
        msg["subtype"] = subtype
    return msg


def slack_export(days: dict[str, dict[str, list]], *, users=USERS, channels=CHANNELS, groups=GROUPS,
                 mpims=MPIMS, dms=DMS, prefix: str = "") -> dict[str, bytes]:
    """The export's files: the metadata files and `days` ({folder: {"2024-01-02": [messages]}});
    a day's value that is bytes is written as is (a malformed file). A metadata argument None
    leaves that file out."""
    files: dict[str, bytes] = {}
    for name, value in (("users.json", users), ("channels.json", channels), ("groups.json", groups),
                        ("mpims.json", mpims), ("dms.json", dms)):
        if value is not None:
            files[prefix + name] = value if isinstance(value, bytes) else json.dumps(value).encode()
    for folder, by_day in days.items():
        for day, messages in by_day.items():
            data = messages if isinstance(messages, bytes) else json.dumps(messages, indent=1).encode()
            files[f"{prefix}{folder}/{day}.json"] = data
    return files


def write_folder(files: dict[str, bytes], root: Path) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def write_zip(files: dict[str, bytes], path: Path) -> Path:
    """A .zip as Info-ZIP and Slack write it: each member a regular file (mode S_IFREG | 0644)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return path


def export_runs(source, tmp_path: Path):
    """(go, sunk): go(files) writes `files` as a fresh export folder and runs `source` over it
    through the runner with one data folder across calls; sunk collects every document sent."""
    folder, data = tmp_path / "export", tmp_path / "data"
    sunk: list = []

    def go(files):
        if folder.exists():
            shutil.rmtree(folder)
        write_folder(files, folder)
        state = ConnectorState(data, source.name, tenant="default")
        return run_source(source, [folder], sunk.extend, state, guard=PathGuard([tmp_path]), access=AccessMap())
    return go, sunk

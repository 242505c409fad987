"""Exports as trees of members: a folder read through the PathGuard, or a .zip read in place.

A .zip export is never extracted to disk. Its members are read one at a time through `zipfile`,
each through a bounded read, so the archive's own claims (sizes in the central directory) are
never trusted: a member that inflates past its cap, or by more than MAX_RATIO, is refused when the
bytes say so. Names that could lead out of the export (`..`, absolute paths, backslashes, drive
letters, NUL) and members that are links, devices or encrypted are refused by name, with the
reason, and the rest of the archive is read.
"""

from __future__ import annotations

import os
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from services.connectors.contract import MAX_MEMBER_BYTES, MemberRefused
from services.connectors.paths import PathGuard, PathRefused, Refused

MAX_MEMBERS = 200_000  # entries of one archive's central directory
MAX_TOTAL_BYTES = 8 * 1024**3  # what one archive may inflate to, all members together
MAX_RATIO = 200  # uncompressed / compressed bytes of one member (plain JSON reaches ~20)
_RATIO_FLOOR = 1024 * 1024  # members smaller than this are not judged by ratio
_CHUNK = 1024 * 1024


class TreeRefused(Exception):
    """The export as a whole cannot be read (not a zip, too many members): one dead letter."""


def _name_refusal(name: str) -> str | None:
    if "\x00" in name:
        return "a NUL in the member's name"
    if "\\" in name:
        return "a backslash in the member's name (a path that may lead out of the export)"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "an absolute member name (a path that leads out of the export)"
    if ".." in PurePosixPath(name).parts:
        return "'..' in the member's name (a path that leads out of the export)"
    return None


@dataclass
class ZipTree:
    """A .zip export read in place (see the module doc). `refused` holds the members not offered."""

    archive: zipfile.ZipFile
    label: str
    refused: list[Refused] = field(default_factory=list)
    max_total: int = MAX_TOTAL_BYTES
    handle: BinaryIO | None = None  # the archive file as the guard opened it

    def __post_init__(self) -> None:
        infos = self.archive.infolist()
        if len(infos) > MAX_MEMBERS:
            raise TreeRefused(f"archive: {len(infos)} members, over {MAX_MEMBERS}; not read")
        self._members: dict[str, zipfile.ZipInfo] = {}
        self._inflated = 0
        for info in infos:
            if info.is_dir():
                continue
            why = _name_refusal(info.filename)
            mode = info.external_attr >> 16
            # Many writers (Python's writestr among them) set permission bits only: no type is a file.
            if why is None and stat.S_IFMT(mode) and not stat.S_ISREG(mode):
                why = "a link or special file inside the archive" if stat.S_ISLNK(mode) else "not a regular file"
            if why is None and info.flag_bits & 0x1:
                why = "an encrypted member"
            if why is None and info.filename in self._members:
                why = "a second member with the same name"
            if why:
                self.refused.append(Refused(f"{self.label}!{info.filename}", why))
            else:
                self._members[info.filename] = info

    def names(self) -> list[str]:
        return sorted(self._members)

    def read(self, name: str, limit: int = MAX_MEMBER_BYTES) -> bytes:
        info = self._members.get(name)
        if info is None:
            raise MemberRefused(name, "no such member")
        if info.file_size > limit:
            raise MemberRefused(name, f"over {limit} bytes ({info.file_size} bytes), not read")
        chunks, size = [], 0
        try:
            with self.archive.open(info) as handle:
                while chunk := handle.read(_CHUNK):
                    size += len(chunk)
                    # The bytes, not the header, decide: a member may claim 1 KiB and inflate to 1 TiB.
                    if size > limit:
                        raise MemberRefused(name, f"inflates past {limit} bytes, not read")
                    if size > _RATIO_FLOOR and size > MAX_RATIO * max(info.compress_size, 1):
                        raise MemberRefused(name, f"inflates over {MAX_RATIO}x its compressed size (a zip bomb), not read")
                    if self._inflated + size > self.max_total:
                        raise MemberRefused(name, f"the archive inflates past {self.max_total} bytes in all, not read")
                    chunks.append(chunk)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError, NotImplementedError) as exc:
            raise MemberRefused(name, f"unreadable in the archive ({type(exc).__name__}: {exc})") from None
        self._inflated += size
        return b"".join(chunks)

    def close(self) -> None:
        self.archive.close()
        if self.handle is not None:
            self.handle.close()


@dataclass
class FolderTree:
    """An export unpacked in a folder, every member read through the guard (links that lead out,
    special files and the data folder are refused exactly as the file connectors refuse them)."""

    root: Path
    guard: PathGuard
    label: str = ""
    refused: list[Refused] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.label = self.label or str(self.root)
        self._names: dict[str, Path] = {}
        for found in self.guard.walk(self.root):
            if isinstance(found, Refused):
                self.refused.append(found)
            else:
                self._names[found.relative_to(self.root).as_posix()] = found

    def names(self) -> list[str]:
        return sorted(self._names)

    def read(self, name: str, limit: int = MAX_MEMBER_BYTES) -> bytes:
        path = self._names.get(name)
        if path is None:
            raise MemberRefused(name, "no such member")
        try:
            with self.guard.open(path) as handle:
                size = os.fstat(handle.fileno()).st_size
                if size > limit:
                    raise MemberRefused(name, f"over {limit} bytes ({size} bytes), not read")
                data = handle.read(limit + 1)
        except PathRefused as exc:
            raise MemberRefused(name, exc.reason) from None
        except OSError as exc:
            raise MemberRefused(name, f"cannot read: {exc.strerror or exc}") from None
        if len(data) > limit:  # it grew while being read
            raise MemberRefused(name, f"over {limit} bytes, not read")
        return data

    def close(self) -> None:
        pass


def open_tree(path: Path, guard: PathGuard) -> FolderTree | ZipTree:
    """The export at `path`: a folder, or a .zip file opened through the guard (TreeRefused or
    PathRefused when it cannot be read at all)."""
    why = guard.refusal(path)
    if why:
        raise PathRefused(path, why)
    if path.is_dir():
        return FolderTree(Path(path), guard)
    handle = guard.open(path)
    try:
        archive = zipfile.ZipFile(handle)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        handle.close()
        raise TreeRefused(f"not a readable .zip export or folder ({type(exc).__name__}: {exc})") from None
    try:
        return ZipTree(archive, str(path), handle=handle)
    except BaseException:
        archive.close()
        handle.close()
        raise

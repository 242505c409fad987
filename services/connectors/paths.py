"""Where a connector may read: under its roots, never orgmem's own data folder, never through a
link or a special file that leads elsewhere.

Every path a run touches (the inputs named, each folder it enters and each file it opens) is
checked by its real path (`os.path.realpath`): it must lie under a root, and not in a protected
place (the data folder with keys.sqlite and log.sqlite, the key file) unless through a root that
lies inside it (the default `<data_dir>/inbox/<tenant>`). A file is opened by its real path with
O_NOFOLLOW and O_NONBLOCK, must be a regular file (a FIFO would block the run, a device would
never end), and is checked again through the descriptor (`/proc/self/fd`), so that a link swapped
in between the check and the open is caught too; a hard link to a protected file is refused by
its inode. A refused path is reported, never read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

OUTSIDE = "outside the connector roots"
PROTECTED = f"{OUTSIDE} (orgmem's own data folder)"
_INODE_SCAN_LIMIT = 100_000  # entries of a protected folder looked at for hard links
_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class Refused:
    """A path the walk met and did not read, and why."""

    path: str
    reason: str


class PathRefused(Exception):
    def __init__(self, path: str | Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = str(path), reason


def real(path: str | Path) -> Path:
    return Path(os.path.realpath(path))


class PathGuard:
    """The roots a run may read under and the places it may never read."""

    def __init__(self, roots: Iterable[str | Path], protected: Iterable[str | Path] = ()):
        self.roots = tuple(dict.fromkeys(real(r) for r in roots))
        self.protected = tuple(dict.fromkeys(real(p) for p in protected))
        self._inodes: frozenset[tuple[int, int]] | None = None

    @classmethod
    def around(cls, inputs: Iterable[str | Path], protected: Iterable[str | Path] = ()) -> PathGuard:
        """The guard of a run given no roots (the CLI, library calls): the inputs are the roots, so
        that a link inside a folder named cannot lead out of it."""
        return cls(list(inputs), protected)

    # --- checks ---------------------------------------------------------------------------------
    def refusal(self, path: str | Path) -> str | None:
        """Why `path` may not be read (by its real path), or None."""
        try:
            where = real(path)
        except (ValueError, OSError):  # an embedded NUL, a name the system refuses
            return "not a usable path"
        under = [r for r in self.roots if where.is_relative_to(r)]
        if not under:
            return OUTSIDE
        for place in self.protected:
            # A root strictly inside a protected folder (the default inbox) opens that part only.
            if where.is_relative_to(place) and not any(r != place and r.is_relative_to(place) for r in under):
                return PROTECTED
        return None

    def _protected_inodes(self) -> frozenset[tuple[int, int]]:
        """(device, inode) of the protected files, so that a hard link to one is refused too."""
        if self._inodes is None:
            found: set[tuple[int, int]] = set()
            budget = _INODE_SCAN_LIMIT
            for place in self.protected:
                if place.is_file():
                    st = place.stat()
                    found.add((st.st_dev, st.st_ino))
                    continue
                # What lies under a root is what the run may read, not what it protects.
                for folder, dirs, files in os.walk(place):
                    dirs[:] = [d for d in dirs if not self._under_a_root(Path(folder) / d)]
                    for name in files:
                        budget -= 1
                        if self._under_a_root(Path(folder) / name):
                            continue
                        try:
                            st = os.lstat(os.path.join(folder, name))
                        except OSError:
                            continue
                        if stat.S_ISREG(st.st_mode):
                            found.add((st.st_dev, st.st_ino))
                    if budget <= 0:
                        break
            self._inodes = frozenset(found)
        return self._inodes

    def _under_a_root(self, path: Path) -> bool:
        where = real(path)
        return any(where.is_relative_to(r) for r in self.roots)

    # --- reading --------------------------------------------------------------------------------
    def open(self, path: str | Path) -> BinaryIO:
        """The file at `path` opened for reading, or PathRefused (OSError when it cannot be read)."""
        target = real(path)
        why = self.refusal(target)
        if why:
            raise PathRefused(path, why)
        try:
            fd = os.open(target, _FLAGS)
        except OSError as exc:
            if exc.errno == getattr(os, "ELOOP", None):  # a link swapped in after the check
                raise PathRefused(path, f"{OUTSIDE} (the path changed into a link while being opened)") from None
            raise
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise PathRefused(path, "not a regular file")
            opened = _descriptor_path(fd)
            why = self.refusal(opened) if opened is not None else None
            if why is None and (st.st_dev, st.st_ino) in self._protected_inodes():
                why = PROTECTED
            if why:
                raise PathRefused(path, why)
            os.set_blocking(fd, True)
            return os.fdopen(fd, "rb")
        except BaseException:
            os.close(fd)
            raise

    def read_bytes(self, path: str | Path) -> bytes:
        with self.open(path) as handle:
            return handle.read()

    # --- walking --------------------------------------------------------------------------------
    def children(self, folder: Path) -> tuple[list[Path], list[Refused]]:
        """The entries of one folder that may be read, sorted, and those refused. A link that
        leads out is refused and reported; a protected folder that merely lies inside a root (the
        data folder inside a root folder) is left out without a report."""
        kept: list[Path] = []
        refused: list[Refused] = []
        for entry in sorted(os.scandir(folder), key=lambda e: e.name):
            path = Path(entry.path)
            why = self.refusal(path)
            if why and entry.is_symlink():
                refused.append(Refused(str(path), why))
            elif not why:
                kept.append(path)
        return kept, refused

    def walk(self, top: Path) -> Iterator[Path | Refused]:
        """Every regular file under `top` that may be read (recursively, sorted), links followed
        only where they stay under the roots, each real folder and file once."""
        folders: set[Path] = set()
        files: set[Path] = set()

        def visit(folder: Path) -> Iterator[Path | Refused]:
            key = real(folder)
            if key in folders:
                return  # a link back to a folder already walked
            folders.add(key)
            try:
                kept, refused = self.children(folder)
            except OSError as exc:
                yield Refused(str(folder), f"folder: unreadable ({exc.strerror})")
                return
            yield from refused
            for path in kept:
                if path.is_dir():
                    yield from visit(path)
                elif path.is_file() and real(path) not in files:
                    files.add(real(path))
                    yield path

        yield from visit(top)


def _descriptor_path(fd: int) -> Path | None:
    """The real path of an open descriptor (Linux /proc), or None where the system has no such view."""
    try:
        return Path(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        return None

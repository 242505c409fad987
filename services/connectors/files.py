"""The loop every file-based connector shares: walk the inputs, skip files whose bytes (and run
options) match the cursor, parse the rest, hand documents to the sink in batches, record dead
letters, then the file's fingerprint — so a crash mid-run re-reads that file next time."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from schemas.documents import DocumentIn
from services.connectors.base import (
    ConnectorReport,
    ConnectorState,
    DeadLetter,
    Sink,
    reporting,
)
from services.connectors.paths import PathGuard, PathRefused, Refused

log = logging.getLogger(__name__)

BATCH = 500
# One structured file (a ticket export, a transcript) is parsed whole, so it is capped; a larger
# one is a dead letter naming the limit, never read into memory.
MAX_FILE_BYTES = 64 * 1024 * 1024
Paths = str | Path | Iterable[str | Path]  # one file or folder, or several


def _files(paths: Paths, suffixes: tuple[str, ...], guard: PathGuard,
           skipped: Callable[[Path], None] = lambda _p: None) -> Iterator[Path | Refused]:
    """Files as given, and files under folders (recursively, sorted) with one of the suffixes; a
    path the guard refuses (a link out of the roots, the data folder) is reported, not read, and
    a file of another suffix is told to `skipped`."""
    for raw in [paths] if isinstance(paths, (str, Path)) else paths:
        path = Path(raw)
        why = guard.refusal(path)
        if why:
            yield Refused(str(path), why)
        elif path.is_dir():
            for found in guard.walk(path):
                # A refused link is reported when it would have been read: a folder, or a wanted suffix.
                name = Path(found.path) if isinstance(found, Refused) else found
                if name.suffix.lower() in suffixes or (isinstance(found, Refused) and name.is_dir()):
                    yield found
                elif not isinstance(found, Refused):
                    skipped(found)
        elif path.is_file():
            yield path
        else:
            yield Refused(str(path), "no such file or folder")


def run_files(connector: str, paths: Paths, suffixes: tuple[str, ...],
              parse: Callable[[bytes, Path], tuple[list[DocumentIn], list[DeadLetter], int]],
              sink: Sink, state: ConnectorState, options: dict, guard: PathGuard | None = None,
              hints: Mapping[str, str] | None = None) -> ConnectorReport:
    """The file-connector loop: skip a file whose bytes and options match the cursor, else parse it,
    hand its documents to the sink, record its dead letters, then its fingerprint. Options are part
    of the fingerprint so that a corrected CSV mapping or meeting date re-reads the same file.

    Whatever one file holds costs that file only: any failure to parse it is a dead letter. A
    failure of the sink stops the run; the exception carries the report of what was done."""
    report = ConnectorReport(connector)
    seen = state.values.setdefault("files", {})
    opts = json.dumps(options, sort_keys=True, default=str)
    if guard is None:
        guard = PathGuard.around([paths] if isinstance(paths, (str, Path)) else paths, [state.root.parent])
    def skipped(path: Path) -> None:
        # Never silent: how many files of which kind were passed over, and how to read them.
        suffix = path.suffix.lower() or "(no suffix)"
        how = (hints or {}).get(suffix, f"{connector} reads {', '.join(suffixes)} only")
        report.skip(f"{suffix} files: {how}")

    with reporting(report):
        for path in _files(paths, suffixes, guard, skipped):
            if isinstance(path, Refused):
                letters = [DeadLetter(connector, path.path, path.reason)]
            else:
                letters = _one_file(connector, path, parse, sink, guard, seen, opts, report)
                if letters is None:
                    continue
            report.dead_letters.extend(letters)
            state.record_dead_letters(letters)
            state.save()
    return report


def _one_file(connector, path, parse, sink, guard, seen, opts, report) -> list[DeadLetter] | None:
    """Read, parse and hand on one file; its dead letters, or None when the cursor says it is done."""
    try:
        with guard.open(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            data = handle.read(MAX_FILE_BYTES + 1) if size <= MAX_FILE_BYTES else b""
        if size > MAX_FILE_BYTES or len(data) > MAX_FILE_BYTES:
            return [DeadLetter(connector, str(path), f"file: over {MAX_FILE_BYTES} bytes "
                                                     f"({max(size, len(data))} bytes), not read")]
    except PathRefused as exc:
        return [DeadLetter(connector, str(path), exc.reason)]
    except OSError as exc:
        return [DeadLetter(connector, str(path), f"cannot read: {exc}")]
    mark = {"sha256": hashlib.sha256(data).hexdigest(), "options": opts}
    key = str(path.resolve())
    if seen.get(key) == mark:
        report.unchanged += 1
        return None
    try:
        docs, letters, items = parse(data, path)
    except Exception as exc:
        # A parser bug or a pathological file (JSON nested past the recursion limit, a date that
        # overflows) costs that file only; the traceback goes to the log for whoever fixes the parser.
        log.exception("%s: cannot parse %s", connector, path)
        reason = f"cannot parse: {type(exc).__name__}: {exc}"
        docs, letters, items = [], [DeadLetter(connector, str(path), reason)], 0
    letters = [DeadLetter(connector, d.path, d.reason, d.at) for d in letters]
    for start in range(0, len(docs), BATCH):
        sink(docs[start : start + BATCH])
    report.documents += len(docs)
    report.items_seen += items
    seen[key] = mark
    return letters

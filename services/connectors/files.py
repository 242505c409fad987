"""The loop every file-based connector shares: walk the inputs, skip files whose bytes (and run
options) match the cursor, parse the rest, hand documents to the sink in batches, record dead
letters, then the file's fingerprint — so a crash mid-run re-reads that file next time."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from schemas.documents import DocumentIn
from services.connectors.base import ConnectorReport, ConnectorState, DeadLetter, Sink

log = logging.getLogger(__name__)

BATCH = 500
Paths = str | Path | Iterable[str | Path]  # one file or folder, or several


def _files(paths: Paths, suffixes: tuple[str, ...]) -> Iterator[Path | DeadLetter]:
    """Files as given, and files under folders (recursively, sorted) with one of the suffixes."""
    for raw in [paths] if isinstance(paths, (str, Path)) else paths:
        path = Path(raw)
        if path.is_dir():
            yield from sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in suffixes)
        elif path.is_file():
            yield path
        else:
            yield DeadLetter("files", str(path), "no such file or folder")


def run_files(connector: str, paths: Paths, suffixes: tuple[str, ...],
              parse: Callable[[bytes, Path], tuple[list[DocumentIn], list[DeadLetter], int]],
              sink: Sink, state: ConnectorState, options: dict) -> ConnectorReport:
    """The file-connector loop: skip a file whose bytes and options match the cursor, else parse it,
    hand its documents to the sink, record its dead letters, then its fingerprint. Options are part
    of the fingerprint so that a corrected CSV mapping or meeting date re-reads the same file."""
    report = ConnectorReport(connector)
    seen = state.values.setdefault("files", {})
    opts = json.dumps(options, sort_keys=True, default=str)
    for path in _files(paths, suffixes):
        if isinstance(path, DeadLetter):
            letters = [DeadLetter(connector, path.path, path.reason)]
        else:
            try:
                data = path.read_bytes()
            except OSError as exc:
                letters = [DeadLetter(connector, str(path), f"cannot read: {exc}")]
            else:
                mark = {"sha256": hashlib.sha256(data).hexdigest(), "options": opts}
                key = str(path.resolve())
                if seen.get(key) == mark:
                    report.unchanged += 1
                    continue
                try:
                    docs, letters, items = parse(data, path)
                except (RecursionError, MemoryError, ValueError, TypeError, KeyError, AttributeError) as exc:
                    # A parser bug or a pathological file (JSON nested past the recursion limit) costs
                    # that file only; the traceback goes to the log for whoever fixes the parser.
                    log.exception("%s: cannot parse %s", connector, path)
                    reason = f"cannot parse: {type(exc).__name__}: {exc}"
                    docs, letters, items = [], [DeadLetter(connector, str(path), reason)], 0
                letters = [DeadLetter(connector, d.path, d.reason, d.at) for d in letters]
                for start in range(0, len(docs), BATCH):
                    sink(docs[start : start + BATCH])
                report.documents += len(docs)
                report.items_seen += items
                seen[key] = mark
        report.dead_letters.extend(letters)
        state.record_dead_letters(letters)
        state.save()
    return report

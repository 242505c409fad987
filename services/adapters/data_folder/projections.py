"""The embedded profile's projections folder: built aside, swapped in, checked at start.

`orgmem rebuild` builds fresh projections in `projections.rebuild/` from the log alone, marks the
folder finished, then swaps: `projections` -> `projections.old`, `projections.rebuild` ->
`projections`, and deletes `projections.old`. Each step is one rename, so a crash at any point
leaves a complete folder; `recover` (run at every start, under the data folder lock) finishes or
undoes the swap. `check` compares each index with the row store's count of rows at start.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

LIVE, ASIDE, OLD = "projections", "projections.rebuild", "projections.old"
FINISHED = "rebuild-finished"  # written into the folder built aside once it is complete
INDEXES = ("lexical", "vectors")


def _sync(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fresh_aside(data_dir: Path) -> Path:
    """An empty folder to build the projections in (a stale one from a failed run is dropped)."""
    aside = Path(data_dir) / ASIDE
    shutil.rmtree(aside, ignore_errors=True)
    aside.mkdir(mode=0o700)
    return aside


def mark_finished(data_dir: Path) -> None:
    aside = Path(data_dir) / ASIDE
    (aside / FINISHED).write_text("complete\n")
    _sync(aside)


def swap_in(data_dir: Path) -> None:
    """Replace the live projections with the finished folder built aside."""
    data = Path(data_dir)
    live, aside, old = data / LIVE, data / ASIDE, data / OLD
    if not (aside / FINISHED).exists():
        raise RuntimeError(f"{aside} is not a finished rebuild")
    shutil.rmtree(old, ignore_errors=True)
    if live.exists():
        live.rename(old)
        _sync(data)
    aside.rename(live)
    _sync(data)
    (live / FINISHED).unlink(missing_ok=True)
    shutil.rmtree(old, ignore_errors=True)


def recover(data_dir: Path) -> None:
    """Finish or undo a swap a crash interrupted; the caller holds the data folder lock."""
    data = Path(data_dir)
    live, aside, old = data / LIVE, data / ASIDE, data / OLD
    if aside.exists():
        if (aside / FINISHED).exists():
            log.warning("projections: finishing the swap of a rebuild that was interrupted")
            swap_in(data)
        else:
            log.warning("projections: dropping %s, left by a rebuild that did not finish", aside)
            shutil.rmtree(aside, ignore_errors=True)
    if old.exists():
        if live.exists():
            shutil.rmtree(old, ignore_errors=True)
        else:  # not reachable by swap_in's order; put the old folder back rather than lose it
            old.rename(live)


def missing_before_open(data_dir: Path) -> dict[str, str]:
    """Index folders absent while the row store exists (opening would create them empty)."""
    live = Path(data_dir) / LIVE
    if not (live / "rows.sqlite").exists():
        return {}
    return {name: "missing" for name in INDEXES if not (live / name).is_dir()}


def check(rows_total: int, index_counts: dict[str, int | None], found: dict[str, str]) -> dict[str, str]:
    """Each index's state beside the row store: "missing" (found before opening) or "behind"
    (far fewer entries than the row store has active and archived rows)."""
    out = dict(found)
    for name, count in index_counts.items():
        if name in out or count is None:
            continue
        if rows_total - count > max(1, rows_total // 10):
            out[name] = "behind"
    return out

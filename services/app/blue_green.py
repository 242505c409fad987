"""A rebuild without downtime (blue/green): the log is projected into a new generation of every
store beside the live one, while readers and the indexers keep using the live one; when the new
generation has caught up with the log, each store's name is switched to it, and the old one is
retired. The indexers follow the switch: they read their checkpoint through the name before
every batch, so after the switch they continue from the new generation's checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from services.ports import BatchStats, ProjectionGenerations

log = logging.getLogger(__name__)


def rebuild_beside(generations: Sequence[ProjectionGenerations], open_aside: Callable[[list[str]], object],
                   progress: Callable | None = None, max_passes: int = 20) -> tuple[BatchStats, dict]:
    """Fill the next generation of each store (`open_aside(names)` opens a projecting memory over
    them, in the order of `generations`), switch every name to it, retire the old ones. Returns
    the replay's totals and the new generation's counts. A failure before the switch leaves the
    live generation as it was (the next rebuild drops the half-built one)."""
    old = [g.live() for g in generations]
    new = [g.next() for g in generations]
    log.info("rebuild beside the live projections: %s -> %s", old, new)
    memory = open_aside(new)
    try:
        total = BatchStats()
        # Each pass reads to the log's head; events appended meanwhile are the next pass's. The
        # indexers go on from the new generation's checkpoint, so a short tail is theirs anyway.
        for _ in range(max_passes):
            stats = memory.catch_up(progress=progress)
            for field in ("events", "rows_added", "state_changes", "skipped", "seconds"):
                setattr(total, field, getattr(total, field) + getattr(stats, field))
            if not stats.events:
                break
        counts = memory.stats()
    finally:
        memory.close()
    for store, name in zip(generations, new, strict=True):
        store.switch(name)
    for store, name in zip(generations, old, strict=True):
        if name is not None:
            store.retire(name)
    log.info("rebuild beside: switched to %s (%d events replayed)", new, total.events)
    return total, counts

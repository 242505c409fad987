"""The tiered vector index's shards: `manifest.json`, which names those a search reads, what is
done to the folder around it (qdrant_edge_tiers.py says when), how the named shards are opened
(`open_together`), and which of them the searches read meanwhile (`PublishedTiers`).

The manifest is the truth: it is replaced whole (`os.replace`, with the folder synced), and at
open any folder it does not name is an interrupted build or a shard never published, and is
deleted. A single-shard index from before the tiers is moved inside as the sealed shard.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from services.adapters.vector.qdrant_edge import QdrantEdgeVectorIndex
from services.adapters.vector.qdrant_edge_host import HostedShard

MANIFEST = "manifest.json"
SHARD_NAME = re.compile(r"[sx]-(\d{6})")  # s-: sealed (graph), x-: searched exactly
LEGACY = "s-000000"  # a single-shard index from before the tiers, moved in as the sealed shard

Shard = QdrantEdgeVectorIndex | HostedShard  # exact shards in the server's process, sealed ones in hosts


@dataclass(frozen=True, eq=False)
class Tiers:
    """The shards one search reads: replaced whole, never changed in place."""

    sealed: tuple[HostedShard, ...]  # graph shards, oldest (largest) first, each in its host process
    exact: tuple[QdrantEdgeVectorIndex, ...]  # oldest first; the last one takes new rows

    def all(self) -> list[Shard]:
        return [*self.sealed, *self.exact]

    def manifest(self) -> dict:
        return {"sealed": [s.path.name for s in self.sealed], "exact": [s.path.name for s in self.exact]}


class PublishedTiers:
    """The tiers searches read now. A swap publishes new ones; a search keeps the tiers it began
    with, and `drain` waits until none reads older ones (whose shards may then be closed)."""

    def __init__(self, tiers: Tiers):
        self.current = tiers
        self._views = threading.Condition()
        self._readers: Counter[Tiers] = Counter()

    def publish(self, tiers: Tiers) -> None:
        with self._views:
            self.current = tiers

    @contextmanager
    def reading(self) -> Iterator[Tiers]:
        with self._views:
            tiers = self.current
            self._readers[tiers] += 1
        try:
            yield tiers
        finally:
            with self._views:
                self._readers[tiers] -= 1
                if not self._readers[tiers]:
                    del self._readers[tiers]
                self._views.notify_all()

    def drain(self) -> None:
        """Wait until every search reads the current tiers (searches take milliseconds)."""
        with self._views:
            self._views.wait_for(lambda: all(tiers is self.current for tiers in self._readers))


def read_manifest(path: Path) -> dict:
    """The manifest, `sealed` always a list; a single-shard index at `path` (from before the
    tiers) is moved inside as the sealed shard first, one rename at a time, resumed if a crash
    cut it short. A manifest from before the tiered sealed shards names one or none."""
    moving = path.with_name(path.name + ".legacy")
    if not moving.exists() and (path / "edge_config.json").exists():
        path.rename(moving)
    path.mkdir(parents=True, exist_ok=True)
    if moving.exists():
        moving.rename(path / LEGACY)
    if (path / MANIFEST).exists():
        manifest = json.loads((path / MANIFEST).read_text())
        sealed = manifest["sealed"]
        return {**manifest, "sealed": [sealed] if isinstance(sealed, str) else sealed or []}
    return {"sealed": [LEGACY] if (path / LEGACY).exists() else [], "exact": []}


def last_shard_number(path: Path) -> int:
    """The highest number a shard folder in `path` has, named in the manifest or not (0: none)."""
    return max((int(m.group(1)) for p in path.iterdir() if (m := SHARD_NAME.fullmatch(p.name))), default=0)


def open_together(names: Sequence[str], open_one: Callable[[str], Shard]) -> list[Shard]:
    """Every shard of `names`, in order, opened at once: a sealed shard's open is its host
    process reading it, which the caller waits for with the interpreter lock released, so a
    start with several sealed shards waits for the slowest, not for their sum. If one cannot
    open, the others are closed (no host is left behind) and its error raised."""
    with ThreadPoolExecutor(max_workers=max(1, len(names)), thread_name_prefix="orgmem-shard-open") as pool:
        futures = [pool.submit(open_one, name) for name in names]
    opened = [future.result() for future in futures if future.exception() is None]
    failed = next((future.exception() for future in futures if future.exception() is not None), None)
    if failed is not None:
        for shard in opened:
            shard.close()
        raise failed
    return opened


def write_manifest(path: Path, tiers: Tiers) -> None:
    staged = path / (MANIFEST + ".tmp")
    with open(staged, "w") as out:
        json.dump(tiers.manifest(), out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(staged, path / MANIFEST)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sweep(path: Path, tiers: Tiers) -> None:
    """Delete what the manifest of `tiers` does not name: unfinished builds, copies, shards never
    published."""
    keep = {MANIFEST, *tiers.manifest()["exact"], *tiers.manifest()["sealed"]}
    for stray in path.iterdir():
        if stray.name not in keep:
            shutil.rmtree(stray) if stray.is_dir() else stray.unlink()


# A build merges the sealed shards of one size class: once SEALED_FANOUT of them share a class
# (class 0 is under SEALED_FANOUT x vector_seal_rows rows, each next one SEALED_FANOUT times
# larger), they become one shard of the next. A build then copies and reopens only the rows it
# seals plus what it merges, which is most of the index only once in SEALED_FANOUT ** k builds,
# and a search reads at most SEALED_FANOUT - 1 sealed shards per class. Each shard costs a search
# about 0.7-0.9 ms more (random vectors, 8-10k rows a shard, bench/live_graph.py's filter), so
# the fanout is the smallest: 2 keeps the shards as few as the bits set in rows / seal_rows.
SEALED_FANOUT = 2


def size_class(rows: int, seal_rows: int, fanout: int = SEALED_FANOUT) -> int:
    level, bound = 0, seal_rows * fanout
    while rows >= bound:
        level, bound = level + 1, bound * fanout
    return level


def shards_to_merge(sealed_rows: list[int], new_rows: int, seal_rows: int, fanout: int = SEALED_FANOUT) -> int:
    """How many of the newest sealed shards (`sealed_rows`: their sizes, oldest first) a build
    sealing `new_rows` merges into the shard it builds: while the last `fanout` shards, the new
    one counted, share a size class, they become one, which may complete the class above."""
    sizes, merged = [*sealed_rows, new_rows], 0
    while len(sizes) >= fanout and len({size_class(n, seal_rows, fanout) for n in sizes[-fanout:]}) == 1:
        sizes[-fanout:] = [sum(sizes[-fanout:])]
        merged += fanout - 1
    return merged

"""The tiered vector index's folder: `manifest.json`, which names the shards a search reads, and
what is done to the folder around it (qdrant_edge_tiers.py says when).

The manifest is the truth: it is replaced whole (`os.replace`, with the folder synced), and at
open any folder it does not name is an interrupted build or a shard never published, and is
deleted. A single-shard index from before the tiers is moved inside as the sealed shard.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from services.adapters.vector.qdrant_edge import QdrantEdgeVectorIndex

MANIFEST = "manifest.json"
SHARD_NAME = re.compile(r"[sx]-(\d{6})")  # s-: sealed (graph), x-: searched exactly
LEGACY = "s-000000"  # a single-shard index from before the tiers, moved in as the sealed shard


@dataclass(frozen=True, eq=False)
class Tiers:
    """The shards one search reads: replaced whole, never changed in place."""

    sealed: QdrantEdgeVectorIndex | None
    exact: tuple[QdrantEdgeVectorIndex, ...]  # oldest first; the last one takes new rows

    def all(self) -> list[QdrantEdgeVectorIndex]:
        return ([self.sealed] if self.sealed else []) + list(self.exact)

    def manifest(self) -> dict:
        return {"sealed": self.sealed.path.name if self.sealed else None, "exact": [s.path.name for s in self.exact]}


def read_manifest(path: Path) -> dict:
    """The manifest; a single-shard index at `path` (from before the tiers) is moved inside
    as the sealed shard first, one rename at a time, resumed if a crash cut it short."""
    moving = path.with_name(path.name + ".legacy")
    if not moving.exists() and (path / "edge_config.json").exists():
        path.rename(moving)
    path.mkdir(parents=True, exist_ok=True)
    if moving.exists():
        moving.rename(path / LEGACY)
    if (path / MANIFEST).exists():
        return json.loads((path / MANIFEST).read_text())
    return {"sealed": LEGACY if (path / LEGACY).exists() else None, "exact": []}


def last_shard_number(path: Path) -> int:
    """The highest number a shard folder in `path` has, named in the manifest or not (0: none)."""
    return max((int(m.group(1)) for p in path.iterdir() if (m := SHARD_NAME.fullmatch(p.name))), default=0)


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
    keep = {MANIFEST, *tiers.manifest()["exact"], tiers.manifest()["sealed"]}
    for stray in path.iterdir():
        if stray.name not in keep:
            shutil.rmtree(stray) if stray.is_dir() else stray.unlink()

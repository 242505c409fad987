"""The child process that builds a sealed shard of the tiered vector index (qdrant_edge_tiers.py).

Qdrant Edge's `optimize()` holds the interpreter lock for its whole run, so the server never
calls it on one of its own threads: it hands this program copies of the shards to seal (a
running shard's folder cannot be opened by a second process: its WAL is locked) and keeps
answering searches meanwhile. The program adds every point of `--add` folders to `--target`
(a copy of the current sealed shard, or a new folder), builds the graph, and marks the target
complete. Anything short of that marker is an unfinished build, which the server drops.
The server's side sits here too: `start_build`, `check_built`, and what it keeps of its builds.

    python -m services.adapters.vector.qdrant_edge_build --parent PID --target DIR --dim N [--add DIR ...]
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from qdrant_edge import EdgeOptimizersConfig

from services.adapters.child_process import child_env
from schemas.rows import Row
from services.adapters.vector.qdrant_edge import QdrantEdgeVectorIndex
from services.errors import OrgmemError

# Written into the target once its graph is built and flushed.
BUILD_COMPLETE = "orgmem-build-complete"
# A sealed shard keeps several graph segments: sealing new rows then builds the graph of a new
# segment only (measured: 11 s for 10k new rows beside 10k sealed, where one segment took 74 s
# to rebuild 30k), and the engine merges the smallest segments once there are more than this.
SEALED_SEGMENTS = 6
# Every segment gets a graph, however small (the engine's default skips those under ~10 MB).
SEALED_OPTIMIZERS = EdgeOptimizersConfig(default_segment_number=SEALED_SEGMENTS, indexing_threshold=1)
# The child yields the CPU to the server it builds for (searches, the encoder).
NICENESS = 10
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


class BuildFailed(OrgmemError):
    pass


@dataclass
class BuildJournal:
    """What happened to the points of the shards being sealed while the child built their copy."""

    states: dict[str, Row] = field(default_factory=dict)
    moved: set[str] = field(default_factory=set)  # re-upserted into the live shard


@dataclass
class BuildRecord:
    done: int = 0
    failed: int = 0
    cancelled: int = 0  # by an erasure, a reset or close
    deferred: int = 0  # not started: the disk had no room for it above the free-space floor
    last_finished_at: float | None = None  # unix time
    last_seconds: float | None = None


def start_build(target: Path, inputs: Path, dim: int) -> subprocess.Popen:
    """This program as a child of the server, building `target` from the shard copies in `inputs`."""
    return subprocess.Popen(
        [sys.executable, "-m", __name__, "--parent", str(os.getpid()), "--target", str(target),
         "--dim", str(dim), "--add", *sorted(str(p) for p in inputs.iterdir())],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=child_env())


def check_built(child: subprocess.Popen, err: bytes, target: Path) -> None:
    """Raise BuildFailed unless the child exited cleanly and marked `target` complete."""
    if child.returncode != 0 or not (target / BUILD_COMPLETE).exists():
        raise BuildFailed(f"the build process exited with {child.returncode}: {err.decode(errors='replace')[-2000:]}")


def build(target: Path, dim: int, additions: list[Path]) -> None:
    # A copy of the sealed shard keeps its log setting; a new target is made without a log.
    index = QdrantEdgeVectorIndex(target, dim, optimizers=SEALED_OPTIMIZERS, wal=None if target.exists() else False)
    try:
        for folder in additions:  # every point keyed by its row id (a shard with name-based ids is re-keyed)
            index.absorb(folder)
        index.refit_payload_indexes()  # a shard sealed before ON_DISK_INDEXES gets them now
        index.optimize()
    finally:
        index.close()
    (target / BUILD_COMPLETE).write_text("graph built\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--parent", type=int, required=True, help="the server's pid: the build dies with it")
    parser.add_argument("--target", type=Path, required=True)
    parser.add_argument("--dim", type=int, required=True)
    parser.add_argument("--add", type=Path, nargs="*", default=[])
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # A server killed mid-build takes its build along (else an orphan would write into a folder
    # that the next start deletes as unfinished).
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != args.parent:  # it died before the line above took effect
        sys.exit(3)
    os.nice(NICENESS)
    build(args.target, args.dim, args.add)


if __name__ == "__main__":
    main()

"""VectorIndex for a live server on Qdrant Edge: sealed shards with a graph, plus small shards
searched exactly, sealed in a child process while searches go on.

One folder holds the shards and `manifest.json` (qdrant_edge_manifest.py), which names them:
`sealed` (graph shards, oldest and largest first) and `exact` (oldest first; the last is the
live shard new rows go to, the others are frozen, waiting to be sealed). A search asks every
shard and merges by score with the tie rule of `_payload` (qdrant_edge_search.py).

Sealing (`seal_if_due`, or `optimize` for everything into one shard): the live shard is frozen
and a fresh one takes new rows (manifest written); the frozen shards, and the newest sealed
shards when a size class is full (`shards_to_merge`), are flushed and copied aside, the only step
that holds writes (not searches) back; a child process (qdrant_edge_build.py) builds the new
sealed shard from the copies; a host process opens it (qdrant_edge_host.py: opening a shard
holds the interpreter lock for a time that grows with its rows, so it never happens in the
server's process); then the state updates and the rows' moves made meanwhile are replayed onto
it, the manifest is replaced (os.replace), and the shards it replaces are dropped once no search
still reads them. A build seals its new rows into a shard of their own and leaves the older
sealed shards as they are, so it copies and builds little however large the index. The manifest
is the truth: at open, any folder it does not name is an interrupted build or a shard never
published, and is deleted; frozen shards stay searched exactly until the next build seals them.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
from qdrant_edge import Filter

from schemas.rows import Row
from services.adapters.vector._payload import scope_filter
from services.adapters.vector.qdrant_edge_exact import MirroredEdgeShard
from services.adapters.vector.qdrant_edge_build import (
    BuildFailed,
    BuildJournal,
    BuildRecord,
)
from services.adapters.vector.qdrant_edge_host import HostedShard
from services.adapters.vector.qdrant_edge_manifest import (
    PublishedTiers,
    Shard,
    Tiers,
    last_shard_number,
    open_together,
    read_manifest,
    shards_to_merge,
    sweep,
    write_manifest,
)
from services.adapters.vector.qdrant_edge_search import merged_cut, widening_search
from services.adapters.vector.qdrant_edge_tiers_swap import BuildSwap
from services.core.scope import Scope
from services.errors import InvalidVectors, OrgmemError
from services.ports import Hit

log = logging.getLogger(__name__)


class TieredEdgeVectorIndex(BuildSwap):
    """seal_rows: rows searched exactly (frozen + live shards, and sealed points outside a graph)
    at which `seal_if_due` starts a build. on_step(name) is called at each step of a build
    ("frozen", "copied", "child-started", "built", "swapped", "dropped"): crash tests stop the
    process there."""

    def __init__(self, path: Path, dim: int, search_ef: int | None = None, seal_rows: int = 20_000,
                 on_step: Callable[[str], None] | None = None):
        if dim <= 0:
            raise OrgmemError(f"dim: expected a positive vector size, got {dim}")
        if not isinstance(seal_rows, int) or seal_rows < 1:
            raise OrgmemError(f"vector_seal_rows: expected a positive integer, got {seal_rows!r}")
        self.path, self.dim, self.seal_rows = Path(path), dim, seal_rows
        self._search_ef, self._on_step = search_ef, on_step or (lambda step: None)
        self._write = threading.RLock()  # writes, freezing and swapping never interleave
        self._held = False  # the build gate is taken by builds_held, not by a build
        self._build_gate = threading.Lock()  # held by the one build running
        self._cancel = threading.Event()
        self._child: subprocess.Popen | None = None
        self._journal: BuildJournal | None = None
        self.record = BuildRecord()
        self._seq = 0
        self._published = PublishedTiers(self._open())

    # --- lifecycle -------------------------------------------------------------------------

    def _open(self) -> Tiers:
        manifest = read_manifest(self.path)
        self._seq = last_shard_number(self.path)
        names = [*manifest["sealed"], *manifest["exact"]]
        if not manifest["exact"]:  # a migrated index: new rows need a live shard
            names.append(self._new_name("x"))
        opened = open_together(names, self._shard)
        sealed = len(manifest["sealed"])
        tiers = Tiers(tuple(opened[:sealed]), tuple(opened[sealed:]))
        write_manifest(self.path, tiers)
        sweep(self.path, tiers)
        return tiers

    def _shard(self, name: str) -> Shard:
        """A sealed shard is opened by a host process of its own (qdrant_edge_host.py): opening
        one here would hold the interpreter lock, and every request, for as long as it reads.
        Shards of the tiers have no write-ahead log: each write is flushed before it returns
        (and the projector replays a batch cut short), and without one a shard is created in a
        fraction of the time and copied without its preallocated log files."""
        if name.startswith("s-"):
            return HostedShard(self.path / name, self.dim, self._search_ef)
        return MirroredEdgeShard(self.path / name, self.dim, self._search_ef,
                                 wal=None if (self.path / name).exists() else False)

    def _new_name(self, kind: str) -> str:
        self._seq += 1
        return f"{kind}-{self._seq:06d}"

    @property
    def _tiers(self) -> Tiers:
        return self._published.current

    def close(self) -> None:
        self._stop_build()
        with self._build_gate, self._write:
            for shard in self._tiers.all():
                shard.close()

    def reset(self) -> None:
        self._stop_build()
        with self._build_gate, self._write:
            old = self._tiers
            for shard in old.all():
                shard.close()
            shutil.rmtree(self.path, ignore_errors=True)
            self._published.publish(self._open())

    def count(self) -> int:
        with self._published.reading() as tiers:
            return sum(shard.count() for shard in tiers.all())

    # --- writes ----------------------------------------------------------------------------

    def upsert(self, rows: Sequence[Row], vectors: np.ndarray, positions: Mapping[str, int] | None = None) -> None:
        """Into the live shard; a row already in an older shard leaves it (a re-upsert replaces)."""
        with self._write:
            tiers = self._tiers
            refused: dict[str, str] = {}
            try:
                tiers.exact[-1].upsert(rows, vectors)
            except InvalidVectors as exc:
                refused = exc.problems
                raise
            finally:
                went_in = [r.row_id for r in rows if r.row_id not in refused]
                for shard in [*tiers.sealed, *tiers.exact[:-1]]:
                    moved = shard.discard(went_in) if went_in else []
                    if self._journal is not None:
                        self._journal.moved.update(moved)

    def update_state(self, rows: Sequence[Row], positions: Mapping[str, int] | None = None) -> None:
        if not rows:
            return
        with self._write:
            for shard in self._tiers.all():
                shard.update_state(rows)
            if self._journal is not None:
                self._journal.states.update({row.row_id: row for row in rows})

    def delete(self, row_ids: Sequence[str]) -> None:
        """Erase rows from every shard (each rewritten without them: see QdrantEdgeVectorIndex.delete).
        A running build is cancelled first, its copies deleted: they hold the rows too."""
        self._stop_build()
        with self._build_gate, self._write:
            for shard in self._tiers.all():
                shard.delete(row_ids)

    # --- reads -----------------------------------------------------------------------------

    def search(self, vector: np.ndarray, scope: Scope, limit: int, exact: bool = False) -> list[Hit]:
        wanted = scope_filter(scope)
        with self._published.reading() as tiers:

            def ask(query: list[float], qfilter: Filter, fetch: int) -> list[Hit] | None:
                # Every host is asked first: their graphs are searched while this thread searches
                # the exact shards' copies in memory.
                with ExitStack() as asked:
                    graphs = [asked.enter_context(shard.asking(query, scope, fetch, exact)) for shard in tiers.sealed]
                    found = [shard.exact_nearest(query, wanted, fetch) for shard in tiers.exact]
                    return merged_cut([*(hits() for hits in graphs), *found], limit, fetch)

            return widening_search(vector, self.dim, scope, limit, ask)

    def vectors(self, row_ids: Sequence[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self._published.reading() as tiers:
            for shard in reversed(tiers.all()):  # newest first: a moved row's current vector
                missing = [rid for rid in row_ids if rid not in found]
                if not missing:
                    break
                found.update(shard.vectors(missing))
        return found

    # --- sealing ---------------------------------------------------------------------------

    def graph_status(self) -> dict:
        """Rows in a graph, rows searched exactly, and the builds (for /metrics and `orgmem stats`)."""
        with self._published.reading() as tiers:
            sizes = [shard.sizes() for shard in tiers.sealed]
            hosts_rss = sum(shard.host_rss_bytes() for shard in tiers.sealed)
            exact = sum(shard.count() for shard in tiers.exact)
        sealed = sum(points for points, _ in sizes)
        # The engine counts a discarded point as graphed until its segment is rebuilt.
        graphed = sum(min(points, graphed) for points, graphed in sizes)
        return {"rows_in_graph": graphed, "rows_searched_exactly": exact + sealed - graphed,
                "sealed_shards": len(sizes), "shard_hosts_rss_bytes": hosts_rss,
                "seal_rows": self.seal_rows, "builds_running": int(self._build_gate.locked() and not self._held),
                "builds_done": self.record.done, "builds_failed": self.record.failed,
                "builds_cancelled": self.record.cancelled, "builds_deferred": self.record.deferred,
                "last_build_finished_at": self.record.last_finished_at,
                "last_build_seconds": self.record.last_seconds}

    def seal_if_due(self, space_for: Callable[[int], bool] | None = None) -> bool:
        """Start a build in the background when the rows searched exactly reach `seal_rows`;
        returns at once (True when one started). `space_for(bytes)`: whether the disk may take
        what the build writes (`build_bytes`); a build it refuses is deferred, not started."""
        if self._build_gate.locked() or self.graph_status()["rows_searched_exactly"] < self.seal_rows:
            return False
        if space_for is not None and not space_for(self.build_bytes()):
            self.record.deferred += 1
            return False
        if not self._build_gate.acquire(blocking=False):
            return False
        threading.Thread(target=self._build_then_release, name="orgmem-vector-seal", daemon=True).start()
        return True

    def build_bytes(self) -> int:
        """What the next build writes at most: a copy of the exact shards and of the sealed ones
        it merges, for the child, and the new sealed shard, about as large again. Files are
        counted at their length, not their blocks: the copy writes a preallocated file's holes
        out whole."""
        with self._published.reading() as tiers:
            folders = [shard.path for shard in (*self._merging(tiers, everything=False), *tiers.exact)]
        return 2 * sum(f.stat().st_size for folder in folders for f in folder.rglob("*") if f.is_file())

    def _merging(self, tiers: Tiers, everything: bool) -> tuple[Shard, ...]:
        """The sealed shards a build merges into the one it builds: the newest, by size class;
        every one for `optimize`, or while one has name-based ids (the child re-keys them)."""
        if everything or not all(shard.carrying for shard in tiers.sealed):
            return tiers.sealed
        new_rows = sum(shard.count() for shard in tiers.exact)
        merged = shards_to_merge([shard.count() for shard in tiers.sealed], new_rows, self.seal_rows)
        return tiers.sealed[len(tiers.sealed) - merged:]

    def optimize(self) -> bool:
        """Seal every row into one graph shard now, waiting for the build (`orgmem optimize`);
        True when anything changed."""
        status = self.graph_status()
        if status["rows_searched_exactly"] == 0 and status["sealed_shards"] <= 1:
            return False
        with self._build_gate:
            self._build(everything=True)
        return True

    def _build_then_release(self) -> None:
        try:
            self._build()
        except BuildFailed as exc:
            log.log(logging.INFO if self._cancel.is_set() else logging.ERROR,
                    "vector index at %s: sealing stopped (%s); the rows stay searched exactly", self.path, exc)
        except Exception:
            log.exception("vector index at %s: sealing failed; the rows stay searched exactly", self.path)
        finally:
            self._build_gate.release()

    def _build(self, everything: bool = False) -> None:
        started, clock = time.time(), time.perf_counter()
        with self._write:
            target = self.path / self._new_name("s")
            inputs = target.with_name(target.name + ".inputs")
        sealed: HostedShard | None = None
        try:
            with self._write:
                replaced = self._freeze_and_copy(target, inputs, everything)
            self._run_child(target, inputs)
            sealed = self._open_built(target)
            with self._write:
                self._swap_in(replaced, sealed)
            self._published.drain()
            for shard in replaced:
                shard.close()
                shutil.rmtree(shard.path, ignore_errors=True)
            self._on_step("dropped")
        except BaseException:
            if self._cancel.is_set():
                self.record.cancelled += 1
            else:
                self.record.failed += 1
            with self._write:
                self._journal = None
                if target not in {shard.path for shard in self._tiers.sealed}:
                    if sealed is not None:
                        sealed.close()
                    shutil.rmtree(target, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(inputs, ignore_errors=True)
        self.record.done += 1
        self.record.last_finished_at, self.record.last_seconds = time.time(), time.perf_counter() - clock
        log.info("vector index at %s: sealed %d shard(s) into one in %.1f s (started %s)", self.path,
                 len(replaced), self.record.last_seconds, time.strftime("%H:%M:%S", time.localtime(started)))

    def _freeze_and_copy(self, target: Path, inputs: Path, everything: bool) -> tuple[Shard, ...]:
        """A fresh live shard takes new rows; the frozen shards and the sealed ones merged with
        them are copied for the child. Returns the shards the new sealed one replaces."""
        tiers = self._tiers
        replaced = (*self._merging(tiers, everything), *tiers.exact)
        fresh = Tiers(tiers.sealed, (*tiers.exact, self._shard(self._new_name("x"))))
        write_manifest(self.path, fresh)
        self._published.publish(fresh)
        self._on_step("frozen")
        inputs.mkdir()
        for shard in replaced:
            shard.flush()
        # The largest merged shard is extended in place (only the others' rows get a graph built);
        # one with name-based ids goes in as an input, re-keyed by the child.
        base = max((shard for shard in replaced if shard in tiers.sealed and shard.carrying),
                   key=lambda shard: shard.count(), default=None)
        if base is not None:
            shutil.copytree(base.path, target)
        for shard in replaced:
            if shard is not base:
                shutil.copytree(shard.path, inputs / shard.path.name)
        self._journal = BuildJournal()
        self._on_step("copied")
        return replaced

    @contextmanager
    def builds_held(self) -> Iterator[None]:
        """No build runs inside (a backup copies the folder, whose shards a swap would replace): a
        running one is cancelled, and none starts until the block ends."""
        while not self._build_gate.acquire(timeout=0.1):
            self._stop_build()
        self._held = True
        try:
            yield
        finally:
            self._held = False
            self._build_gate.release()

    def _stop_build(self) -> None:
        """Cancel a running build and wait until it has cleaned up."""
        if not self._build_gate.locked():
            return
        self._cancel.set()
        child = self._child
        if child is not None:
            child.kill()
        with self._build_gate:
            self._cancel.clear()

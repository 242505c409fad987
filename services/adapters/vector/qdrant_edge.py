"""VectorIndex on Qdrant Edge: the Qdrant engine in-process, one shard in one folder.

Writes go to the shard's appendable segment and are searched exactly (brute force under the
payload filter). Building the HNSW graph is `optimize()`, a separate, blocking call for the
indexer or the CLI after a bulk load: it holds the Python interpreter lock for its whole run
(tens of seconds at 100k rows), so it must never run on the request path.

Point ids spell orgmem's row ids (`carrying_point_id`), so a search reads no payload unless
scores tie. A shard made before that (no `CARRYING_MARKER` in its folder) keeps name-based ids,
read through the payload, until `optimize()` copies it over (or `orgmem rebuild` resets it).
"""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Iterator, Mapping, Sequence, Set
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from qdrant_edge import (
    AcornSearchParams,
    Distance,
    EdgeConfig,
    EdgeOptimizersConfig,
    EdgeShard,
    EdgeVectorParams,
    Filter,
    Point,
    Query,
    QueryRequest,
    SearchParams,
    UpdateOperation,
)

from schemas.rows import Row
from services.adapters.vector._payload import (
    HIT_FIELDS,
    Scored,
    carrying_point_id,
    checked_batch,
    checked_search_ef,
    cut,
    point_id,
    rank,
    row_payload,
)
from services.adapters.vector.qdrant_edge_search import (ensure_payload_indexes, scored_points, stored_pages,
                                                          widening_search)
from services.core.scope import Scope
from services.errors import BackendUnavailable, InvalidVectors, OrgmemError
from services.ports import Hit

log = logging.getLogger(__name__)

COMPONENT = "vector index"
# Points per update call: bounds the Python-side lists built for one call.
UPSERT_BATCH = 1000
# Present in a shard whose point ids carry their row ids (`carrying_point_id`). Shards made
# before it keep name-based ids, and read each hit's row id from the payload, until `optimize()`.
CARRYING_MARKER = "orgmem-point-ids"


# ACORN explores the graph through neighbours' neighbours when the filter rejects most of them.
# Without it, scope filters (tenant + acl + state) cut HNSW recall@50 to 0.12 at 100k rows
# (bench/vector_index_speed.py); with it, a 20k-row probe measured 1.0 against exact search.
_EXACT = SearchParams(exact=True)


class QdrantEdgeVectorIndex:
    """search_ef: how many candidates the graph search keeps (HNSW ef); None leaves the engine's
    default (the build's ef_construct, 100). See `checked_search_ef` for what it buys.
    optimizers: the segment policy `optimize()` follows (the tiered index's sealed shards keep
    several graph segments, so that sealing new rows builds a graph of those rows only).
    wal: False creates the shard without a write-ahead log (every write here is flushed anyway; a
    sealed shard without one is half the size to copy and opens faster); None, on opening a shard,
    keeps what it has (a value other than the one it was created with is refused by the engine)."""

    def __init__(self, path: Path, dim: int, search_ef: int | None = None,
                 optimizers: EdgeOptimizersConfig | None = None, wal: bool | None = None):
        if dim <= 0:
            raise OrgmemError(f"dim: expected a positive vector size, got {dim}")
        self.path = Path(path)
        self.dim = dim
        self._search_params = SearchParams(acorn=AcornSearchParams(enable=True), hnsw_ef=checked_search_ef(search_ef))
        self._optimizers, self._wal = optimizers, wal
        self._lock = threading.Lock()  # writes and open/close/reset never interleave
        self._carrying = False
        self._shard: EdgeShard | None = self._open()

    # --- lifecycle -------------------------------------------------------------------------

    def _config(self) -> EdgeConfig:
        return EdgeConfig(vectors=EdgeVectorParams(size=self.dim, distance=Distance.Cosine), optimizers=self._optimizers,
                          wal_enabled=self._wal)

    def _open(self) -> EdgeShard:
        self._finish_swap()
        existing = self.path.is_dir() and any(f.name != CARRYING_MARKER for f in self.path.iterdir())
        with self._driver("open"):
            try:
                if existing:
                    shard = EdgeShard.load(str(self.path), self._config())
                else:
                    self.path.mkdir(parents=True, exist_ok=True)
                    # Written before the shard: a shard never exists with carrying ids unmarked.
                    (self.path / CARRYING_MARKER).write_text("row ids carried in point ids\n")
                    shard = EdgeShard.create(str(self.path), self._config())
            except Exception as exc:
                if "incompatible" in str(exc):
                    raise OrgmemError(
                        f"vector index at {self.path}: stored shard does not fit dim={self.dim}: {exc}"
                    ) from exc
                raise
            self._carrying = (self.path / CARRYING_MARKER).exists()
            # Created on every open, not only on create: a shard created by a run that stopped
            # before its indexes were made still gets them.
            ensure_payload_indexes(shard)
        return shard

    def close(self) -> None:
        with self._lock:
            shard, self._shard = self._shard, None
            if shard is not None:
                with self._driver("close"):
                    shard.flush()
                    shard.close()

    def count(self) -> int:
        return self.sizes()[0]

    def sizes(self) -> tuple[int, int]:
        """(points, points in a graph segment); (0, 0) once closed."""
        with self._lock, self._driver("count"):
            if self._shard is None:
                return 0, 0
            info = self._shard.info()
            return info.points_count, info.indexed_vectors_count

    def flush(self) -> None:
        with self._lock, self._driver("flush"):
            self._live().flush()

    @property
    def carrying(self) -> bool:
        """Whether point ids spell row ids (a shard made before that reads them from payloads)."""
        return self._carrying

    def payload_schema(self) -> dict[str, bool]:
        """Each payload index's name and whether it is kept on disk (for tests and diagnostics)."""
        with self._lock, self._driver("payload schema"):
            stored = self._live().info().payload_schema
        return {name: bool(getattr(info.params, "on_disk", None)) for name, info in stored.items()}

    def absorb(self, folder: Path) -> None:
        """Add every point of the closed shard in `folder`, keyed by its row id, with its stored
        vector and payload (a build merges shards so: nothing is encoded again)."""
        with self._lock, self._driver(f"copy the points of {folder}"):
            source = EdgeShard.load(str(folder))
            try:
                copy_points(source, self._live(), rekey=True)
            finally:
                source.close()

    def refit_payload_indexes(self) -> None:
        """Give the shard the payload indexes of now, as now kept (a shard sealed before them)."""
        with self._lock, self._driver("payload indexes"):
            ensure_payload_indexes(self._live(), refit=True)

    def reset(self) -> None:
        """Drop every point and start an empty shard in the same folder (for a rebuild)."""
        with self._lock:
            shard, self._shard = self._shard, None
            if shard is not None:
                with self._driver("close before reset"):
                    shard.close()
            shutil.rmtree(self.path, ignore_errors=True)
            self._shard = self._open()

    def optimize(self) -> bool:
        """Build the HNSW graph and merge segments; blocks (and holds the GIL) until done.

        A shard with name-based point ids is first copied to carrying ids: the stored vectors and
        payloads, nothing encoded again. Returns True when anything changed. Call after bulk
        loads, off the request path."""
        with self._lock:
            upgraded = not self._carrying
            if upgraded:
                self._copy_to_carrying_ids()
            shard = self._live()
            with self._driver("optimize"):
                changed = shard.optimize()
                shard.flush()
            return bool(changed) or upgraded

    def _copy_to_carrying_ids(self) -> None:
        """Copy every point into a new shard beside this one, then swap the folders. An
        interrupted copy leaves this shard as it was; an interrupted swap is finished or undone
        by the next open (`_finish_swap`)."""
        staging, retired = self._beside("carrying"), self._beside("retired")
        shutil.rmtree(staging, ignore_errors=True)
        log.info("vector index at %s: copying its points to row-carrying point ids", self.path)
        target = QdrantEdgeVectorIndex(staging, self.dim, self._search_params.hnsw_ef, self._optimizers, self._wal)
        try:
            shard = self._live()
            with self._driver("copy to carrying point ids"):
                copy_points(shard, target._live(), rekey=True)
        finally:
            target.close()
        with self._driver("close before the swap"):
            shard.close()
        self._shard = None
        self.path.rename(retired)
        staging.rename(self.path)
        self._shard = self._open()

    def delete(self, row_ids: Sequence[str]) -> None:
        """Erase rows so that no file of the shard keeps their payload or vector. A Qdrant delete
        only marks points (their payload stays in the payload storage, its indexes and the WAL),
        so every other point is copied into a fresh shard, which replaces this one the way
        `optimize` upgrades ids. The new shard has no graph until the next `orgmem optimize`."""
        gone = {self._point_id(r) for r in row_ids}
        with self._lock:
            shard = self._live()
            with self._driver("delete"):
                present = [str(p.id) for p in shard.retrieve(list(gone), with_payload=False, with_vector=False)]
            if not present:
                return
            staging, retired = self._beside("erasing"), self._beside("retired")
            shutil.rmtree(staging, ignore_errors=True)
            target = QdrantEdgeVectorIndex(staging, self.dim, self._search_params.hnsw_ef, self._optimizers, self._wal)
            try:
                with self._driver("copy without erased points"):
                    copy_points(shard, target._live(), rekey=False, leave_out=gone)
            finally:
                target.close()
            if not self._carrying:
                (staging / CARRYING_MARKER).unlink(missing_ok=True)  # the copy kept name-based ids
            with self._driver("close before the swap"):
                shard.close()
            self._shard = None
            self.path.rename(retired)
            staging.rename(self.path)
            shutil.rmtree(retired, ignore_errors=True)
            self._shard = self._open()

    def _finish_swap(self) -> None:
        retired = self._beside("retired")
        if retired.exists() and not self.path.exists():
            retired.rename(self.path)  # stopped between the two renames: keep the old shard
        shutil.rmtree(retired, ignore_errors=True)

    def _beside(self, role: str) -> Path:
        return self.path.with_name(f"{self.path.name}.{role}")

    # --- writes ----------------------------------------------------------------------------

    def upsert(self, rows: Sequence[Row], vectors: np.ndarray, positions: Mapping[str, int] | None = None) -> None:
        """Index rows with their vectors; a re-upsert replaces. Durable (flushed) on return.
        `positions` goes unused: one process owns the shard (the data folder's lock), so no
        stalled writer can come back to it."""
        matrix, problems = checked_batch(rows, vectors, self.dim)
        points = [
            Point(self._point_id(row.row_id), matrix[i].tolist(), row_payload(row))
            for i, row in enumerate(rows)
            if row.row_id not in problems
        ]
        with self._lock:
            shard = self._live()
            with self._driver("upsert"):
                for start in range(0, len(points), UPSERT_BATCH):
                    shard.update(UpdateOperation.upsert_points(points[start : start + UPSERT_BATCH]))
                if points:
                    shard.flush()
        if problems:
            raise InvalidVectors(problems)

    def discard(self, row_ids: Sequence[str]) -> list[str]:
        """Drop rows' points the engine's way (marked deleted, payload kept on file until the
        segment is rewritten): for a row that moved to another shard, not for erasure. Returns the
        row ids that were here."""
        by_point = {self._point_id(rid): rid for rid in row_ids}
        with self._lock:
            shard = self._live()
            with self._driver("discard"):
                present = [str(p.id) for p in shard.retrieve(list(by_point), with_payload=False, with_vector=False)]
                if present:
                    shard.update(UpdateOperation.delete_points(present))
                    shard.flush()
        return [by_point[pid] for pid in present]

    def update_state(self, rows: Sequence[Row], positions: Mapping[str, int] | None = None) -> None:
        """Replace the payload of rows already indexed (state and the rest); vectors stay.
        `positions` goes unused, as in `upsert`."""
        if not rows:
            return
        latest = {row.row_id: row for row in rows}  # the last version of a row in the batch wins
        with self._lock:
            shard = self._live()
            with self._driver("update_state"):
                present = {
                    str(record.id)
                    for record in shard.retrieve(
                        [self._point_id(rid) for rid in latest], with_payload=False, with_vector=False
                    )
                }
                # Overwrite, not merge: a key that became absent (event_time, thread) must go.
                for row_id, row in latest.items():
                    pid = self._point_id(row_id)
                    if pid in present:
                        shard.update(UpdateOperation.overwrite_payload([pid], row_payload(row)))
                if present:
                    shard.flush()

    # --- reads -----------------------------------------------------------------------------

    def search(self, vector: np.ndarray, scope: Scope, limit: int, exact: bool = False) -> list[Hit]:
        """Cosine nearest rows admitted by `scope`; the scope is a filter inside the search.

        exact: a brute-force search instead of the graph, to measure the graph's recall."""
        return widening_search(vector, self.dim, scope, limit, lambda query, qfilter, fetch: cut(
            self.nearest(query, qfilter, fetch, exact), limit, fetch))

    def nearest(self, query: list[float], qfilter: Filter, fetch: int, exact: bool) -> list[Scored]:
        """The `fetch` best points under the filter, ranked by the tie rule (`search`'s one pass;
        the tiered index merges these lists from several shards)."""
        shard = self._live()
        with self._driver("search"):
            points = shard.query(
                QueryRequest(
                    limit=fetch,
                    query=Query.Nearest(query),
                    filter=qfilter,
                    with_payload=False if self._carrying else HIT_FIELDS,
                    params=_EXACT if exact else self._search_params,
                )
            )
            return rank(scored_points(shard, points, self._carrying))

    def vectors(self, row_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored (unit-norm) vectors by row id; ids not indexed are absent."""
        if not row_ids:
            return {}
        by_point = {self._point_id(rid): rid for rid in row_ids}
        shard = self._live()
        with self._driver("vectors"):
            records = shard.retrieve(list(by_point), with_payload=False, with_vector=True)
        kept = [(by_point[str(record.id)], stored) for record in records if (stored := dense(record.vector)) is not None]
        if not kept:
            return {}
        # One conversion for all of them: a list of floats each cost more than reading the points.
        matrix = np.asarray([stored for _, stored in kept], dtype=np.float32)
        return {rid: matrix[i] for i, (rid, _) in enumerate(kept)}

    def _point_id(self, row_id: str) -> str:
        return carrying_point_id(row_id) if self._carrying else point_id(row_id)

    # --- boundary --------------------------------------------------------------------------

    def _live(self) -> EdgeShard:
        shard = self._shard
        if shard is None:
            raise BackendUnavailable(COMPONENT, f"Qdrant Edge shard at {self.path} is closed")
        return shard

    @contextmanager
    def _driver(self, action: str) -> Iterator[None]:
        """The one place Qdrant Edge errors become ours (the driver raises bare Exception)."""
        try:
            yield
        except OrgmemError:
            raise
        except Exception as exc:
            raise BackendUnavailable(COMPONENT, f"Qdrant Edge at {self.path}: {action} failed: {exc}") from exc


def dense(vector):
    """The default vector of a record (the driver may return the named-vector form)."""
    return vector.get("") if isinstance(vector, dict) else vector


def copy_points(source: EdgeShard, target: EdgeShard, rekey: bool, leave_out: Set[str] = frozenset()) -> None:
    """Every point of `source` not in `leave_out` into `target`, vector and payload as stored (nothing
    encoded again), keyed by its row id (`carrying_point_id`) when `rekey`, else by its own id."""
    for points in stored_pages(source):
        copies = [Point(carrying_point_id(p.payload["row_id"]) if rekey else pid, dense(p.vector), p.payload)
                  for p in points if (pid := str(p.id)) not in leave_out]
        if copies:
            target.update(UpdateOperation.upsert_points(copies))

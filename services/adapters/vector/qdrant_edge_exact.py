"""The exact shards of the tiered index (qdrant_edge_tiers.py), searched from a copy in memory.

The rows not yet in a graph (up to `vector_seal_rows`, 10,000 by default) are searched by brute
force on every query. The engine's exact search of 10k rows took 1.28 ms on this 2-core host (one
core, the interpreter lock released); one matrix product over the same vectors, with the scope's
conditions as boolean masks over columns of codes, takes 0.33 ms. So each exact shard keeps its
vectors as a float32 matrix and the payload fields a scope filters on as arrays, written with
every write to the shard and read back from it whenever it opens (the shard on disk stays the
record: a crash loses nothing the copy held). At 10k rows the copy holds 15 MiB of vectors.

The meaning of a scope is `_payload.scope_filter`'s conditions; a condition on a field this copy
does not keep is refused with an error, never passed over (that could admit a row the access list
keeps out). The tests hold the copy's answers to the engine's and to numpy's exact top-k.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
from schemas.rows import Row
from services.adapters.vector._payload import (
    DATETIME_FIELDS,
    TENANT_FIELD,
    Condition,
    Scored,
    ScopeFilter,
    rank,
    row_payload,
)
from services.adapters.vector.qdrant_edge import QdrantEdgeVectorIndex, dense
from services.adapters.vector.qdrant_edge_search import stored_pages
from services.errors import InvalidVectors, OrgmemError

# Fields kept as one code per row (a dictionary of the field's values); `acl` is kept as the code
# of the row's whole token list, decided once per distinct list and query.
CODED_FIELDS = (TENANT_FIELD, "state", "kind", "author", "thread")
NO_VALUE = -1  # the code of an absent field (a row without a thread): it matches no condition
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(text: str) -> int:
    """An RFC 3339 time as `_payload.rfc3339` writes it (UTC, microseconds), in microseconds since
    1970: whole numbers, so a bound equal to a stored time compares equal (years 1 to 9999)."""
    moment = datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return (moment - EPOCH) // timedelta(microseconds=1)


class ExactMirror:
    """Rows' unit vectors and filter fields in arrays; slots are reused only after a compaction."""

    def __init__(self, dim: int):
        self.dim = dim
        self._lock = threading.Lock()  # a search reads a consistent set of arrays
        self._clear()

    def _clear(self) -> None:
        self._slot: dict[str, int] = {}
        self._ids: list[str | None] = []
        self._matrix = np.zeros((0, self.dim), dtype=np.float32)
        self._alive = np.zeros(0, dtype=bool)
        self._positions = np.zeros(0, dtype=np.int64)
        self._codes = {name: np.zeros(0, dtype=np.int32) for name in (*CODED_FIELDS, "acl")}
        self._times = {name: np.zeros(0, dtype=np.int64) for name in DATETIME_FIELDS}
        self._dated = {name: np.zeros(0, dtype=bool) for name in DATETIME_FIELDS}
        self._values: dict[str, dict[object, int]] = {name: {} for name in (*CODED_FIELDS, "acl")}
        self._acls: list[tuple[str, ...]] = []  # acl code -> its tokens

    def __len__(self) -> int:
        return len(self._slot)

    # --- writes ----------------------------------------------------------------------------

    def put(self, payloads: Sequence[Mapping], vectors: np.ndarray) -> None:
        """Rows by their payload (`_payload.row_payload`) and vector; a row already here is replaced."""
        if not payloads:
            return
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        units = (vectors / np.where(norms == 0, 1, norms)).astype(np.float32)
        with self._lock:
            fresh = [p["row_id"] for p in payloads if p["row_id"] not in self._slot]
            self._grow(len(dict.fromkeys(fresh)))
            for payload, unit in zip(payloads, units, strict=True):
                slot = self._slot.get(payload["row_id"])
                if slot is None:
                    slot = self._slot[payload["row_id"]] = len(self._ids)
                    self._ids.append(payload["row_id"])
                self._matrix[slot] = unit
                self._alive[slot] = True
                self._write_fields(slot, payload)

    def restate(self, payloads: Iterable[Mapping]) -> None:
        """New payloads for rows already here (their vectors stay); others are passed over."""
        with self._lock:
            for payload in payloads:
                slot = self._slot.get(payload["row_id"])
                if slot is not None:
                    self._write_fields(slot, payload)

    def drop(self, row_ids: Iterable[str]) -> None:
        with self._lock:
            for row_id in row_ids:
                slot = self._slot.pop(row_id, None)
                if slot is not None:
                    self._alive[slot], self._ids[slot] = False, None
                    self._matrix[slot] = 0.0  # an erased row's vector leaves memory too
            if len(self._ids) > 1024 and len(self._slot) < len(self._ids) // 2:
                self._compact()

    def clear(self) -> None:
        with self._lock:
            self._clear()

    def _grow(self, extra: int) -> None:
        need, have = len(self._ids) + extra, len(self._alive)
        if need <= have:
            return
        size = max(need, 2 * have, 256)
        self._matrix = _resized(self._matrix, size)
        self._alive, self._positions = _resized(self._alive, size), _resized(self._positions, size)
        for group in (self._codes, self._times, self._dated):
            for name, column in group.items():
                group[name] = _resized(column, size)

    def _compact(self) -> None:
        keep = np.flatnonzero(self._alive[: len(self._ids)])
        self._matrix, self._alive, self._positions = self._matrix[keep], self._alive[keep], self._positions[keep]
        for group in (self._codes, self._times, self._dated):
            for name, column in group.items():
                group[name] = column[keep]
        self._ids = [self._ids[i] for i in keep]
        self._slot = {row_id: i for i, row_id in enumerate(self._ids)}

    def _write_fields(self, slot: int, payload: Mapping) -> None:
        self._positions[slot] = payload.get("ingest_position", -1)
        for name in CODED_FIELDS:
            value = payload.get(name)
            self._codes[name][slot] = NO_VALUE if value is None else self._code(name, value)
        self._codes["acl"][slot] = self._code("acl", tuple(payload.get("acl") or ()))
        for name in DATETIME_FIELDS:
            text = payload.get(name)
            self._dated[name][slot] = text is not None
            self._times[name][slot] = _micros(text) if text is not None else 0

    def _code(self, name: str, value: object) -> int:
        codes = self._values[name]
        code = codes.get(value)
        if code is None:
            code = codes[value] = len(codes)
            if name == "acl":
                self._acls.append(value)
        return code

    # --- reads -----------------------------------------------------------------------------

    def nearest(self, query: Sequence[float], wanted: ScopeFilter, fetch: int) -> list[Scored]:
        """The `fetch` best rows that `wanted` admits, ranked by the tie rule (the engine's
        `nearest`, answered from memory)."""
        vector = np.asarray(query, dtype=np.float32)
        vector = vector / np.linalg.norm(vector)
        with self._lock:
            n = len(self._ids)
            if n == 0 or wanted.empty:
                return []
            mask = self._alive[:n].copy()
            for condition in wanted.must:
                mask &= self._test(condition, n)
            for condition in wanted.must_not:
                mask &= ~self._test(condition, n)
            admitted = np.flatnonzero(mask)
            if admitted.size == 0:
                return []
            scores = self._matrix[:n] @ vector  # all rows: cheaper than gathering the admitted ones
            scores = scores[admitted]
            if admitted.size > fetch:
                best = np.argpartition(-scores, fetch - 1)[:fetch]
                admitted, scores = admitted[best], scores[best]
            found = [Scored(self._ids[i], float(s), int(self._positions[i])) for i, s in zip(admitted, scores, strict=True)]
        return rank(found)

    def vectors(self, row_ids: Sequence[str]) -> dict[str, np.ndarray]:
        with self._lock:
            return {rid: self._matrix[slot].copy() for rid in row_ids if (slot := self._slot.get(rid)) is not None}

    def _test(self, condition: Condition, n: int) -> np.ndarray:
        name, op, value = condition.key, condition.op, condition.value
        if name == "row_id" and op == "any":
            mask = np.zeros(n, dtype=bool)
            mask[[slot for rid in value if (slot := self._slot.get(rid)) is not None]] = True
            return mask
        if name == "acl" and op == "any":
            tokens = frozenset(value)
            allowed = np.array([not tokens.isdisjoint(acl) for acl in self._acls] or [False])
            return allowed[self._codes["acl"][:n]]
        if name in CODED_FIELDS and op in ("eq", "any"):
            values = [value] if op == "eq" else value
            codes = [code for v in values if (code := self._values[name].get(v)) is not None]
            return np.isin(self._codes[name][:n], codes) if codes else np.zeros(n, dtype=bool)
        if name in DATETIME_FIELDS and op in ("lte", "gte"):
            times, bound = self._times[name][:n], _micros(value)
            return self._dated[name][:n] & (times <= bound if op == "lte" else times >= bound)
        raise OrgmemError(f"vector index: the exact shards' copy cannot test {op} on {name!r}")


def _resized(column: np.ndarray, size: int) -> np.ndarray:
    grown = np.zeros((size, *column.shape[1:]), dtype=column.dtype)
    grown[: len(column)] = column
    return grown


class MirroredEdgeShard(QdrantEdgeVectorIndex):
    """An exact shard of the tiers: a Qdrant Edge shard (the record, on disk) whose rows are also
    kept in an `ExactMirror`, which answers its searches and its vectors."""

    def _open(self):
        shard = super()._open()
        self.mirror = ExactMirror(self.dim)
        for points in stored_pages(shard):
            kept = [(p.payload, vector) for p in points if p.payload and (vector := dense(p.vector)) is not None]
            if kept:
                self.mirror.put([payload for payload, _ in kept], np.asarray([v for _, v in kept], dtype=np.float32))
        return shard

    def upsert(self, rows: Sequence[Row], vectors: np.ndarray, positions: Mapping[str, int] | None = None) -> None:
        """The engine first; the copy takes what the engine took (a failed write leaves it as it
        was, and the projector writes that batch again)."""
        try:
            super().upsert(rows, vectors, positions)
        except InvalidVectors as exc:
            self._copy(rows, vectors, exc.problems)
            raise
        self._copy(rows, vectors, {})

    def _copy(self, rows: Sequence[Row], vectors: np.ndarray, refused: Mapping[str, str]) -> None:
        matrix = np.asarray(vectors, dtype=np.float32)  # its shape checked by the engine's upsert
        kept = [i for i, row in enumerate(rows) if row.row_id not in refused]
        self.mirror.put([row_payload(rows[i]) for i in kept], matrix[kept])

    def discard(self, row_ids: Sequence[str]) -> list[str]:
        moved = super().discard(row_ids)
        self.mirror.drop(moved)
        return moved

    def update_state(self, rows: Sequence[Row], positions: Mapping[str, int] | None = None) -> None:
        super().update_state(rows, positions)
        self.mirror.restate(row_payload(row) for row in {row.row_id: row for row in rows}.values())

    def close(self) -> None:
        super().close()
        self.mirror.clear()

    def exact_nearest(self, query: Sequence[float], wanted: ScopeFilter, fetch: int) -> list[Scored]:
        self._live()  # a closed shard answers BackendUnavailable, as the engine's search does
        return self.mirror.nearest(query, wanted, fetch)

    def vectors(self, row_ids: Sequence[str]) -> dict[str, np.ndarray]:
        return self.mirror.vectors(row_ids)

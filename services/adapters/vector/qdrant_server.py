"""VectorIndex on a Qdrant server through `qdrant-client` (cluster profile).

The same class also runs on qdrant-client's local mode (`QdrantClient(path=...)` or
`":memory:"`), which speaks the same API; the contract tests use it when no server is there.
One collection holds every tenant; `tenant` is a tenant-partitioned payload index.

Several indexer processes write one collection, so a write that names the log position of each
row's state (`positions`, from the projector) keeps it in the payload (`state_position`) and is
conditional on it (Qdrant's conditional update, server 1.16 or later): a stalled indexer that
wakes after another has moved a row on cannot put the row's older state back.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np
from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from schemas.rows import Row
from services.adapters.vector._payload import (
    HIT_FIELDS,
    PAYLOAD_INDEXES,
    TIE_MARGIN,
    Condition,
    checked_batch,
    checked_limit,
    checked_query,
    checked_search_ef,
    cut,
    point_id,
    rank,
    row_payload,
    scope_filter,
    scored,
)
from services.core.scope import Scope
from services.errors import BackendUnavailable, InvalidVectors, OrgmemError
from services.ports import Hit

COMPONENT = "vector index"
# Points per request: keeps one HTTP body at a few MB for 384-d vectors.
UPSERT_BATCH = 256
# The log position of the event that produced the state in a point's payload.
STATE_POSITION = "state_position"


def older_than(position: int) -> qm.Filter:
    """Points whose payload state is from before `position`, or names no position (written
    before positions were kept, or without them)."""
    return qm.Filter(should=[qm.IsEmptyCondition(is_empty=qm.PayloadField(key=STATE_POSITION)),
                             qm.FieldCondition(key=STATE_POSITION, range=qm.Range(lt=position))])


def positioned_payload(row: Row, positions: Mapping[str, int] | None) -> dict[str, object]:
    payload = row_payload(row)
    if positions is not None and row.row_id in positions:
        payload[STATE_POSITION] = positions[row.row_id]
    return payload


class QdrantServerVectorIndex:
    """`client` is owned from here on: `close()` closes it. search_ef: as for the Edge adapter."""

    def __init__(self, client: QdrantClient, collection: str, dim: int, batch_size: int = UPSERT_BATCH,
                 search_ef: int | None = None):
        if dim <= 0:
            raise OrgmemError(f"dim: expected a positive vector size, got {dim}")
        if not collection:
            raise OrgmemError("collection: must be a non-empty name")
        self.client = client
        self.collection = collection
        self.dim = dim
        self.batch_size = max(1, batch_size)
        options = getattr(client, "init_options", {}) or {}
        local = options.get("path") is not None or options.get("location") == ":memory:"
        # ACORN keeps filtered HNSW recall up when the scope filter rejects most graph neighbours
        # (see the Edge adapter for the measurement). Local mode searches exactly and warns on
        # every call that search params do nothing.
        ef = checked_search_ef(search_ef)
        self._search_params = None if local else qm.SearchParams(acorn=qm.AcornSearchParams(enable=True), hnsw_ef=ef)
        self._ensure_collection()

    # --- lifecycle -------------------------------------------------------------------------

    def _ensure_collection(self) -> None:
        with self._driver("open collection"):
            # The name may be the alias of the live generation (services/adapters/cluster_generations.py).
            aliased = self.collection in {a.alias_name for a in self.client.get_aliases().aliases}
            if not aliased and not self.client.collection_exists(self.collection):
                try:
                    self.client.create_collection(
                        self.collection,
                        vectors_config=qm.VectorParams(size=self.dim, distance=qm.Distance.COSINE),
                    )
                except (UnexpectedResponse, ValueError):
                    # Another process may have created it between the check and the create.
                    if not self.client.collection_exists(self.collection):
                        raise
            info = self.client.get_collection(self.collection)
            stored = info.config.params.vectors
            if not isinstance(stored, qm.VectorParams) or stored.size != self.dim:
                raise OrgmemError(
                    f"collection {self.collection!r}: stored vectors are {stored}, expected one "
                    f"unnamed vector of size {self.dim}"
                )
            have = set(info.payload_schema or {})
            with warnings.catch_warnings():
                # Local mode warns that payload indexes are no-ops there; filters still work.
                warnings.filterwarnings("ignore", message="Payload indexes have no effect")
                for name, schema in _payload_indexes():
                    if name not in have:
                        self.client.create_payload_index(self.collection, name, field_schema=schema, wait=True)

    def close(self) -> None:
        with self._driver("close"):
            self.client.close()

    def reset(self) -> None:
        """Drop the collection and create it empty (for a rebuild)."""
        with self._driver("reset"):
            self.client.delete_collection(self.collection)
        self._ensure_collection()

    def optimize(self) -> bool:
        """Nothing to do: the server builds its HNSW graph in the background by itself.

        Present so callers can treat both adapters alike after a bulk load."""
        return False

    # --- writes ----------------------------------------------------------------------------

    def delete(self, row_ids: Sequence[str]) -> None:
        """Erase rows' points. The server drops their payloads at once and their vectors when its
        vacuum optimizer rewrites the segment (docs/erasure.md says what that leaves)."""
        if not row_ids:
            return
        with self._driver("delete"):
            self.client.delete(self.collection, points_selector=qm.PointIdsList(points=[point_id(r) for r in row_ids]),
                               wait=True)

    def upsert(self, rows: Sequence[Row], vectors: np.ndarray, positions: Mapping[str, int] | None = None) -> None:
        """Index rows with their vectors; a re-upsert replaces. Acknowledged = durable (wait=True).

        With `positions`, a point already there is replaced only when its state is older than
        every row of the request: a new row's point can only be there from a replay of the same
        event or with a later state, so it stays."""
        matrix, problems = checked_batch(rows, vectors, self.dim)
        points = [
            qm.PointStruct(id=point_id(row.row_id), vector=matrix[i].tolist(),
                           payload=positioned_payload(row, positions))
            for i, row in enumerate(rows)
            if row.row_id not in problems
        ]
        with self._driver("upsert"):
            for start in range(0, len(points), self.batch_size):
                chunk = points[start : start + self.batch_size]
                known = [p.payload[STATE_POSITION] for p in chunk if STATE_POSITION in p.payload]
                fence = older_than(min(known)) if known else None
                self.client.upsert(self.collection, points=chunk, update_filter=fence, wait=True)
        if problems:
            raise InvalidVectors(problems)

    def update_state(self, rows: Sequence[Row], positions: Mapping[str, int] | None = None) -> None:
        """Replace the payload of rows already indexed (state and the rest); vectors stay. With
        `positions`, only where the stored state is older."""
        if not rows:
            return
        latest = {row.row_id: row for row in rows}  # the last version of a row in the batch wins
        with self._driver("update_state"):
            # Overwrite, not merge: a key that became absent (event_time, thread) must go. Points
            # are selected by a filter, so a row never indexed (or a newer state) matches nothing.
            operations = []
            for row_id, row in latest.items():
                selected = qm.Filter(must=[qm.HasIdCondition(has_id=[point_id(row_id)])])
                if positions is not None and row_id in positions:
                    selected.must.append(older_than(positions[row_id]))
                operations.append(qm.OverwritePayloadOperation(overwrite_payload=qm.SetPayload(
                    payload=positioned_payload(row, positions), filter=selected)))
            for start in range(0, len(operations), self.batch_size):
                self.client.batch_update_points(
                    self.collection, operations[start : start + self.batch_size], wait=True
                )

    # --- reads -----------------------------------------------------------------------------

    def search(self, vector: np.ndarray, scope: Scope, limit: int) -> list[Hit]:
        """Cosine nearest rows admitted by `scope`; the scope is a filter inside the search."""
        query = checked_query(vector, self.dim)
        if checked_limit(limit) == 0:
            return []
        wanted = scope_filter(scope)
        if wanted.empty:
            return []
        qfilter = qm.Filter(
            must=[_condition(c) for c in wanted.must],
            must_not=[_condition(c) for c in wanted.must_not] or None,
        )
        fetch = limit + TIE_MARGIN
        while True:
            with self._driver("search"):
                points = self.client.query_points(
                    self.collection,
                    query=query,
                    query_filter=qfilter,
                    limit=fetch,
                    with_payload=HIT_FIELDS,
                    search_params=self._search_params,
                ).points
            ranked = rank(
                scored((p.payload or {}).get("row_id"), p.score, (p.payload or {}).get("ingest_position"))
                for p in points
            )
            hits = cut(ranked, limit, fetch)
            if hits is not None:
                return hits
            fetch *= 4

    def vectors(self, row_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Stored (unit-norm) vectors by row id; ids not indexed are absent."""
        if not row_ids:
            return {}
        by_point = {point_id(rid): rid for rid in row_ids}
        with self._driver("vectors"):
            records = self.client.retrieve(self.collection, list(by_point), with_payload=False, with_vectors=True)
        found: dict[str, np.ndarray] = {}
        for record in records:
            stored = record.vector
            if isinstance(stored, dict):  # named-vector form; ours is the default ("") vector
                stored = stored.get("")
            if stored is not None:
                found[by_point[str(record.id)]] = np.asarray(stored, dtype=np.float32)
        return found

    # --- boundary --------------------------------------------------------------------------

    @contextmanager
    def _driver(self, action: str) -> Iterator[None]:
        """The one place qdrant-client errors become ours."""
        where = f"Qdrant collection {self.collection!r}: {action} failed"
        try:
            yield
        except OrgmemError:
            raise
        except UnexpectedResponse as exc:
            # 4xx is a request the server understood and refused: our problem, not an outage.
            if exc.status_code is not None and 400 <= exc.status_code < 500:
                raise OrgmemError(f"{COMPONENT}: {where}: HTTP {exc.status_code}: {exc.content!r}") from exc
            raise BackendUnavailable(COMPONENT, f"{where}: HTTP {exc.status_code}") from exc
        except (ResponseHandlingException, OSError, RuntimeError) as exc:
            # Connection refused/reset, timeouts, TLS; RuntimeError is a closed local client.
            raise BackendUnavailable(COMPONENT, f"{where}: {exc}") from exc
        except Exception as exc:
            if type(exc).__module__.startswith("grpc"):  # prefer_grpc clients raise RpcError
                raise BackendUnavailable(COMPONENT, f"{where}: {exc}") from exc
            raise OrgmemError(f"{COMPONENT}: {where}: {exc}") from exc


def _payload_indexes() -> list[tuple[str, object]]:
    """The qdrant-client field schema of each of `PAYLOAD_INDEXES`."""
    indexes: list[tuple[str, object]] = []
    for index in PAYLOAD_INDEXES:
        if index.kind == "tenant":  # linked in the graph by the server's default
            params = qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, is_tenant=True)
        elif index.kind == "keyword":
            params = qm.KeywordIndexParams(type=qm.KeywordIndexType.KEYWORD, enable_hnsw=index.graph)
        else:
            params = qm.DatetimeIndexParams(type=qm.DatetimeIndexType.DATETIME, enable_hnsw=index.graph)
        indexes.append((index.name, params))
    return indexes


def _condition(condition: Condition) -> qm.FieldCondition:
    if condition.op == "eq":
        return qm.FieldCondition(key=condition.key, match=qm.MatchValue(value=condition.value))
    if condition.op == "any":
        return qm.FieldCondition(key=condition.key, match=qm.MatchAny(any=list(condition.value)))
    if condition.op == "gte":
        return qm.FieldCondition(key=condition.key, range=qm.DatetimeRange(gte=condition.value))
    return qm.FieldCondition(key=condition.key, range=qm.DatetimeRange(lte=condition.value))

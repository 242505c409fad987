"""What both Qdrant adapters store and ask, without any driver: point ids, the payload of a
row, the Scope as a list of driver-neutral conditions, input checks and the final hit order.

Each adapter turns `ScopeFilter` into its own driver's filter objects; keeping the meaning
here means Qdrant Edge and Qdrant server cannot drift apart on what a scope admits.
"""

from __future__ import annotations

import math
import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, NamedTuple

import numpy as np

from schemas.rows import Row
from services.core.scope import Scope, acl_tokens
from services.errors import OrgmemError
from services.ports import Hit

# Fixed forever: point ids are derived from row ids with it, so a rebuild gives the same ids.
POINT_NAMESPACE = uuid.UUID("6f1d7c3e-2b4a-5e8f-9a10-4c2d8e7b3f51")

# Payload fields the scope filters on, and how each is indexed. `tenant` partitions the data.
KEYWORD_FIELDS = ("row_id", "acl", "state", "kind", "author", "thread")
DATETIME_FIELDS = ("event_time", "ingested_at")
TENANT_FIELD = "tenant"
# Fields that also get extra HNSW links per value when the graph is built. Each costs about
# one more graph build, so only those whose filters cut a tenant's rows to a small, graph-
# disconnecting share: the tenant itself, access lists and kinds. The rest are either broad
# (state) or narrow enough that the planner answers them exactly from the payload index.
GRAPH_FIELDS = frozenset({TENANT_FIELD, "acl", "kind"})
# What a search reads back per hit: enough to order ties without touching the row store.
HIT_FIELDS = ["row_id", "ingest_position"]


class PayloadIndex(NamedTuple):
    name: str
    kind: Literal["tenant", "keyword", "datetime"]  # tenant: a keyword index that partitions the data
    graph: bool  # extra HNSW links per value (GRAPH_FIELDS)


# The payload indexes both adapters create, each in its own driver's terms.
PAYLOAD_INDEXES = (
    PayloadIndex(TENANT_FIELD, "tenant", TENANT_FIELD in GRAPH_FIELDS),
    *(PayloadIndex(name, "keyword", name in GRAPH_FIELDS) for name in KEYWORD_FIELDS),
    *(PayloadIndex(name, "datetime", name in GRAPH_FIELDS) for name in DATETIME_FIELDS),
)


def point_id(row_id: str) -> str:
    """Qdrant accepts only unsigned ints or UUIDs as ids; a name-based UUID is deterministic."""
    return str(uuid.uuid5(POINT_NAMESPACE, row_id))


# orgmem's own row ids are a letter and 23 hex digits (core.write_rules): 25 hex digits once the
# letter is written as its code, which fit in a UUID's 32. A point id that carries its row id
# lets a search name its rows without reading payload, about a third of a search's time at 100k
# rows. The UUID version digit (hex digit 12) is 0 in a carrying id and always 5 in a name-based
# one, so the two kinds can never be taken for each other.
_CARRIED = re.compile(r"[a-z][0-9a-f]{23}")


def carrying_point_id(row_id: str) -> str:
    """The point id that spells `row_id`; a row id of any other shape gets `point_id`."""
    if not _CARRIED.fullmatch(row_id):
        return point_id(row_id)
    digits = f"{ord(row_id[0]):02x}" + row_id[1:]  # 25 hex digits
    # The hyphenated form str(uuid.UUID(...)) gives, spelt out: a query reads a few hundred of
    # these, and the UUID object cost more than the rest of the conversion.
    return f"{digits[:8]}-{digits[8:12]}-0{digits[12:15]}-{digits[15:19]}-{digits[19:25]}000000"


def carried_row_id(point: uuid.UUID | str) -> str | None:
    """The row id a carrying point id spells, or None for a name-based one."""
    digits = point.hex if isinstance(point, uuid.UUID) else uuid.UUID(point).hex
    if digits[12] != "0":
        return None
    return chr(int(digits[:2], 16)) + digits[2:12] + digits[13:26]


def rfc3339(moment: datetime) -> str:
    """UTC with microseconds, so a bound equal to a stored time compares as equal.

    A naive datetime is taken as UTC (the log records UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def row_payload(row: Row) -> dict[str, object]:
    payload: dict[str, object] = {
        "row_id": row.row_id,
        "tenant": row.tenant,
        "acl": acl_tokens(row.acl),
        "ingested_at": rfc3339(row.ingested_at),
        "ingest_position": row.ingest_position,
        "state": row.state,
        "kind": row.kind,
        "author": row.author,
    }
    # Absent rather than null: a missing key never satisfies a range or a match, which is
    # exactly the scope's rule for undated rows under as_of.
    if row.event_time is not None:
        payload["event_time"] = rfc3339(row.event_time)
    if row.thread is not None:
        payload["thread"] = row.thread
    return payload


@dataclass(frozen=True)
class Condition:
    key: str
    op: Literal["eq", "any", "lte", "gte"]
    value: str | list[str]


@dataclass(frozen=True)
class ScopeFilter:
    must: list[Condition] = field(default_factory=list)
    must_not: list[Condition] = field(default_factory=list)
    # True when the scope can admit nothing (an empty set of kinds, authors or threads):
    # the adapter answers [] without asking the index.
    empty: bool = False


def scope_filter(scope: Scope) -> ScopeFilter:
    """The Scope as conditions evaluated inside the index, mirroring `scope.admits`."""
    must = [Condition(TENANT_FIELD, "eq", scope.tenant)]
    must_not: list[Condition] = []
    tokens = scope.reader_tokens()
    if tokens is not None:
        must.append(Condition("acl", "any", tokens))
    if scope.as_of is not None:
        must.append(Condition("event_time", "lte", rfc3339(scope.as_of)))
    if scope.since is not None:
        must.append(Condition("event_time", "gte", rfc3339(scope.since)))
    if scope.known_at is not None:
        # State as it was at known_at comes from the row store (inactive_at_known), so the
        # current state is deliberately not consulted.
        must.append(Condition("ingested_at", "lte", rfc3339(scope.known_at)))
        if scope.inactive_at_known:
            must_not.append(Condition("row_id", "any", sorted(scope.inactive_at_known)))
    else:
        must.append(Condition("state", "eq", "active"))
    for key, allowed in (("kind", scope.kinds), ("author", scope.authors), ("thread", scope.threads)):
        if allowed is None:
            continue
        values = sorted(v for v in allowed if v is not None)
        if not values:
            return ScopeFilter(empty=True)
        must.append(Condition(key, "any", values))
    return ScopeFilter(must=must, must_not=must_not)


def checked_batch(rows: Sequence[Row], vectors: np.ndarray, dim: int) -> tuple[np.ndarray, dict[str, str]]:
    """Validate an upsert batch: returns the float32 matrix and the rows whose vector is unusable.

    A batch whose shape does not match the rows cannot be paired up at all, so it is refused
    whole; a single bad vector only keeps its own row out."""
    matrix = np.asarray(vectors, dtype=np.float32)
    if not rows and matrix.size == 0:
        return np.empty((0, dim), dtype=np.float32), {}
    if matrix.ndim != 2 or matrix.shape != (len(rows), dim):
        raise OrgmemError(
            f"vectors: expected shape ({len(rows)}, {dim}) for {len(rows)} row(s), got {matrix.shape}"
        )
    problems: dict[str, str] = {}
    finite = np.isfinite(matrix).all(axis=1)
    norms = np.linalg.norm(np.where(np.isfinite(matrix), matrix, 0.0), axis=1)
    for i, row in enumerate(rows):
        if not finite[i]:
            problems[row.row_id] = f"vectors[{i}] has NaN or infinite values"
        elif norms[i] == 0.0:
            problems[row.row_id] = f"vectors[{i}] is all zeros (no cosine direction)"
    return matrix, problems


def checked_query(vector: np.ndarray, dim: int) -> list[float]:
    query = np.asarray(vector, dtype=np.float32)
    if query.ndim == 2 and query.shape[0] == 1:
        query = query[0]  # a one-row batch from an embedder is accepted as the query itself
    if query.shape != (dim,):
        raise OrgmemError(f"vector: expected {dim} values, got shape {np.shape(vector)}")
    if not np.isfinite(query).all() or not query.any():
        raise OrgmemError("vector: has NaN, infinite or only zero values")
    return query.tolist()


def checked_search_ef(ef: int | None) -> int | None:
    """The graph search's breadth (HNSW ef), None for the engine's default. Measured on 100k rows
    (bench store, int8 queries, recall@50 against exact search / vector leg p50): default (100)
    0.933 / 2.5 ms, 128 0.955 / 2.75 ms, 160 0.969 / 3.0 ms, 200 0.977 / 3.3 ms."""
    if ef is None:
        return None
    if not isinstance(ef, int) or isinstance(ef, bool) or ef < 1:
        raise OrgmemError(f"vector_search_ef: expected a positive integer or nothing, got {ef!r}")
    return ef


def checked_limit(limit: int) -> int:
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise OrgmemError(f"limit: expected a non-negative integer, got {limit!r}")
    return limit


# Extra hits fetched beyond `limit`, so equal scores straddling the cut can be ordered by our
# tie rule rather than by the engine's internal order.
TIE_MARGIN = 8


class Scored(NamedTuple):  # a tuple, not a dataclass: built for every hit of every search
    row_id: str
    score: float
    ingest_position: int


def rank(found: Iterable[Scored]) -> list[Scored]:
    """Score descending; ties go to the later ingest position, then to row id (a total order)."""
    return sorted(found, key=lambda s: (-s.score, -s.ingest_position, s.row_id))


def cut(ranked: list[Scored], limit: int, fetched: int) -> list[Hit] | None:
    """The first `limit` hits, or None when a tie crosses the end of what was fetched (ask more)."""
    if limit == 0:
        return []
    if len(ranked) >= fetched > limit and ranked[limit - 1].score == ranked[-1].score:
        return None
    return [Hit(s.row_id, float(s.score)) for s in ranked[:limit]]


def scored(row_id: object, score: float, position: object) -> Scored:
    if not isinstance(row_id, str):
        raise OrgmemError(f"vector index: a point without a row_id in its payload (got {row_id!r})")
    if not isinstance(position, int) or isinstance(position, bool):
        position = -1  # unknown position ranks last among equals
    if not math.isfinite(score):
        score = float("-inf")
    return Scored(row_id, float(score), position)

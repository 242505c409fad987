"""How both Qdrant Edge indexes ask their shards: the scope as an Edge filter (and the payload
indexes it runs on), a search's hits read from the points it returns, the widening rounds that
settle ties at the cut, and the merge of several shards' ranked lists (the tiered index).

The meaning of a scope and of the tie rule is `_payload`'s; this module only speaks the Edge
driver's objects, so the single-shard index and the tiered one cannot drift apart on either.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from itertools import chain

import numpy as np
from qdrant_edge import (
    DatetimeIndexParams,
    EdgeShard,
    FieldCondition,
    Filter,
    KeywordIndexParams,
    MatchAny,
    MatchValue,
    RangeDateTime,
    ScrollRequest,
    UpdateOperation,
)

from services.adapters.vector._payload import (
    HIT_FIELDS,
    PAYLOAD_INDEXES,
    TIE_MARGIN,
    Condition,
    PayloadIndex,
    Scored,
    carried_row_id,
    checked_limit,
    checked_query,
    rank,
    scope_filter,
    scored,
)
from services.core.scope import Scope
from services.ports import Hit

# One round of a search: the hits for (query, filter, fetch), or None to ask again with more.
Round = Callable[[list[float], Filter, int], list[Hit] | None]


def payload_indexes() -> list[tuple[str, object]]:
    """The Edge field index of each of `PAYLOAD_INDEXES`."""
    return [(index.name, _index_params(index)) for index in PAYLOAD_INDEXES]


# Indexes kept on disk (memory-mapped) rather than read into memory when a shard opens. Opening a
# sealed shard holds the interpreter lock throughout, so the server stalls for as long as it
# takes (at 100k rows 1.3 s), and these three — one value per row, or nearly — were about 40 % of
# it: at 50k rows 540 ms against 920 with every index in memory. Searches filtered on them cost
# the same (within 0.03 ms p50 per shard: tenant, as_of, acl, known_at with 50 inactive rows,
# 3 threads, 3 authors); the low-cardinality and date indexes every query's filter runs on stay
# in memory (all on disk: the open 190 ms, but each filtered search 0.2 ms slower).
ON_DISK_INDEXES = frozenset({"row_id", "author", "thread"})


def ensure_payload_indexes(shard: EdgeShard, refit: bool = False) -> list[str]:
    """Create the payload indexes the shard lacks (a shard made by a run that stopped before they
    were made gets them too); with `refit`, also make again those whose on-disk setting is not
    `ON_DISK_INDEXES`' (a shard made before it). The names made. Only the build process refits: on
    a sealed shard it takes seconds, with the interpreter lock held."""
    stored = shard.info().payload_schema
    made = []
    for name, params in payload_indexes():
        have = stored.get(name)
        if have is not None and not (refit and _on_disk(have.params) != _on_disk(params)):
            continue
        if have is not None:
            shard.update(UpdateOperation.delete_field_index(name))
        shard.update(UpdateOperation.create_field_index(name, params))
        made.append(name)
    return made


def _on_disk(params: object) -> bool:
    return bool(getattr(params, "on_disk", None))


def _index_params(index: PayloadIndex) -> object:
    if index.kind == "tenant":  # linked in the graph by the engine's default
        return KeywordIndexParams(is_tenant=True)
    if index.kind == "keyword":
        return KeywordIndexParams(enable_hnsw=index.graph, on_disk=True if index.name in ON_DISK_INDEXES else None)
    return DatetimeIndexParams(enable_hnsw=index.graph)


def edge_filter(scope: Scope) -> Filter | None:
    """The scope as a Qdrant Edge filter; None when it admits nothing."""
    wanted = scope_filter(scope)
    if wanted.empty:
        return None
    return Filter(must=[_condition(c) for c in wanted.must],
                  must_not=[_condition(c) for c in wanted.must_not] or None)


def _condition(condition: Condition) -> FieldCondition:
    if condition.op == "eq":
        return FieldCondition(condition.key, match=MatchValue(condition.value))
    if condition.op == "any":
        return FieldCondition(condition.key, match=MatchAny(list(condition.value)))
    if condition.op == "gte":
        return FieldCondition(condition.key, range=RangeDateTime(gte=condition.value))
    return FieldCondition(condition.key, range=RangeDateTime(lte=condition.value))


def widening_search(vector: np.ndarray, dim: int, scope: Scope, limit: int, ask: Round) -> list[Hit]:
    """Check the query, then ask rounds of `limit` plus a margin, four times as many each time,
    until a round's hits end clear of a tie (`ask` answers None while one crosses its cut)."""
    query = checked_query(vector, dim)
    if checked_limit(limit) == 0:
        return []
    qfilter = edge_filter(scope)
    if qfilter is None:
        return []
    fetch = limit + TIE_MARGIN
    while True:
        hits = ask(query, qfilter, fetch)
        if hits is not None:
            return hits
        fetch *= 4


# Points per page when a shard's points are read whole (a copy, the exact shards' memory copy).
STORED_PAGE = 1000


def stored_pages(shard: EdgeShard) -> Iterator[list]:
    """Every point of `shard` with its payload and stored vector, a page at a time."""
    offset = None
    while True:
        points, offset = shard.scroll(ScrollRequest(limit=STORED_PAGE, offset=offset, with_payload=True,
                                                    with_vector=True))
        yield points
        if offset is None:
            return


def scored_points(shard: EdgeShard, points: list, carrying: bool) -> list[Scored]:
    """Row id, score and ingest position per hit. A carrying id names its row; the payload
    is read only for a point that does not carry its row id or whose score ties another's
    (the tie rule orders by ingest position). A shard without carrying ids (`carrying` False)
    was asked for `HIT_FIELDS` with its points.

    Each point's `id` is read once: the driver builds a new uuid.UUID on every access, and
    reading it five times per hit had cost more than the graph search itself."""
    scores = [p.score for p in points]
    if not carrying:
        payloads = [p.payload or {} for p in points]
        return [scored(pl.get("row_id"), s, pl.get("ingest_position")) for pl, s in zip(payloads, scores, strict=True)]
    ids = [p.id for p in points]
    row_ids: list[str | None] = [carried_row_id(pid) for pid in ids]
    positions: list[object] = [None] * len(ids)
    counts = Counter(scores)
    wanted = {str(pid): i for i, pid in enumerate(ids) if row_ids[i] is None or counts[scores[i]] > 1}
    if wanted:
        for record in shard.retrieve(list(wanted), with_payload=HIT_FIELDS, with_vector=False):
            i, payload = wanted[str(record.id)], record.payload or {}
            row_ids[i], positions[i] = payload.get("row_id"), payload.get("ingest_position")
    return [scored(rid, s, pos) for rid, s, pos in zip(row_ids, scores, positions, strict=True)]


def merged_cut(found: list[list[Scored]], limit: int, fetch: int) -> list[Hit] | None:
    """The first `limit` of several shards' ranked lists, or None when a shard that filled its
    `fetch` may hold more hits tied with the last one kept (ask again for more)."""
    seen: set[str] = set()
    merged = [s for s in rank(chain.from_iterable(found)) if not (s.row_id in seen or seen.add(s.row_id))]
    if len(merged) >= limit:
        floor = merged[limit - 1].score
        if any(len(part) >= fetch and part[-1].score >= floor for part in found):
            return None
    return [Hit(s.row_id, float(s.score)) for s in merged[:limit]]

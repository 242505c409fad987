"""RowStore on Elasticsearch (cluster profile).

Rows live in the rows index, one document per row (the same documents the lexical leg
searches); their state history, the skipped documents and the projection checkpoints live in
companion indices `<index>-history`, `<index>-skipped` and `<index>-meta`.

The log has lanes (partitions, `services.core.positions`), not ordered against each other, so
there is one checkpoint document per lane: lane 0's is `checkpoint`, as before lanes (an
existing cluster reads on from it), lane N's `checkpoint-N`. Each lane's document carries its
own redo record and its own fencing, so writers of different lanes never fence each other.

ES has no multi-document transaction, so a batch is made atomic in effect with a redo record:
`apply` first writes the whole batch into its lane's checkpoint document (one document write is
atomic), then the rows, history and skips, then the checkpoint with the batch cleared. A writer
that finds a batch left pending in a lane (its predecessor died half-way) finishes it before it
reads or writes that lane, so the write-path rules never read a half-applied batch. Every
checkpoint write is conditional on the version this process last saw of that lane's document
(`if_seq_no`), which fences out a second writer of the lane or a reset that happened meanwhile.

That fences the checkpoint, not the rows a stalled writer sends between its redo record and its
checkpoint: so each row document is versioned by the log position of the event that produced
its state (external versioning). ES refuses a write whose version is not above the stored one
(409, a version conflict), so a replay changes nothing and a stalled writer cannot put an older
state back over a newer one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import datetime

from schemas.rows import Row, RowChange
from services.adapters import elasticsearch_common as es
from services.adapters.row_store.elasticsearch_documents import (
    CHECKPOINT_LANES,
    COMPANIONS,
    HEAD_FIELDS,
    VERSION_FIELDS,
    SeenCheckpoint,
    batch_operations,
    change_from,
    checkpoint_id,
    companion_settings,
    decode_batch,
    encode_batch,
    head_from,
    steps_by_query,
    version_fields,
    versions_query,
)
from services.core.positions import Checkpoints, lane_of, lane_start
from services.core.scope import Scope
from services.core.versions import VersionFields
from services.errors import OrgmemError, ProjectionFenced
from services.ports import RowHead, RowMutation, SkippedDocument

COMPONENT = "row store (Elasticsearch)"
_PAGE = 1000


class ElasticsearchRowStore:
    def __init__(self, url: str | None = None, index: str = "orgmem-rows", *, client=None, shards: int = 1,
                 replicas: int = 0, refresh: str = "true", writer: bool = True):
        if client is None and not url:
            raise OrgmemError("cluster.es_url: required for the Elasticsearch row store")
        self.client = client if client is not None else es.connect(url)
        self.index, self.shards, self.replicas, self.refresh, self.writer = index, shards, replicas, refresh, writer
        self._seen: dict[int, SeenCheckpoint] = {}  # by lane: only lanes this process read or wrote
        self._create_indices()

    @classmethod
    def for_tests(cls, url: str) -> ElasticsearchRowStore:
        return cls(url, index=f"orgmem-test-{uuid.uuid4().hex[:10]}")

    def _create_indices(self) -> None:
        es.ensure_template_and_index(self.client, COMPONENT, self.index, self.shards, self.replicas)
        from elasticsearch import BadRequestError

        for suffix, mappings in COMPANIONS:
            name = f"{self.index}-{suffix}"
            with es.driver_errors(COMPONENT, f"create {name}"):
                if self.client.indices.exists(index=name):
                    if suffix == "skipped":  # an index made before skips carried their tenant gains the field
                        self.client.indices.put_mapping(index=name, properties=mappings["properties"])
                    continue
                try:
                    self.client.indices.create(index=name, mappings=mappings,
                                               settings=companion_settings(suffix, self.shards, self.replicas))
                except BadRequestError as exc:
                    if "resource_already_exists" not in str(exc):
                        raise

    # -- the checkpoints and the batch ----------------------------------------------------

    def _remember(self, lane: int, doc: dict) -> dict | None:
        """Note a lane's checkpoint document as read; returns its pending batch, if any."""
        source = doc["_source"]
        self._seen[lane] = SeenCheckpoint(doc["_seq_no"], doc["_primary_term"], doc.get("_index") or f"{self.index}-meta",
                                          int(source.get("applied_position", lane_start(lane))))
        return source.get("pending")

    def _load(self, lane: int) -> dict | None:
        from elasticsearch import NotFoundError

        with es.driver_errors(COMPONENT, "read checkpoint"):
            try:
                doc = self.client.get(index=f"{self.index}-meta", id=checkpoint_id(lane))
            except NotFoundError:
                self._seen.pop(lane, None)
                return None
        return self._remember(lane, doc)

    def _store_checkpoint(self, lane: int, applied: int, pending: dict | None) -> None:
        from elasticsearch import ConflictError, NotFoundError

        seen = self._seen.get(lane)
        condition = {"if_seq_no": seen.seq_no, "if_primary_term": seen.primary_term} if seen else {"op_type": "create"}
        with es.driver_errors(COMPONENT, "write checkpoint"):
            try:
                result = self.client.index(index=seen.index if seen else f"{self.index}-meta", id=checkpoint_id(lane),
                                           refresh="true", document={"applied_position": applied, "pending": pending},
                                           **condition)
            except (ConflictError, NotFoundError) as exc:
                self._seen.pop(lane, None)
                raise ProjectionFenced(
                    f"{COMPONENT}: the checkpoint of lane {lane} of {self.index} changed under this writer (another "
                    f"indexer, or a rebuild); continue from applied_position({lane})") from exc
        self._seen[lane] = SeenCheckpoint(result["_seq_no"], result["_primary_term"],
                                          result.get("_index") or f"{self.index}-meta", applied)

    def _write_batch(self, mutations: Sequence[RowMutation], skipped: Sequence[SkippedDocument]) -> None:
        operations = batch_operations(self.index, mutations, skipped)
        if not operations:
            return
        with es.driver_errors(COMPONENT, "bulk apply"):
            response = self.client.bulk(operations=operations, refresh=self.refresh)
        failures = es.bulk_failures(response.body if hasattr(response, "body") else response, conflicts_ok=True)
        if failures:
            # The checkpoint keeps the batch pending: the next apply or restart redoes it whole.
            raise OrgmemError(f"{COMPONENT}: batch not applied: " + "; ".join(failures[:10]))

    def _finish(self, lane: int, pending: dict | None) -> None:
        """The previous writer of the lane died between its redo record and its checkpoint: finish
        its batch (a reader leaves it to the writers)."""
        if pending and self.writer:
            mutations, skipped, position = decode_batch(pending)
            self._write_batch(mutations, skipped)
            self._store_checkpoint(lane, max(self._seen[lane].applied, position), None)

    def _current(self, lane: int) -> int:
        """The lane's position as this writer last saw it; read (a pending batch finished) if never."""
        return self._seen[lane].applied if lane in self._seen else self.applied_position(lane)

    def apply(self, mutations: Sequence[RowMutation], skipped: Sequence[SkippedDocument], position: int) -> None:
        lane = lane_of(position)
        if any(lane_of(m.change.position) != lane for m in mutations) or any(lane_of(s.position) != lane for s in skipped):
            raise OrgmemError(f"{COMPONENT}: a batch up to position {position} holds events of another lane")
        applied = self._current(lane)
        self._store_checkpoint(lane, applied, encode_batch(mutations, skipped, position))
        self._write_batch(mutations, skipped)
        self._store_checkpoint(lane, max(applied, position), None)

    def applied_position(self, lane: int = 0) -> int:
        self._finish(lane, self._load(lane))
        return self._seen[lane].applied if lane in self._seen else lane_start(lane)

    def applied_positions(self) -> Checkpoints:
        """Every lane's checkpoint ever written, read in one mget over the meta index (realtime,
        as a get is: a search would only see what was refreshed); pending batches are finished."""
        with es.driver_errors(COMPONENT, "read checkpoints"):
            response = self.client.mget(index=f"{self.index}-meta", ids=list(CHECKPOINT_LANES))
        self._seen.clear()  # a lane no longer there (a reset) is written afresh
        found = {CHECKPOINT_LANES[doc["_id"]]: doc for doc in response["docs"] if doc.get("found")}
        for lane, doc in found.items():
            self._finish(lane, self._remember(lane, doc))
        return Checkpoints({lane: self._seen[lane].applied for lane in found})

    def erase(self, tenant: str, row_ids: Sequence[str], position: int | None) -> list[str]:
        """Delete rows, their history and skip records, leave an 'erased' skip record per id, and
        move the checkpoint of `position`'s lane to it. None: an out-of-band purge, whose skip
        records stand at the checkpoint of the rows' lane (a tenant's rows share one; lane 0 when
        none is stored) and which moves no checkpoint. Idempotent, so a crash before the
        checkpoint only means the erasure is applied again. Returns the stored ids.
        Segments with deletions are force-merged, so no segment keeps an erased row's text."""
        ids = list(dict.fromkeys(row_ids))
        if not ids:
            return []
        found = list(self._mget(ids, ["row_id", "ingest_position"]))
        stored = [doc["_id"] for doc in found]
        if position is None:
            lane = lane_of(found[0]["_source"]["ingest_position"]) if found else 0
            at = self.applied_position(lane)
        else:
            lane, at = lane_of(position), position
        by_id = {"terms": {"row_id": ids}}
        with es.driver_errors(COMPONENT, "erase"):
            self.client.delete_by_query(index=self.index, query={"ids": {"values": ids}}, refresh=True, conflicts="proceed")
            # The rows' index is the lexical index too: expunging its deletions drops their terms.
            self.client.indices.forcemerge(index=self.index, only_expunge_deletes=True)
            for suffix in ("history", "skipped"):
                self.client.delete_by_query(index=f"{self.index}-{suffix}", query=by_id, refresh=True, conflicts="proceed")
                self.client.indices.forcemerge(index=f"{self.index}-{suffix}", only_expunge_deletes=True)
        self._write_batch([], [SkippedDocument(rid, at, "erased", tenant=tenant) for rid in ids])
        if position is not None:
            self._store_checkpoint(lane, max(self._current(lane), position), None)
        return stored

    # -- reads ------------------------------------------------------------------------------

    def get(self, row_id: str) -> Row | None:
        return self.get_many([row_id]).get(row_id)

    def get_many(self, row_ids: Sequence[str], with_text: bool = True) -> dict[str, Row]:
        docs = self._mget(row_ids, excludes=None if with_text else ["text"])
        return {doc["_id"]: es.row_from_document(doc["_source"]) for doc in docs}

    def heads(self, row_ids: Sequence[str]) -> dict[str, RowHead]:
        return {doc["_id"]: head_from(doc["_source"]) for doc in self._mget(row_ids, HEAD_FIELDS)}

    def _mget(self, row_ids: Sequence[str], fields: list[str] | None = None,
              excludes: list[str] | None = None) -> Iterator[dict]:
        ids = list(dict.fromkeys(row_ids))
        left_out = {"source_excludes": excludes} if excludes else {}
        for start in range(0, len(ids), _PAGE):
            with es.driver_errors(COMPONENT, "get rows"):
                response = self.client.mget(index=self.index, ids=ids[start : start + _PAGE], source_includes=fields,
                                            **left_out)
            yield from (doc for doc in response["docs"] if doc.get("found"))

    def _search(self, index: str, query: dict, sort: list, size: int, action: str,
                fields: list[str] | None = None) -> list[dict]:
        with es.driver_errors(COMPONENT, action):
            response = self.client.search(index=index, query=query, sort=sort, size=size, track_total_hits=False,
                                          source_includes=fields)
        return response["hits"]["hits"]

    def _scan(self, index: str, query: dict, sort: list, action: str, limit: int | None = None,
              fields: list[str] | None = None, excludes: list[str] | None = None) -> Iterator[dict]:
        """Every hit in `sort` order, page by page (search_after on a total order)."""
        after, seen = None, 0
        while limit is None or seen < limit:
            size = _PAGE if limit is None else min(_PAGE, limit - seen)
            with es.driver_errors(COMPONENT, action):
                response = self.client.search(index=index, query=query, sort=sort, size=size,
                                              search_after=after, track_total_hits=False, source_includes=fields,
                                              **({"source_excludes": excludes} if excludes else {}))
            hits = response["hits"]["hits"]
            yield from hits
            seen += len(hits)
            if len(hits) < size:
                return
            after = hits[-1]["sort"]

    def history(self, row_id: str) -> list[RowChange]:
        hits = self._scan(f"{self.index}-history", {"term": {"row_id": row_id}}, [{"position": "asc"}], "history")
        return [change_from(h["_source"]) for h in hits]

    def thread(self, tenant: str, thread: str, readers: frozenset[str] | None = None,
               limit: int | None = None) -> list[Row]:
        filters = [{"term": {"tenant": tenant}}, {"term": {"thread": thread}}]
        tokens = Scope(tenant=tenant, readers=readers).reader_tokens()  # None: unrestricted
        if tokens is not None:
            filters.append({"terms": {"acl_tokens": tokens}})
        # Newest first so that a limit keeps the end of the thread; turned back into date order below.
        sort = [{"event_us": {"order": "desc", "missing": "_first"}}, {"ingest_position": "desc"}, {"row_id": "desc"}]
        hits = self._scan(self.index, {"bool": {"filter": filters}}, sort, "thread", limit=limit)
        return [es.row_from_document(h["_source"]) for h in reversed(list(hits))]

    def versions_of(self, tenant: str, threads: Sequence[str], row_ids: Sequence[str] = (),
                    known_at: datetime | None = None) -> list[VersionFields]:
        """One search (a page per 1,000 rows); under known_at a second for the rows' steps by then."""
        if not threads and not row_ids:
            return []
        sort = [{"ingest_position": "asc"}, {"row_id": "asc"}]
        sources = [h["_source"] for h in self._scan(self.index, versions_query(tenant, threads, row_ids), sort,
                                                   "versions", fields=VERSION_FIELDS)]
        if known_at is None:
            return [version_fields(source, None) for source in sources]
        last: dict[str, dict] = {source["row_id"]: {"state": "active"} for source in sources}
        query = steps_by_query(tenant, list(last), known_at)
        for hit in self._scan(f"{self.index}-history", query, [{"position": "asc"}, {"row_id": "asc"}], "versions"):
            last[hit["_source"]["row_id"]] = hit["_source"]
        return [version_fields(source, last[source["row_id"]]) for source in sources]

    def skipped(self, row_id: str) -> SkippedDocument | None:
        hits = self._search(f"{self.index}-skipped", {"term": {"row_id": row_id}}, [{"position": "asc"}], 1, "skipped")
        if not hits:
            return None
        s = hits[0]["_source"]
        return SkippedDocument(s["row_id"], s["position"], s["reason"], s.get("duplicate_of"), s.get("tenant"))

    def _first_id(self, filters: list[dict], must_not: list[dict] | None = None, action: str = "lookup") -> str | None:
        query = {"bool": {"filter": filters, **({"must_not": must_not} if must_not else {})}}
        hits = self._search(self.index, query, [{"ingest_position": "asc"}], 1, action)
        return hits[0]["_id"] if hits else None

    def find_source(self, tenant: str, source: str | None, source_id: str) -> str | None:
        filters = [{"term": {"tenant": tenant}}, {"term": {"source_id": source_id}}]
        if source is None:
            return self._first_id(filters, [{"exists": {"field": "source"}}], "find_source")
        return self._first_id(filters + [{"term": {"source": source}}], action="find_source")

    def find_active_text(self, tenant: str, author_scope: str, content_hash: str) -> str | None:
        return self._first_id([{"term": {"tenant": tenant}}, {"term": {"author_scope": author_scope}},
                               {"term": {"content_hash": content_hash}}, {"term": {"state": "active"}}],
                              action="find_active_text")

    def recent(self, scope: Scope, exclude: Sequence[str], limit: int) -> list[RowHead]:
        if limit <= 0:
            return []
        query = es.scoped(None, scope)
        if query is None:
            return []
        if exclude:
            query["bool"].setdefault("must_not", []).append({"ids": {"values": list(exclude)}})
        hits = self._search(self.index, query, [{"ingest_position": "desc"}], limit, "recent", HEAD_FIELDS)
        return [head_from(hit["_source"]) for hit in hits]

    def named(self, scope: Scope, source_ids: Sequence[str], limit: int) -> list[RowHead]:
        wanted = [s for s in dict.fromkeys(source_ids) if isinstance(s, str)]
        query = es.scoped({"terms": {"source_id": wanted}}, scope) if wanted and limit > 0 else None
        if query is None:
            return []
        hits = self._search(self.index, query, [{"ingest_position": "desc"}], limit, "named", HEAD_FIELDS)
        return [head_from(hit["_source"]) for hit in hits]

    def in_scope(self, scope: Scope, limit: int = 1_000_000, with_text: bool = True) -> list[Row]:
        """Every row of a scope (maintenance passes, the people directory), in ingest order."""
        query = es.scoped(None, scope)
        if query is None:
            return []
        sort = [{"ingest_position": "asc"}, {"row_id": "asc"}]
        hits = self._scan(self.index, query, sort, "in_scope", limit, excludes=None if with_text else ["text"])
        return [es.row_from_document({"text": "", **h["_source"]}) for h in hits]

    def page(self, tenant: str | None, after: tuple[int, str] | None, limit: int) -> list[Row]:
        """Up to `limit` rows of a tenant (every tenant: None) in (ingest position, row id) order,
        from just after the key `after` (search_after on that total order)."""
        query = {"term": {"tenant": tenant}} if tenant is not None else {"match_all": {}}
        with es.driver_errors(COMPONENT, "page"):
            response = self.client.search(index=self.index, query=query, size=limit, track_total_hits=False,
                                          sort=[{"ingest_position": "asc"}, {"row_id": "asc"}],
                                          search_after=list(after) if after is not None else None)
        return [es.row_from_document(h["_source"]) for h in response["hits"]["hits"]]

    def histories(self, row_ids: Sequence[str]) -> dict[str, list[RowChange]]:
        """The history of each of `row_ids` that has one, in log order."""
        out: dict[str, list[RowChange]] = {}
        ids = list(dict.fromkeys(row_ids))
        for start in range(0, len(ids), _PAGE):
            query = {"terms": {"row_id": ids[start : start + _PAGE]}}
            for hit in self._scan(f"{self.index}-history", query, [{"row_id": "asc"}, {"position": "asc"}],
                                  "histories"):
                out.setdefault(hit["_source"]["row_id"], []).append(change_from(hit["_source"]))
        return out

    def inactive_at(self, tenant: str, known_at: datetime) -> frozenset[str]:
        # A row's first step ('observed') is active; so the latest maintenance step at or before
        # known_at, if any, tells its state then.
        query = {"bool": {"filter": [{"term": {"tenant": tenant}}, {"range": {"at_us": {"lte": es.micros(known_at)}}}],
                          "must_not": [{"term": {"change": "observed"}}]}}
        last: dict[str, str] = {}
        for hit in self._scan(f"{self.index}-history", query, [{"position": "asc"}, {"row_id": "asc"}], "inactive_at"):
            last[hit["_source"]["row_id"]] = hit["_source"]["state"]
        return frozenset(row_id for row_id, state in last.items() if state != "active")

    def count(self, tenant: str | None = None) -> dict[str, int]:
        query = {"term": {"tenant": tenant}} if tenant else {"match_all": {}}
        with es.driver_errors(COMPONENT, "count"):
            response = self.client.search(index=self.index, query=query, size=0,
                                          aggs={"states": {"terms": {"field": "state", "size": 10}}})
            skipped = self.client.count(index=f"{self.index}-skipped", query=query)["count"]
        states = {b["key"]: b["doc_count"] for b in response["aggregations"]["states"]["buckets"]}
        return {"active": states.get("active", 0), "archived": states.get("archived", 0), "skipped": skipped}

    def reset(self) -> None:
        """Delete every row, step, skip and every lane's checkpoint (a rebuild replays the log)."""
        names = [self.index] + [f"{self.index}-{s}" for s in ("history", "skipped", "meta")]
        with es.driver_errors(COMPONENT, "reset"):
            self.client.indices.delete(index=",".join(names), ignore_unavailable=True)
        self._seen.clear()
        self._create_indices()

    def close(self) -> None:
        self.client.close()

"""The Elasticsearch row store fences a stalled writer out of the rows, checked without a server:
its requests run against an in-memory stand-in for the four endpoints a batch uses (get, index,
bulk, mget) that keeps documents with Elasticsearch's documented versioning rules: a `create`
of an existing id, an externally versioned `index` whose version is not above the stored one,
and a checkpoint write whose `if_seq_no` is stale are all refused with a version conflict (409).
The same rules hold on a real cluster in the contract suite (`ORGMEM_ES_URL`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from elastic_transport import ApiResponseMeta, HttpHeaders, NodeConfig
from elasticsearch import ConflictError, NotFoundError

from schemas.rows import Row, RowChange
from services.adapters import elasticsearch_common as es
from services.adapters.row_store.elasticsearch import (
    ElasticsearchRowStore,
    batch_operations,
)
from services.errors import OrgmemError, ProjectionFenced
from services.ports import RowMutation, SkippedDocument

T0 = datetime(2025, 6, 2, tzinfo=UTC)


def _error(kind, status: int, message: str):
    meta = ApiResponseMeta(status, "1.1", HttpHeaders(), 0.0, NodeConfig("http", "localhost", 9200))
    return kind(message, meta, {"error": {"type": es.VERSION_CONFLICT if status == 409 else "not_found"}})


class VersionedStandIn:
    """Documents by index and id, each with its version and sequence number. `before_bulk`
    runs once, at the next bulk call: where the test makes another writer act while this one
    is stalled between its redo record and its rows."""

    def __init__(self):
        self.docs: dict[str, dict[str, dict]] = {}
        self.seq = 0
        self.before_bulk = None
        self.reject: set[str] = set()  # ids whose documents the stand-in refuses (a mapping error)

    def _put(self, index: str, doc_id: str, source: dict, version: int) -> dict:
        self.seq += 1
        stored = {"_source": source, "_version": version, "_seq_no": self.seq, "_primary_term": 1}
        self.docs.setdefault(index, {})[doc_id] = stored
        return stored

    def get(self, index, id):
        found = self.docs.get(index, {}).get(id)
        if found is None:
            raise _error(NotFoundError, 404, f"{index}/{id} not found")
        return {"_id": id, **found}

    def index(self, index, id, document, refresh=None, if_seq_no=None, if_primary_term=None, op_type=None):
        found = self.docs.get(index, {}).get(id)
        if (op_type == "create" and found is not None) or (
                if_seq_no is not None and (found is None or (found["_seq_no"], found["_primary_term"])
                                           != (if_seq_no, if_primary_term))):
            raise _error(ConflictError, 409, f"{index}/{id}: version conflict")
        stored = self._put(index, id, document, (found or {"_version": 0})["_version"] + 1)
        return {"_seq_no": stored["_seq_no"], "_primary_term": 1}

    def bulk(self, operations, refresh=None):
        if self.before_bulk is not None:
            act, self.before_bulk = self.before_bulk, None
            act()
        items = []
        for action, source in zip(operations[::2], operations[1::2], strict=True):
            (op, meta), = action.items()
            index, doc_id = meta["_index"], meta["_id"]
            found = self.docs.get(index, {}).get(doc_id)
            if doc_id in self.reject:
                items.append({op: {"_id": doc_id, "status": 400, "error": {"type": "document_parsing_exception",
                                                                            "reason": "failed to parse"}}})
                continue
            if op == "create":
                refused = found is not None
                version = 1
            elif meta.get("version_type") == "external":
                refused = found is not None and found["_version"] >= meta["version"]
                version = meta["version"]
            else:
                refused, version = False, (found or {"_version": 0})["_version"] + 1
            if refused:
                items.append({op: {"_id": doc_id, "status": 409, "error": {
                    "type": es.VERSION_CONFLICT, "reason": f"[{doc_id}]: version conflict"}}})
                continue
            self._put(index, doc_id, source, version)
            items.append({op: {"_id": doc_id, "status": 201 if found is None else 200}})
        return {"errors": any(next(iter(i.values()))["status"] >= 300 for i in items), "items": items}

    def mget(self, index, ids, source_includes=None):
        stored = self.docs.get(index, {})
        return {"docs": [{"_index": index, "_id": i, "found": True, **stored[i]} if i in stored
                         else {"_index": index, "_id": i, "found": False} for i in ids]}


def store_over(client: VersionedStandIn) -> ElasticsearchRowStore:
    store = object.__new__(ElasticsearchRowStore)  # no server: the indices are the stand-in's
    store.client, store.index, store.refresh, store.writer, store._seen = client, "rows", "true", True, {}
    return store


def row(state: str = "active", superseded_by: str | None = None) -> Row:
    return Row(row_id="r1", tenant="acme", text="the remote work policy", ingest_position=1, ingested_at=T0,
               state=state, superseded_by=superseded_by)


def step(position: int, change: str, changed: Row) -> RowMutation:
    return RowMutation(changed, RowChange(position=position, at=T0 + timedelta(days=position), change=change,
                                          state=changed.state, superseded_by=changed.superseded_by))


def test_every_row_write_is_versioned_by_the_position_of_its_state():
    ops = batch_operations("rows", [step(1, "observed", row()), step(4, "archived", row("archived"))], [])
    rows = [action["index"] for action in ops[::2] if "index" in action]
    assert [(r["version"], r["version_type"]) for r in rows] == [(1, "external"), (4, "external")]
    # Everything else a batch writes is a `create`: found again on a replay, never overwritten.
    assert {next(iter(a)) for a in ops[::2]} == {"index", "create"}


def test_a_stalled_writer_cannot_put_an_older_row_state_back_and_is_fenced_at_its_checkpoint():
    client = VersionedStandIn()
    zombie, member = store_over(client), store_over(client)
    zombie.apply([step(1, "observed", row())], [], 1)
    assert member.applied_position() == 1

    def member_moves_on():
        # While the zombie stalls between its redo record and its rows: the member finishes the
        # zombie's pending batch, then applies newer steps of the same row.
        assert member.applied_position() == 3
        member.apply([step(5, "archived", row("archived"))], [], 5)
        member.apply([step(7, "superseded", row("archived", "r2"))], [], 7)

    client.before_bulk = member_moves_on
    with pytest.raises(ProjectionFenced):
        zombie.apply([step(3, "restored", row("active"))], [], 3)
    assert member.get("r1") == row("archived", "r2")  # the newer state stayed
    assert client.docs["rows"]["r1"]["_version"] == 7
    assert sorted(client.docs["rows-history"]) == ["r1:1", "r1:3", "r1:5", "r1:7"]  # each step once
    assert member.applied_position() == 7  # the checkpoint did not go back
    # Fenced, the zombie re-reads the checkpoint and continues from there.
    assert zombie.applied_position() == 7
    zombie.apply([step(9, "restored", row())], [], 9)
    assert member.get("r1") == row() and member.applied_position() == 9


def test_a_replayed_batch_is_a_no_op_and_other_refusals_still_fail_the_batch():
    client = VersionedStandIn()
    store = store_over(client)
    batch = [step(1, "observed", row()), step(2, "archived", row("archived"))]
    skipped = [SkippedDocument("r9", 2, "duplicate_text", "r1", "acme")]
    store.apply(batch, skipped, 2)
    writes = client.seq
    store.apply(batch, skipped, 2)  # redelivered: every item a version conflict, tolerated
    assert store.get("r1") == row("archived") and store.applied_position() == 2
    assert client.seq == writes + 2  # only the checkpoint's redo record and its clearing were written

    client.reject.add("r1")  # a refusal that is not a version conflict
    with pytest.raises(OrgmemError, match="batch not applied.*HTTP 400"):
        store.apply([step(6, "restored", row())], [], 6)
    # The batch stays pending in the checkpoint: the next writer redoes it once ES accepts it.
    assert client.docs["rows-meta"]["checkpoint"]["_source"]["pending"]["position"] == 6
    client.reject.clear()
    assert store_over(client).applied_position() == 6 and store.get("r1") == row()

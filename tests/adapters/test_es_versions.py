"""The Elasticsearch row store's `versions_of`, checked without a server: its query bodies are
evaluated over the documents the store writes, by a small interpreter of the DSL they use, and
the read itself runs against an in-memory stand-in for the search endpoint."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from schemas.rows import Row, RowChange
from services.adapters import elasticsearch_common as es
from services.adapters.row_store.elasticsearch import (
    ElasticsearchRowStore,
    steps_by_query,
    versions_query,
)
from services.adapters.row_store.elasticsearch_documents import history_document
from services.ports import RowMutation
from tests.adapters.es_filters import matches

T0 = datetime(2025, 3, 1, tzinfo=UTC)


def random_rows(seed: int = 3, n: int = 120) -> list[Row]:
    rnd = random.Random(seed)
    return [Row(row_id=f"r{i}", tenant=rnd.choice(["acme", "globex"]), text=f"t{i}", ingest_position=i + 1,
                thread=rnd.choice([None, "", "budget", "hiring"]), acl=rnd.sample(["eng", "finance"], rnd.randint(0, 1)),
                event_time=rnd.choice([None, T0 + timedelta(days=rnd.randrange(90))]),
                ingested_at=T0 + timedelta(days=i), state=rnd.choice(["active", "archived"]),
                superseded_by=rnd.choice([None, "r1"]))
            for i in range(n)]


def test_the_versions_query_selects_the_threads_and_the_named_rows_of_one_tenant():
    rows = random_rows()
    docs = [es.row_document(r) for r in rows]
    for threads, ids in ((["budget"], []), (["budget", "hiring"], ["r3", "r4"]), ([], ["r0", "r7", "nope"]), (["", "x"], [])):
        for tenant in ("acme", "globex"):
            got = {d["row_id"] for d in docs if matches(versions_query(tenant, threads, ids), d)}
            want = {r.row_id for r in rows if r.tenant == tenant and (r.thread in threads or r.row_id in ids)
                    and (r.thread is not None or r.row_id in ids)}
            assert got == want, (threads, ids, tenant)


def test_the_steps_query_takes_the_maintenance_steps_of_the_rows_by_known_at():
    row = random_rows()[5]
    steps = [RowMutation(row=row, change=RowChange(position=p, at=T0 + timedelta(days=d), change=c, state=s))
             for p, d, c, s in ((6, 5, "observed", "active"), (9, 10, "archived", "archived"), (12, 20, "restored", "active"))]
    docs = [history_document(m) for m in steps]
    query = steps_by_query(row.tenant, [row.row_id], T0 + timedelta(days=15))
    assert [d["position"] for d in docs if matches(query, d)] == [9]
    assert not any(matches(steps_by_query("other", [row.row_id], T0 + timedelta(days=30)), d) for d in docs)


class SearchOnly:
    """The search endpoint over documents held here (the only call `versions_of` makes)."""

    def __init__(self, indices: dict[str, list[dict]]):
        self.indices, self.calls = indices, []

    def search(self, index, query, sort, size, search_after=None, track_total_hits=False, source_includes=None):
        self.calls.append(index)
        keys = [next(iter(s)) for s in sort]
        hits = sorted((d for d in self.indices[index] if matches(query, d)), key=lambda d: [d[k] for k in keys])
        hits = hits[:size] if search_after is None else []
        return {"hits": {"hits": [{"_id": d["row_id"], "_source": {k: v for k, v in d.items()
                                                                  if source_includes is None or k in source_includes},
                                   "sort": [d[k] for k in keys]} for d in hits]}}


def test_versions_of_reads_state_and_pointer_as_of_known_at():
    base = dict(tenant="acme", thread="budget", text="x")
    old = Row(row_id="old", ingest_position=1, ingested_at=T0, event_time=T0, **base)
    new = Row(row_id="new", ingest_position=2, ingested_at=T0 + timedelta(days=1), event_time=T0 + timedelta(days=1), **base)
    now_old = old.model_copy(update={"superseded_by": "new", "state": "archived"})
    history = [history_document(RowMutation(row=r, change=RowChange(position=p, at=T0 + timedelta(days=d), change=c,
                                                                     state=s, superseded_by=sb)))
               for r, p, d, c, s, sb in ((old, 1, 0, "observed", "active", None), (new, 2, 1, "observed", "active", None),
                                         (now_old, 5, 10, "superseded", "active", "new"),
                                         (now_old, 7, 20, "archived", "archived", "new"))]
    client = SearchOnly({"rows": [es.row_document(now_old), es.row_document(new)], "rows-history": history})
    store = object.__new__(ElasticsearchRowStore)  # no server: only the client and the index name matter here
    store.client, store.index = client, "rows"

    current = {f.row_id: f for f in store.versions_of("acme", ["budget"])}
    assert (current["old"].state, current["old"].superseded_by) == ("archived", "new") and client.calls == ["rows"]
    at = {day: {f.row_id: (f.state, f.superseded_by) for f in store.versions_of("acme", ["budget"], known_at=T0 + timedelta(days=day))}
          for day in (5, 15, 25)}
    assert at[5]["old"] == ("active", None) and at[15]["old"] == ("active", "new") and at[25]["old"] == ("archived", "new")
    assert at[5]["new"] == ("active", None)
    assert store.versions_of("acme", [], []) == []

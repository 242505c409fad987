"""The cluster's rebuild without downtime, store by store.

Qdrant: against qdrant-client's local mode, which implements collection aliases (create, delete
and switch in one request, and name resolution in every call) as the server does. Elasticsearch:
no server here, so at the request level, against a stand-in that keeps aliases as Elasticsearch
documents them (one `_aliases` request is applied whole or not at all; an alias resolves to its
index in get, index and bulk; responses name the concrete index). Neither has run against a server."""

from __future__ import annotations

import numpy as np
import pytest
from elasticsearch import BadRequestError, NotFoundError
from qdrant_client import QdrantClient

from schemas.rows import RowChange
from services.adapters.cluster_generations import (
    EsGenerations,
    QdrantGenerations,
    next_generation,
)
from services.adapters.row_store.elasticsearch import ElasticsearchRowStore
from services.adapters.vector.qdrant_server import QdrantServerVectorIndex
from services.core.positions import lane_start
from services.core.scope import Scope
from services.errors import ProjectionFenced
from services.ports import RowMutation
from tests.adapters.test_es_fencing import VersionedStandIn, _error, row, step

SUFFIXES = ("", "-history", "-skipped", "-meta")


class Indices:
    def __init__(self, cluster: AliasedStandIn):
        self.cluster, self.existing, self.templates, self.alias_requests = cluster, set(), set(), []

    def get_alias(self, name):
        if name not in self.cluster.aliases:
            raise _error(NotFoundError, 404, f"alias [{name}] missing")
        return {self.cluster.aliases[name]: {"aliases": {name: {}}}}

    def exists(self, index):
        return index in self.existing or index in self.cluster.aliases

    def update_aliases(self, actions):
        self.alias_requests.append(actions)
        aliases, existing = dict(self.cluster.aliases), set(self.existing)
        for action in actions:  # all or nothing: checked on copies, applied at the end
            (kind, body), = action.items()
            if kind == "add":
                if body["index"] not in existing or body["alias"] in existing:
                    raise _error(BadRequestError, 400, f"cannot add alias {body}")
                aliases[body["alias"]] = body["index"]
            elif kind == "remove":
                if aliases.get(body["alias"]) != body["index"]:
                    raise _error(NotFoundError, 404, f"aliases_not_found {body}")
                del aliases[body["alias"]]
            else:
                existing.remove(body["index"])
                self.cluster.docs.pop(body["index"], None)
        self.cluster.aliases, self.existing = aliases, existing

    def delete(self, index, ignore_unavailable=False):
        for name in index.split(","):
            if name in self.cluster.aliases:  # Elasticsearch refuses to delete an index through an alias
                raise _error(BadRequestError, 400, f"{name} matches an alias")
            self.existing.discard(name)
            self.cluster.docs.pop(name, None)

    def exists_index_template(self, name):
        return name in self.templates

    def put_index_template(self, name, **body):
        self.templates.add(name)

    def create(self, index, **body):
        if index in self.existing or index in self.cluster.aliases:
            raise _error(BadRequestError, 400, f"resource_already_exists_exception {index}")
        self.existing.add(index)

    def put_mapping(self, index, properties):
        assert self.exists(index)

    def delete_index_template(self, name):
        self.templates.remove(name)


class AliasedStandIn(VersionedStandIn):
    def __init__(self):
        super().__init__()
        self.aliases: dict[str, str] = {}
        self.indices = Indices(self)
        self.writes: list[str] = []  # the concrete index of every single-document write

    def concrete(self, name: str) -> str:
        return self.aliases.get(name, name)

    def get(self, index, id):
        return {**super().get(self.concrete(index), id), "_index": self.concrete(index)}

    def mget(self, index, ids, **kwargs):
        return super().mget(self.concrete(index), ids, **kwargs)

    def index(self, index, id, document, **kwargs):
        self.writes.append(self.concrete(index))
        return {**super().index(self.concrete(index), id, document, **kwargs), "_index": self.concrete(index)}

    def bulk(self, operations, refresh=None):
        resolved = []
        for action, source in zip(operations[::2], operations[1::2], strict=True):
            (op, meta), = action.items()
            resolved += [{op: {**meta, "_index": self.concrete(meta["_index"])}}, source]
        return super().bulk(resolved, refresh=refresh)

    def make(self, generation: str) -> None:
        """What the row store's constructor creates for a generation: four indices and a template."""
        self.indices.existing.update(generation + s for s in SUFFIXES)
        self.indices.templates.add(f"{generation}-template")


def store_on(cluster: AliasedStandIn, name: str) -> ElasticsearchRowStore:
    store = object.__new__(ElasticsearchRowStore)  # no server: the indices are the stand-in's
    store.client, store.index, store.refresh, store.writer, store._seen = cluster, name, "true", True, {}
    return store


def test_generation_names_count_up_from_the_plain_name():
    assert next_generation("rows", None) == next_generation("rows", "rows") == "rows-g1"
    assert next_generation("rows", "rows-g9") == "rows-g10"
    assert next_generation("rows", "rows-gx") == next_generation("rows", "other-g3") == "rows-g1"


def test_a_new_deployment_starts_at_generation_one_under_the_four_aliases():
    cluster = AliasedStandIn()
    generations = EsGenerations(cluster, "rows")
    assert generations.live() is None
    generations.ensure(cluster.make)
    assert generations.live() == "rows-g1"
    assert cluster.aliases == {f"rows{s}": f"rows-g1{s}" for s in SUFFIXES}
    generations.ensure(cluster.make)  # a second process starting: nothing more
    assert len(cluster.indices.alias_requests) == 1


def test_the_switch_moves_every_alias_in_one_request_and_the_old_generation_is_dropped():
    cluster = AliasedStandIn()
    generations = EsGenerations(cluster, "rows")
    generations.ensure(cluster.make)
    new = generations.next()
    assert new == "rows-g2" and generations.live() == "rows-g1"  # readers are still on g1
    cluster.make(new)
    generations.switch(new)
    request, = cluster.indices.alias_requests[1:]
    assert [next(iter(a)) for a in request] == ["remove", "add"] * 4
    assert cluster.aliases == {f"rows{s}": f"rows-g2{s}" for s in SUFFIXES}
    generations.retire("rows-g1")
    assert cluster.indices.existing == {f"rows-g2{s}" for s in SUFFIXES}
    assert cluster.indices.templates == {"rows-g2-template"}
    assert generations.next() == "rows-g3"


def test_the_plain_indices_of_an_earlier_deployment_go_in_the_same_atomic_request():
    cluster = AliasedStandIn()
    cluster.indices.existing.update(f"rows{s}" for s in SUFFIXES)
    generations = EsGenerations(cluster, "rows")
    assert generations.live() == "rows"
    generations.ensure(cluster.make)  # an existing deployment is left as it is until a rebuild
    assert cluster.indices.alias_requests == []
    new = generations.next()
    cluster.make(new)
    generations.switch(new)
    request, = cluster.indices.alias_requests
    assert sorted(next(iter(a)) for a in request) == ["add"] * 4 + ["remove_index"] * 4
    generations.retire("rows")  # went with the switch: nothing is deleted through the new aliases
    assert generations.live() == "rows-g1" and cluster.indices.existing == {f"rows-g1{s}" for s in SUFFIXES}


def test_processes_start_on_generation_one_and_never_create_an_index_under_an_alias():
    from services.bootstrap.cluster_rebuild import ensure_generations
    from services.settings import Settings

    cluster, qdrant = AliasedStandIn(), QdrantClient(":memory:")
    settings = Settings(profile="cluster", cluster={"es_index": "rows", "qdrant_collection": "rows"})
    for _ in range(2):  # the first process makes generation 1, the next finds it
        ensure_generations(settings, cluster, qdrant, DIM)
        ElasticsearchRowStore(client=cluster, index="rows")  # what every process then opens
        QdrantServerVectorIndex(qdrant, "rows", DIM)
    assert cluster.indices.existing == {f"rows-g1{s}" for s in SUFFIXES}
    assert cluster.aliases == {f"rows{s}": f"rows-g1{s}" for s in SUFFIXES}
    assert {c.name for c in qdrant.get_collections().collections} == {"rows-g1"}
    assert QdrantGenerations(qdrant, "rows").live() == "rows-g1"


def test_a_refused_switch_changes_no_alias():
    cluster = AliasedStandIn()
    generations = EsGenerations(cluster, "rows")
    generations.ensure(cluster.make)
    cluster.indices.existing.update(["rows-g2", "rows-g2-history", "rows-g2-skipped"])  # no -meta: half built
    with pytest.raises(Exception, match="cannot add alias"):
        generations.switch("rows-g2")
    assert cluster.aliases == {f"rows{s}": f"rows-g1{s}" for s in SUFFIXES}


def test_next_drops_what_a_crashed_rebuild_left_under_the_next_name():
    cluster = AliasedStandIn()
    generations = EsGenerations(cluster, "rows")
    generations.ensure(cluster.make)
    cluster.make("rows-g2")
    cluster.docs["rows-g2"] = {"r1": {"_source": {}, "_version": 1, "_seq_no": 1, "_primary_term": 1}}
    assert generations.next() == "rows-g2"
    assert "rows-g2" not in cluster.indices.existing and "rows-g2" not in cluster.docs
    assert "rows-g2-template" not in cluster.indices.templates


def in_lane(changed, place: int) -> RowMutation:
    position = lane_start(1) + place
    return RowMutation(changed, RowChange(position=position, at=changed.ingested_at, change="observed", state="active"))


def test_an_indexer_on_the_old_generation_is_fenced_then_follows_the_switch():
    cluster = AliasedStandIn()
    generations = EsGenerations(cluster, "rows")
    generations.ensure(cluster.make)
    live = store_on(cluster, "rows")  # an indexer: through the aliases
    live.apply([step(1, "observed", row())], [], 1)
    other = row().model_copy(update={"row_id": "u1", "tenant": "umbrella", "ingest_position": lane_start(1) + 1})
    live.apply([in_lane(other, 1)], [], lane_start(1) + 1)  # a second lane of the log, its own checkpoint
    new = generations.next()
    cluster.make(new)
    rebuilt = store_on(cluster, new)  # the rebuild: the new generation's own names
    rebuilt.apply([step(1, "observed", row())], [], 1)
    rebuilt.apply([step(4, "archived", row("archived"))], [], 4)
    # The worst case: the new checkpoint document has the very sequence number the indexer last
    # saw, so a conditional write through the alias would be taken for its own.
    cluster.docs[f"{new}-meta"]["checkpoint"]["_seq_no"] = live._seen[0].seq_no
    before = dict(cluster.docs[f"{new}-meta"]["checkpoint"])
    generations.switch(new)
    generations.fence("rows-g1")
    with pytest.raises(ProjectionFenced):
        live.apply([step(2, "observed", row())], [], 2)  # a batch that was in flight at the switch
    with pytest.raises(ProjectionFenced):  # every lane's checkpoint is fenced, not lane 0's only
        live.apply([in_lane(other, 2)], [], lane_start(1) + 2)
    assert cluster.docs[f"{new}-meta"]["checkpoint"] == before  # the new generation's checkpoint stands
    assert cluster.docs[new]["r1"]["_source"]["state"] == "archived"  # and its row (position 4 > 2)
    assert live.applied_position() == 4  # re-read through the alias: the new generation's
    live.apply([step(5, "restored", row())], [], 5)
    assert cluster.writes[-1] == f"{new}-meta" and cluster.docs[new]["r1"]["_source"]["state"] == "active"
    generations.drop("rows-g1")
    assert store_on(cluster, "rows").applied_position() == 5


# --- Qdrant: qdrant-client's local mode ---------------------------------------------------------

DIM = 8


def vectors_for(n: int, seed: int) -> np.ndarray:
    matrix = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def rows_named(*ids: str):
    return [row().model_copy(update={"row_id": rid}) for rid in ids]


def found(index: QdrantServerVectorIndex) -> set[str]:
    return {hit.row_id for hit in index.search(vectors_for(1, 99)[0], Scope(tenant="acme"), 50)}


def test_qdrant_readers_stay_on_the_live_collection_until_the_switch_then_follow_it():
    client = QdrantClient(":memory:")
    generations = QdrantGenerations(client, "rows")
    generations.ensure(lambda name: QdrantServerVectorIndex(client, name, DIM))
    assert generations.live() == "rows-g1"
    reader = QdrantServerVectorIndex(client, "rows", DIM)  # opened on the alias
    writer = QdrantServerVectorIndex(client, "rows", DIM)
    writer.upsert(rows_named("old-1", "old-2"), vectors_for(2, 1))
    new = generations.next()
    aside = QdrantServerVectorIndex(client, new, DIM)
    aside.upsert(rows_named("new-1", "new-2", "new-3"), vectors_for(3, 2))
    assert found(reader) == {"old-1", "old-2"}  # building beside: readers see the live generation
    generations.switch(new)
    assert found(reader) == {"new-1", "new-2", "new-3"}  # the same open reader, after the switch
    writer.upsert(rows_named("after"), vectors_for(1, 3))  # the indexer's next write lands in new
    assert "after" in found(aside)
    generations.retire("rows-g1")
    assert {c.name for c in client.get_collections().collections} == {new}
    assert generations.next() == "rows-g3"


def test_qdrant_an_earlier_deployment_s_collection_is_replaced_by_the_alias():
    client = QdrantClient(":memory:")
    QdrantServerVectorIndex(client, "rows", DIM).upsert(rows_named("legacy"), vectors_for(1, 4))
    generations = QdrantGenerations(client, "rows")
    generations.ensure(lambda name: QdrantServerVectorIndex(client, name, DIM))
    assert generations.live() == "rows"  # left as it is until a rebuild
    new = generations.next()
    QdrantServerVectorIndex(client, new, DIM).upsert(rows_named("rebuilt"), vectors_for(1, 5))
    generations.switch(new)
    generations.retire("rows")
    assert generations.live() == "rows-g1" and found(QdrantServerVectorIndex(client, "rows", DIM)) == {"rebuilt"}


def test_qdrant_next_drops_a_half_built_collection():
    client = QdrantClient(":memory:")
    generations = QdrantGenerations(client, "rows")
    generations.ensure(lambda name: QdrantServerVectorIndex(client, name, DIM))
    QdrantServerVectorIndex(client, "rows-g2", DIM).upsert(rows_named("half"), vectors_for(1, 6))
    assert generations.next() == "rows-g2"
    assert not client.collection_exists("rows-g2")

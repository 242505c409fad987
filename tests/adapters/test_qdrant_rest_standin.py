"""The Qdrant REST stand-in (tests/qdrant_rest.py) as the adapters see it over HTTP: the alias
generations of a rebuild, Qdrant's error envelope and status codes, and an unreachable server.
One stand-in process for the module; each test uses collections of its own."""

from __future__ import annotations

import uuid

import httpx
import numpy as np
import pytest
from qdrant_client import QdrantClient
from qdrant_client.http.exceptions import UnexpectedResponse

from schemas.rows import Row
from services.adapters.cluster_generations import QdrantGenerations
from services.adapters.vector.qdrant_server import QdrantServerVectorIndex
from services.core.scope import Scope
from services.errors import BackendUnavailable, OrgmemError
from tests.qdrant_rest import qdrant_rest_url

DIM = 4


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with qdrant_rest_url(tmp_path_factory.mktemp("standin")) as found:
        yield found


@pytest.fixture
def client(url):
    opened = QdrantClient(url=url, check_compatibility=False)
    yield opened
    opened.close()


def rows_named(*ids: str) -> list[Row]:
    from datetime import UTC, datetime

    return [Row(row_id=rid, tenant="acme", text=rid, ingest_position=i + 1, ingested_at=datetime(2025, 1, 1, tzinfo=UTC))
            for i, rid in enumerate(ids)]


def unit(n: int, seed: int) -> np.ndarray:
    matrix = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def found(index: QdrantServerVectorIndex) -> set[str]:
    return {hit.row_id for hit in index.search(unit(1, 99)[0], Scope(tenant="acme"), 50)}


def test_a_rebuild_switches_the_alias_and_an_open_reader_follows_it(client):
    name = f"rows-{uuid.uuid4().hex[:8]}"
    generations = QdrantGenerations(client, name)
    generations.ensure(lambda collection: QdrantServerVectorIndex(client, collection, DIM))
    assert generations.live() == f"{name}-g1"
    reader = QdrantServerVectorIndex(client, name, DIM)  # through the alias
    reader.upsert(rows_named("old"), unit(1, 1))
    new = generations.next()
    QdrantServerVectorIndex(client, new, DIM).upsert(rows_named("new-1", "new-2"), unit(2, 2))
    assert found(reader) == {"old"}
    generations.switch(new)
    assert found(reader) == {"new-1", "new-2"}
    generations.retire(f"{name}-g1")
    assert f"{name}-g1" not in {c.name for c in client.get_collections().collections}
    assert {a.alias_name: a.collection_name for a in client.get_collection_aliases(new).aliases} == {name: new}


def test_errors_come_in_qdrant_s_envelope_with_its_status_codes(url, client):
    with pytest.raises(UnexpectedResponse) as missing:
        client.get_collection("no-such-collection")
    assert missing.value.status_code == 404
    assert "no-such-collection" in missing.value.content.decode()
    name = f"rows-{uuid.uuid4().hex[:8]}"
    QdrantServerVectorIndex(client, name, DIM)
    with pytest.raises(UnexpectedResponse) as taken:
        client.create_collection(name, vectors_config={})
    assert taken.value.status_code == 409
    # A body that is not the route's model is refused as the server does, not half applied.
    refused = httpx.put(f"{url}/collections/{name}/points", json={"points": [{"id": "not-a-point-id"}]})
    assert refused.status_code == 400 and "error" in refused.json()["status"]
    assert httpx.post(f"{url}/collections/{name}/points/count", json={}).json()["result"] == {"count": 0}
    assert httpx.get(f"{url}/collections/{name}/snapshots").status_code == 404  # not implemented here


def test_a_refused_request_is_the_adapter_s_error_not_an_outage(client):
    index = QdrantServerVectorIndex(client, f"rows-{uuid.uuid4().hex[:8]}", DIM)
    client.delete_collection(index.collection)  # gone behind the adapter's back: 404 on the next call
    with pytest.raises(OrgmemError) as refused:
        index.vectors(["a"])
    assert not isinstance(refused.value, BackendUnavailable) and "HTTP 404" in str(refused.value)


def test_a_stopped_stand_in_is_backend_unavailable(tmp_path):
    with qdrant_rest_url(tmp_path / "gone") as gone:
        index = QdrantServerVectorIndex(QdrantClient(url=gone, check_compatibility=False, timeout=2), "rows", DIM)
    with pytest.raises(BackendUnavailable, match="vector index"):
        index.upsert(rows_named("a"), unit(1, 3))

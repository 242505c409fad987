"""Contract of the VectorIndex port, run against every adapter.

Qdrant Edge and qdrant-client's local mode always run; a real Qdrant server joins when
ORGMEM_QDRANT_URL names one. Results are held to `services.core.scope.admits` exactly.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import socket
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient

from schemas.rows import Row
from services.adapters.vector._payload import (
    carried_row_id,
    carrying_point_id,
    point_id,
)
from services.adapters.vector.qdrant_edge import CARRYING_MARKER, QdrantEdgeVectorIndex
from services.adapters.vector.qdrant_edge_tiers import TieredEdgeVectorIndex
from services.adapters.vector.qdrant_server import QdrantServerVectorIndex
from services.core.scope import Scope, admits
from services.errors import BackendUnavailable, InvalidVectors, OrgmemError
from services.ports import Hit, VectorIndex

DIM = 24
T0 = datetime(2024, 1, 1, tzinfo=UTC)


class Backend:
    """Opens (and reopens) one adapter over the same storage, and closes what it opened."""

    def __init__(self, opener: Callable[[], VectorIndex], cleanup: Callable[[], None] | None = None):
        self._opener = opener
        self._cleanup = cleanup
        self._opened: list[VectorIndex] = []

    def open(self) -> VectorIndex:
        index = self._opener()
        self._opened.append(index)
        return index

    def close_all(self) -> None:
        if self._cleanup is not None:
            self._cleanup()
        for index in self._opened:
            try:
                index.close()
            except OrgmemError:
                pass  # already closed by the test


def _edge(tmp_path: Path) -> Backend:
    return Backend(lambda: QdrantEdgeVectorIndex(tmp_path / "edge", DIM))


def _edge_tiered(tmp_path: Path) -> Backend:
    return Backend(lambda: TieredEdgeVectorIndex(tmp_path / "tiered", DIM))


class SealedAfterEachUpsert(TieredEdgeVectorIndex):
    """A tiered index whose rows go into the sealed graph shard after every upsert (a build in a
    child process each time), so that later writes meet rows in both tiers."""

    def upsert(self, rows, vectors, positions=None):
        try:
            super().upsert(rows, vectors, positions)
        finally:
            self.optimize()


def _edge_sealing(tmp_path: Path) -> Backend:
    return Backend(lambda: SealedAfterEachUpsert(tmp_path / "sealing", DIM))


def _server_local(tmp_path: Path) -> Backend:
    return Backend(lambda: QdrantServerVectorIndex(QdrantClient(path=str(tmp_path / "qdrant")), "rows", DIM))


def _server_remote(tmp_path: Path) -> Backend:
    url = os.environ.get("ORGMEM_QDRANT_URL")
    if not url:
        pytest.skip("ORGMEM_QDRANT_URL is not set: no Qdrant server to test against")
    collection = f"orgmem_contract_{uuid.uuid4().hex[:12]}"

    def drop() -> None:
        client = QdrantClient(url=url)  # not a context manager in qdrant-client 1.20
        try:
            client.delete_collection(collection)
        finally:
            client.close()

    return Backend(lambda: QdrantServerVectorIndex(QdrantClient(url=url), collection, DIM), drop)


def _server_standin(tmp_path: Path) -> Backend:
    """The server adapter over HTTP, against tests/qdrant_rest.py (qdrant-client's local mode
    behind Qdrant's REST routes, not a Qdrant server): a process per test."""
    from contextlib import ExitStack

    from tests.qdrant_rest import qdrant_rest_url

    stack = ExitStack()
    url = stack.enter_context(qdrant_rest_url(tmp_path / "standin"))
    # No version check: its thread may still be asking when the stand-in is stopped.
    return Backend(lambda: QdrantServerVectorIndex(QdrantClient(url=url, check_compatibility=False), "rows", DIM),
                   stack.close)


@pytest.fixture(params=[_edge, _edge_tiered, _edge_sealing, _server_local, _server_remote, _server_standin],
                ids=["edge", "edge-tiered", "edge-sealing", "server-local", "server-remote", "server-standin"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    made = request.param(tmp_path)
    yield made
    made.close_all()


@pytest.fixture
def index(backend: Backend) -> VectorIndex:
    return backend.open()


def unit(rng: np.random.Generator, n: int) -> np.ndarray:
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def make_row(row_id: str, position: int, **fields: object) -> Row:
    values: dict[str, object] = {
        "row_id": row_id,
        "tenant": "acme",
        "text": f"text of {row_id}",
        "ingest_position": position,
        "ingested_at": T0 + timedelta(hours=position),
        "event_time": T0 + timedelta(hours=position),
    }
    values.update(fields)
    return Row(**values)


EVERYTHING = Scope(tenant="acme")


def test_nearest_neighbour_order(index: VectorIndex) -> None:
    rng = np.random.default_rng(1)
    rows = [make_row(f"r{i}", i) for i in range(30)]
    vectors = unit(rng, 30)
    index.upsert(rows, vectors)
    query = vectors[7] + 0.05 * unit(rng, 1)[0]
    hits = index.search(query, EVERYTHING, limit=10)
    cosine = vectors @ (query / np.linalg.norm(query))
    expected = [f"r{i}" for i in np.argsort(-cosine)[:10]]
    assert [h.row_id for h in hits] == expected
    assert hits[0].row_id == "r7"
    assert [h.score for h in hits] == pytest.approx(sorted(cosine, reverse=True)[:10], abs=1e-4)


def test_equal_scores_go_to_the_later_ingested_row_then_row_id(index: VectorIndex) -> None:
    rng = np.random.default_rng(2)
    same = unit(rng, 1)[0]
    others = unit(rng, 20)
    rows = [make_row("early", 1), make_row("late", 9), make_row("b-twin", 5), make_row("a-twin", 5)]
    rows += [make_row(f"o{i}", 10 + i) for i in range(20)]
    index.upsert(rows, np.vstack([same, same, same, same, others]))
    hits = index.search(same, EVERYTHING, limit=4)
    assert [h.row_id for h in hits] == ["late", "a-twin", "b-twin", "early"]
    # The cut falls inside the tie: still the tie rule, not the engine's internal order.
    assert [h.row_id for h in index.search(same, EVERYTHING, limit=1)] == ["late"]


def test_a_tie_wider_than_the_page_is_still_cut_by_the_tie_rule(index: VectorIndex) -> None:
    rng = np.random.default_rng(12)
    same = unit(rng, 1)[0]
    # More equal scores than one page of results holds, ids shuffled against positions, so
    # the engine's own order among them (by point id) is unrelated to ours.
    positions = rng.permutation(40) + 1
    rows = [make_row(f"twin-{i:02d}", int(p)) for i, p in enumerate(positions)]
    index.upsert(rows, np.tile(same, (40, 1)))
    by_position = [r.row_id for r in sorted(rows, key=lambda r: -r.ingest_position)]
    assert [h.row_id for h in index.search(same, EVERYTHING, limit=3)] == by_position[:3]
    assert [h.row_id for h in index.search(same, EVERYTHING, limit=40)] == by_position


def test_reupsert_replaces_vector_and_payload(index: VectorIndex) -> None:
    rng = np.random.default_rng(3)
    first, second = unit(rng, 2)
    index.upsert([make_row("r", 1, kind="email")], first[None, :])
    index.upsert([make_row("r", 1, kind="ticket")], second[None, :])
    assert np.allclose(index.vectors(["r"])["r"], second, atol=1e-5)
    hits = index.search(second, EVERYTHING, limit=10)
    assert [h.row_id for h in hits] == ["r"]  # one point, not two
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert index.search(second, Scope(tenant="acme", kinds=frozenset({"email"})), limit=10) == []
    assert [h.row_id for h in index.search(second, Scope(tenant="acme", kinds=frozenset({"ticket"})), limit=10)] == ["r"]


def test_update_state_archives_and_known_at_sees_the_past(index: VectorIndex) -> None:
    rng = np.random.default_rng(4)
    vectors = unit(rng, 3)
    rows = [make_row(f"r{i}", i) for i in range(3)]
    index.upsert(rows, vectors)
    index.update_state([rows[1].model_copy(update={"state": "archived", "superseded_by": "r2"})])

    assert {h.row_id for h in index.search(vectors[1], EVERYTHING, limit=10)} == {"r0", "r2"}
    known = T0 + timedelta(days=1)
    then = Scope(tenant="acme", known_at=known)
    assert {h.row_id for h in index.search(vectors[1], then, limit=10)} == {"r0", "r1", "r2"}
    archived_then = Scope(tenant="acme", known_at=known, inactive_at_known=frozenset({"r1"}))
    assert {h.row_id for h in index.search(vectors[1], archived_then, limit=10)} == {"r0", "r2"}
    before_r2 = Scope(tenant="acme", known_at=T0 + timedelta(hours=1))
    assert {h.row_id for h in index.search(vectors[1], before_r2, limit=10)} == {"r0", "r1"}
    # The payload changed, the vector did not; a row never indexed is not created.
    assert np.allclose(index.vectors(["r1"])["r1"], vectors[1], atol=1e-5)
    index.update_state([make_row("ghost", 50)])
    assert index.vectors(["ghost"]) == {}
    # Restored again, and an event time that became unknown is dropped, not kept.
    index.update_state([rows[1].model_copy(update={"event_time": None})])
    assert "r1" in {h.row_id for h in index.search(vectors[1], EVERYTHING, limit=10)}
    dated = Scope(tenant="acme", as_of=T0 + timedelta(days=1))
    assert {h.row_id for h in index.search(vectors[1], dated, limit=10)} == {"r0", "r2"}


def test_persists_across_reopen(backend: Backend) -> None:
    rng = np.random.default_rng(5)
    vectors = unit(rng, 5)
    rows = [make_row(f"r{i}", i, acl=["Eng"]) for i in range(5)]
    first = backend.open()
    first.upsert(rows, vectors)
    first.update_state([rows[0].model_copy(update={"state": "archived"})])
    first.close()
    with pytest.raises(BackendUnavailable):
        first.search(vectors[0], EVERYTHING, limit=5)
    again = backend.open()
    scope = Scope(tenant="acme", readers=frozenset({"eng"}))
    assert {h.row_id for h in again.search(vectors[0], scope, limit=10)} == {"r1", "r2", "r3", "r4"}
    assert np.allclose(again.vectors(["r3"])["r3"], vectors[3], atol=1e-5)


def test_reset_drops_everything(index: VectorIndex) -> None:
    rng = np.random.default_rng(6)
    vectors = unit(rng, 4)
    index.upsert([make_row(f"r{i}", i) for i in range(4)], vectors)
    index.reset()
    assert index.search(vectors[0], EVERYTHING, limit=10) == []
    assert index.vectors(["r0", "r1"]) == {}
    index.upsert([make_row("fresh", 9)], vectors[:1])
    assert [h.row_id for h in index.search(vectors[0], EVERYTHING, limit=10)] == ["fresh"]


def test_vectors_round_trip(index: VectorIndex) -> None:
    rng = np.random.default_rng(7)
    vectors = unit(rng, 6)
    index.upsert([make_row(f"r{i}", i) for i in range(6)], vectors)
    got = index.vectors(["r5", "r0", "missing"])
    assert set(got) == {"r0", "r5"}
    assert got["r0"].dtype == np.float32 and got["r0"].shape == (DIM,)
    assert np.allclose(got["r0"], vectors[0], atol=1e-5)
    assert np.allclose(got["r5"], vectors[5], atol=1e-5)
    assert index.vectors([]) == {}


def test_bad_vectors_name_the_problem_and_the_rest_goes_in(index: VectorIndex) -> None:
    rng = np.random.default_rng(8)
    vectors = unit(rng, 3)
    rows = [make_row(f"r{i}", i) for i in range(3)]
    with pytest.raises(OrgmemError, match=r"vectors: expected shape \(3, 24\)"):
        index.upsert(rows, vectors[:, :10])
    bad = vectors.copy()
    bad[1, 4] = np.nan
    with pytest.raises(InvalidVectors, match="r1") as caught:
        index.upsert(rows, bad)
    assert set(caught.value.problems) == {"r1"}
    assert set(index.vectors(["r0", "r1", "r2"])) == {"r0", "r2"}
    with pytest.raises(OrgmemError, match="vector: expected 24 values"):
        index.search(vectors[0][:5], EVERYTHING, limit=3)


def test_empty_batches_and_zero_limit_are_no_ops(index: VectorIndex) -> None:
    rng = np.random.default_rng(11)
    vector = unit(rng, 1)
    index.upsert([], np.empty((0, DIM), dtype=np.float32))
    index.update_state([])
    assert index.search(vector[0], EVERYTHING, limit=10) == []
    index.upsert([make_row("r", 1)], vector)
    assert index.search(vector[0], EVERYTHING, limit=0) == []
    assert index.search(vector[0], Scope(tenant="acme", kinds=frozenset()), limit=10) == []
    with pytest.raises(OrgmemError, match="limit"):
        index.search(vector[0], EVERYTHING, limit=-1)


def test_unreachable_server_is_backend_unavailable() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = QdrantClient(url=f"http://127.0.0.1:{port}", timeout=2, check_compatibility=False)
    with pytest.raises(BackendUnavailable, match="vector index unavailable"):
        QdrantServerVectorIndex(client, "rows", DIM)


def test_edge_optimize_keeps_answers(tmp_path: Path) -> None:
    rng = np.random.default_rng(9)
    vectors = unit(rng, 50)
    index = QdrantEdgeVectorIndex(tmp_path / "edge", DIM)
    try:
        index.upsert([make_row(f"r{i}", i) for i in range(50)], vectors)
        before = index.search(vectors[3], EVERYTHING, limit=10)
        assert isinstance(index.optimize(), bool)
        after = index.search(vectors[3], EVERYTHING, limit=10)
        assert [h.row_id for h in after] == [h.row_id for h in before]
        assert after[0] == Hit("r3", pytest.approx(1.0, abs=1e-4))
    finally:
        index.close()


def test_search_ef_reaches_the_graph_search(tmp_path: Path, monkeypatch) -> None:
    for bad in (0, -5, 2.5, True, "64"):
        with pytest.raises(OrgmemError, match="vector_search_ef"):
            QdrantEdgeVectorIndex(tmp_path / "bad", DIM, search_ef=bad)
        with pytest.raises(OrgmemError, match="vector_search_ef"):
            QdrantServerVectorIndex(QdrantClient(path=str(tmp_path / "local")), "rows", DIM, search_ef=bad)
    rng = np.random.default_rng(21)
    vectors = unit(rng, 30)
    index = QdrantEdgeVectorIndex(tmp_path / "edge", DIM, search_ef=64)
    try:
        index.upsert([make_row(f"r{i}", i) for i in range(30)], vectors)
        shard = index._live()
        asked: list = []

        class Spy:
            def __getattr__(self, name):
                return getattr(shard, name)

            def query(self, request):
                asked.append(request.params)
                return shard.query(request)

        monkeypatch.setattr(index, "_shard", Spy())
        hits = index.search(vectors[7], EVERYTHING, 5)
        exact = index.search(vectors[7], EVERYTHING, 5, exact=True)
        assert [p.hnsw_ef for p in asked] == [64, None] and asked[1].exact
        assert hits == exact and hits[0].row_id == "r7"
    finally:
        index.close()


# --- orgmem-shaped row ids ----------------------------------------------------------------------


def orgmem_id(name: str, letter: str = "r") -> str:
    """A row id of the shape core.write_rules makes: a letter and 23 hex digits."""
    return letter + hashlib.sha256(name.encode()).hexdigest()[:23]


def test_point_ids_carry_orgmem_row_ids_and_only_those() -> None:
    rnd = random.Random(3)
    for _ in range(200):
        row_id = orgmem_id(str(rnd.random()), rnd.choice("rdz"))
        carried = carrying_point_id(row_id)
        assert uuid.UUID(carried).hex[12] == "0"  # version digit 0: never a name-based id (5)
        assert str(uuid.UUID(carried)) == carried  # the canonical form, as the engine gives ids back
        assert carried_row_id(carried) == row_id
        assert carried_row_id(uuid.UUID(carried)) == row_id
    for foreign in ["r0", "row-001", "R" + "a" * 23, "r" + "a" * 24, "r" + "A" * 23, "early"]:
        assert carrying_point_id(foreign) == point_id(foreign)
        assert carried_row_id(point_id(foreign)) is None and uuid.UUID(point_id(foreign)).hex[12] == "5"


def test_orgmem_row_ids_rank_tie_and_follow_state(backend: Backend) -> None:
    rng = np.random.default_rng(13)
    same = unit(rng, 1)[0]
    rows = [make_row(orgmem_id(f"n{i}"), 100 + i) for i in range(12)]
    rows += [make_row(orgmem_id(f"twin{i}", "d"), int(p)) for i, p in enumerate(rng.permutation(6) + 1)]
    rows += [make_row("plain-twin", 3), make_row("plain-other", 200)]  # ids of another shape mixed in
    vectors = np.vstack([unit(rng, 12), np.tile(same, (7, 1)), unit(rng, 1)])
    index = backend.open()
    index.upsert(rows, vectors)
    query = same + 0.3 * vectors[0]
    cosine = vectors @ (query / np.linalg.norm(query))
    expected = [rows[i].row_id for i in sorted(range(len(rows)), key=lambda i: (-round(float(cosine[i]), 5),
                                                                                 -rows[i].ingest_position, rows[i].row_id))]
    for limit in (1, 3, 7, 10, len(rows)):  # cuts before, inside and after the tie
        assert [h.row_id for h in index.search(query, EVERYTHING, limit)] == expected[:limit]
    archived = rows[13].model_copy(update={"state": "archived"})
    index.update_state([archived])
    assert archived.row_id not in {h.row_id for h in index.search(query, EVERYTHING, len(rows))}
    got = index.vectors([rows[0].row_id, "plain-twin", orgmem_id("never")])
    assert set(got) == {rows[0].row_id, "plain-twin"}
    index.close()
    again = backend.open()
    assert [h.row_id for h in again.search(query, EVERYTHING, 5)] == [r for r in expected if r != archived.row_id][:5]


def test_edge_search_reads_payload_only_for_ties_and_foreign_ids(tmp_path: Path, monkeypatch) -> None:
    rng = np.random.default_rng(14)
    index = QdrantEdgeVectorIndex(tmp_path / "edge", DIM)
    try:
        rows = [make_row(orgmem_id(f"n{i}"), i) for i in range(20)]
        vectors = unit(rng, 20)
        index.upsert(rows, vectors)
        shard = index._live()
        asked: list[list[str]] = []
        real = shard.retrieve

        class Spy:
            def __getattr__(self, name):
                return getattr(shard, name)

            def retrieve(self, ids, **kwargs):
                asked.append(list(ids))
                return real(ids, **kwargs)

        monkeypatch.setattr(index, "_shard", Spy())
        assert index.search(vectors[4], EVERYTHING, 10)[0].row_id == rows[4].row_id
        assert asked == []  # distinct scores, carrying ids: no payload read at all
        index.upsert([make_row("foreign", 30), make_row(orgmem_id("copy"), 31)], np.vstack([vectors[4], vectors[4]]))
        hits = index.search(vectors[4], EVERYTHING, 10)
        assert [h.row_id for h in hits[:3]] == [orgmem_id("copy"), "foreign", rows[4].row_id]
        assert len(asked) == 1 and len(asked[0]) == 3  # the three tied points, nothing else
    finally:
        index.close()


def test_edge_shard_with_name_based_ids_still_answers(tmp_path: Path) -> None:
    """A shard made before point ids carried row ids (no marker) keeps its ids until a reset."""
    legacy, rows, vectors = _legacy_shard_holding(tmp_path / "edge", 8, seed=15)
    try:
        legacy.update_state([rows[2].model_copy(update={"state": "archived"})])
        assert [h.row_id for h in legacy.search(vectors[5], EVERYTHING, 1)] == [rows[5].row_id]
        assert rows[2].row_id not in {h.row_id for h in legacy.search(vectors[2], EVERYTHING, 8)}
        assert set(legacy.vectors([r.row_id for r in rows])) == {r.row_id for r in rows}
        stored = {str(p.id) for p in legacy._live().retrieve([point_id(r.row_id) for r in rows], with_payload=False, with_vector=False)}
        assert len(stored) == 8  # still name-based
        legacy.reset()
        assert (tmp_path / "edge" / CARRYING_MARKER).exists()
        legacy.upsert(rows[:1], vectors[:1])
        assert [str(p.id) for p in legacy._live().retrieve([carrying_point_id(rows[0].row_id)], with_payload=False, with_vector=False)]
    finally:
        legacy.close()


def _legacy_shard(path: Path) -> QdrantEdgeVectorIndex:
    """A shard as made before point ids carried row ids: no marker, name-based ids."""
    QdrantEdgeVectorIndex(path, DIM).close()
    (path / CARRYING_MARKER).unlink()
    return QdrantEdgeVectorIndex(path, DIM)


def _legacy_shard_holding(path: Path, n: int, seed: int) -> tuple[QdrantEdgeVectorIndex, list[Row], np.ndarray]:
    """A legacy shard holding n orgmem-shaped rows with random unit vectors."""
    vectors = unit(np.random.default_rng(seed), n)
    rows = [make_row(orgmem_id(f"n{i}"), i) for i in range(n)]
    shard = _legacy_shard(path)
    shard.upsert(rows, vectors)
    return shard, rows, vectors


def test_edge_optimize_copies_a_name_based_shard_to_carrying_ids(tmp_path: Path) -> None:
    rng = np.random.default_rng(16)
    rows = [make_row(orgmem_id(f"n{i}"), i, acl=["eng"] if i % 3 else []) for i in range(2500)]
    rows += [make_row("foreign", 2600), make_row(orgmem_id("twin"), 2601)]
    vectors = np.vstack([unit(rng, 2501), unit(rng, 1)])
    vectors[-1] = vectors[7]  # a tie, ordered by ingest position
    index = _legacy_shard(tmp_path / "edge")
    try:
        index.upsert(rows, vectors)
        index.update_state([rows[5].model_copy(update={"state": "archived"})])
        scopes = [EVERYTHING, Scope(tenant="acme", readers=frozenset({"eng"}))]
        queries = [vectors[7], vectors[5], vectors[-2], unit(rng, 1)[0]]
        before = [index.search(q, s, 20, exact=True) for q in queries for s in scopes]
        assert index.optimize() is True
        assert index._carrying and (tmp_path / "edge" / CARRYING_MARKER).exists()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["edge"]  # no staging or retired copy left
        assert [index.search(q, s, 20, exact=True) for q in queries for s in scopes] == before
        assert index.search(vectors[7], EVERYTHING, 2)[0].row_id == orgmem_id("twin")
        stored = index._live().retrieve([carrying_point_id(rows[0].row_id), point_id("foreign")],
                                        with_payload=False, with_vector=False)
        assert len(stored) == 2
        got = index.vectors([rows[3].row_id, "foreign"])
        assert np.allclose(got[rows[3].row_id], vectors[3], atol=1e-5) and "foreign" in got
        assert index.optimize() in (True, False)  # a second call has nothing to copy
    finally:
        index.close()


def test_edge_open_finishes_or_undoes_an_interrupted_swap(tmp_path: Path) -> None:
    index, rows, vectors = _legacy_shard_holding(tmp_path / "edge", 4, seed=17)
    index.close()
    # Stopped between the two renames: the old shard comes back under its name.
    (tmp_path / "edge").rename(tmp_path / "edge.retired")
    reopened = QdrantEdgeVectorIndex(tmp_path / "edge", DIM)
    try:
        assert not reopened._carrying
        assert [h.row_id for h in reopened.search(vectors[2], EVERYTHING, 1)] == [rows[2].row_id]
    finally:
        reopened.close()
    # Stopped after them: the retired copy is removed.
    shutil.copytree(tmp_path / "edge", tmp_path / "edge.retired")
    again = QdrantEdgeVectorIndex(tmp_path / "edge", DIM)
    again.close()
    assert not (tmp_path / "edge.retired").exists()


# --- property: the index admits exactly what `admits` admits ---------------------------------

PEOPLE = ["alice", "bob", "eng", "ops"]
KINDS = ["email", "ticket", "meeting", "doc"]
AUTHORS = ["", "ann", "ben", "cy"]
THREADS = [None, "t1", "t2", "t3"]


def random_rows(rnd: random.Random, n: int) -> list[Row]:
    rows = []
    for position in range(1, n + 1):
        acl = rnd.sample(PEOPLE, rnd.randint(0, 2))
        if acl and rnd.random() < 0.3:
            acl = [f" {acl[0].upper()} ", *acl[1:]]  # stored tokens are trimmed and lower-cased
        event = None if rnd.random() < 0.2 else T0 + timedelta(days=rnd.randint(0, 60), microseconds=rnd.choice([0, 1, 999]))
        rows.append(
            make_row(
                f"row-{position:03d}",
                position,
                tenant=rnd.choice(["acme", "globex"]),
                acl=acl,
                event_time=event,
                ingested_at=T0 + timedelta(days=rnd.randint(0, 60), seconds=rnd.randint(0, 5)),
                state="active" if rnd.random() < 0.75 else "archived",
                kind=rnd.choice(KINDS),
                author=rnd.choice(AUTHORS),
                thread=rnd.choice(THREADS),
            )
        )
    return rows


def maybe_subset(rnd: random.Random, values: list, none_chance: float = 0.6) -> frozenset | None:
    if rnd.random() < none_chance:
        return None
    return frozenset(rnd.sample(values, rnd.randint(0, len(values))))


def random_scope(rnd: random.Random, rows: list[Row]) -> Scope:
    known_at = None
    inactive: frozenset[str] = frozenset()
    if rnd.random() < 0.4:
        # Often exactly a stored time: the bound is inclusive.
        known_at = rnd.choice(rows).ingested_at if rnd.random() < 0.5 else T0 + timedelta(days=rnd.uniform(0, 60))
        inactive = frozenset(r.row_id for r in rows if rnd.random() < 0.2)
    as_of = None
    if rnd.random() < 0.4:
        dated = [r.event_time for r in rows if r.event_time is not None]
        as_of = rnd.choice(dated) if rnd.random() < 0.5 else T0 + timedelta(days=rnd.uniform(0, 60))
    return Scope(
        tenant=rnd.choice(["acme", "globex", "initech"]),
        readers=maybe_subset(rnd, [*PEOPLE, "zed"], none_chance=0.3),
        as_of=as_of,
        known_at=known_at,
        kinds=maybe_subset(rnd, KINDS),
        authors=maybe_subset(rnd, AUTHORS),
        threads=maybe_subset(rnd, ["t1", "t2", "t3"]),
        inactive_at_known=inactive,
    )


def test_scope_filter_admits_exactly_what_admits_admits(index: VectorIndex) -> None:
    rnd = random.Random(20240601)
    rng = np.random.default_rng(10)
    rows = random_rows(rnd, 200)
    vectors = unit(rng, len(rows))
    index.upsert(rows, vectors)
    # Some rows change state after indexing, as maintenance does.
    changed = [r.model_copy(update={"state": "archived" if r.state == "active" else "active"}) for r in rows[::7]]
    index.update_state(changed)
    current = {r.row_id: r for r in rows} | {r.row_id: r for r in changed}
    position = {r.row_id: i for i, r in enumerate(rows)}

    nonempty = 0
    for _ in range(150):
        scope = random_scope(rnd, rows)
        query = unit(rng, 1)[0]
        expected = {rid for rid, row in current.items() if admits(row, scope)}
        hits = index.search(query, scope, limit=len(rows) + 10)
        assert {h.row_id for h in hits} == expected, scope
        assert len(hits) == len(expected)  # no duplicates
        nonempty += bool(expected)
        cosine = {h.row_id: float(vectors[position[h.row_id]] @ query) for h in hits}
        assert [h.score for h in hits] == pytest.approx([cosine[h.row_id] for h in hits], abs=1e-4)
        assert all(a.score >= b.score for a, b in pairwise(hits))
        # With a small limit every slot still goes to an eligible row: the best five of the
        # scope, which a post-filter over the global top five would not give.
        top = sorted(expected, key=lambda rid: -float(vectors[position[rid]] @ query))[:5]
        assert [h.row_id for h in index.search(query, scope, limit=5)] == top, scope
    assert nonempty > 40  # the scopes exercised real results, not only empty answers

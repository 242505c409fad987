"""The exact shards' copy in memory (services/adapters/vector/qdrant_edge_exact.py) answers what the
engine's own exact search answers, for every kind of scope, through archiving, moves, re-upserts,
compaction and a reopen; a condition it cannot test fails loudly instead of admitting rows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from services.adapters.vector._payload import Condition, ScopeFilter, scope_filter
from services.adapters.vector.qdrant_edge_exact import ExactMirror, MirroredEdgeShard
from services.adapters.vector.qdrant_edge_search import edge_filter
from services.core.scope import Scope
from services.errors import BackendUnavailable, InvalidVectors, OrgmemError
from tests.contract.test_vector_index import DIM, T0, make_row, unit

FAR = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def rows_for(n: int, start: int = 0) -> list:
    rows = []
    for i in range(start, start + n):
        dated = i % 7 != 0
        rows.append(make_row(
            f"r{i:05d}", i + 1, tenant="acme" if i % 5 else "globex",
            acl=[["eng"], ["ops"], [], ["eng", "legal"]][i % 4], kind=["email", "ticket", "chat"][i % 3],
            author="" if i % 11 == 0 else f"p{i % 4}@corp.example", thread=None if i % 6 == 0 else f"t{i % 9}",
            event_time=(FAR if i == 13 else T0 + timedelta(hours=i)) if dated else None))
    return rows


def scopes(rows) -> list[Scope]:
    middle = rows[len(rows) // 2]
    stamp = middle.event_time or T0
    return [
        Scope(tenant="acme"), Scope(tenant="globex"), Scope(tenant="nobody"),
        Scope(tenant="acme", readers=frozenset({"eng"})), Scope(tenant="acme", readers=frozenset({"legal", "ops"})),
        Scope(tenant="acme", readers=frozenset()),
        Scope(tenant="acme", as_of=stamp), Scope(tenant="acme", since=stamp), Scope(tenant="acme", as_of=FAR),
        Scope(tenant="acme", since=stamp, as_of=stamp),  # one instant: the bounds are inclusive
        Scope(tenant="acme", known_at=middle.ingested_at),
        Scope(tenant="acme", known_at=middle.ingested_at, inactive_at_known=frozenset({rows[1].row_id, rows[2].row_id})),
        Scope(tenant="acme", kinds=frozenset({"ticket"})), Scope(tenant="acme", kinds=frozenset({"nothing"})),
        Scope(tenant="acme", authors=frozenset({"p1@corp.example", "p3@corp.example"})),
        Scope(tenant="acme", threads=frozenset({"t2", "t5"})), Scope(tenant="acme", threads=frozenset()),
        Scope(tenant="acme", readers=frozenset({"eng"}), kinds=frozenset({"email", "chat"}), as_of=stamp),
    ]


def disagreements(shard: MirroredEdgeShard, rows, queries: np.ndarray) -> list[str]:
    wrong = []
    for qi, query in enumerate(queries):
        for scope in scopes(rows):
            wanted = scope_filter(scope)
            for fetch in (1, 7, 60):
                mine = shard.exact_nearest(query.tolist(), wanted, fetch)
                qfilter = edge_filter(scope)
                engine = shard.nearest(query.tolist(), qfilter, fetch, True) if qfilter is not None else []
                if [s.row_id for s in mine] != [s.row_id for s in engine] or not np.allclose(
                        [s.score for s in mine], [s.score for s in engine], atol=1e-5):
                    wrong.append(f"query {qi}, {scope}, fetch {fetch}")
    return wrong


def test_the_copy_answers_what_the_engine_answers_through_every_kind_of_write(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    rows, vectors = rows_for(120), unit(rng, 120)
    shard = MirroredEdgeShard(tmp_path / "x", DIM, wal=False)
    try:
        shard.upsert(rows, vectors)
        queries = unit(rng, 4)
        assert disagreements(shard, rows, queries) == []
        # Archived rows leave the current view; the state at known_at comes from the scope.
        archived = [r.model_copy(update={"state": "archived"}) for r in rows[10:30]]
        shard.update_state(archived)
        # A re-upsert replaces the vector and the payload (a new kind, a dropped thread).
        moved = [r.model_copy(update={"kind": "chat", "thread": None}) for r in rows[40:50]]
        shard.upsert(moved, unit(rng, 10))
        # A row that moved to another shard leaves this one.
        assert sorted(shard.discard([r.row_id for r in rows[60:70]] + ["r99999"])) == [r.row_id for r in rows[60:70]]
        assert disagreements(shard, rows, queries) == []
        shard.close()
        with pytest.raises(BackendUnavailable):
            shard.exact_nearest(queries[0].tolist(), scope_filter(Scope(tenant="acme")), 5)
        shard = MirroredEdgeShard(tmp_path / "x", DIM)  # the copy is read back from the shard on disk
        assert len(shard.mirror) == 110
        assert disagreements(shard, rows, queries) == []
    finally:
        shard.close()


def test_a_refused_vector_stays_out_of_the_copy_and_the_rest_goes_in(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    rows, vectors = rows_for(5), unit(rng, 5)
    vectors[2] = np.nan
    shard = MirroredEdgeShard(tmp_path / "x", DIM, wal=False)
    try:
        with pytest.raises(InvalidVectors):
            shard.upsert(rows, vectors)
        found = {s.row_id for s in shard.exact_nearest(vectors[0].tolist(), ScopeFilter(must=[]), 10)}
        assert found == {r.row_id for i, r in enumerate(rows) if i != 2}
        assert rows[2].row_id not in shard.vectors([r.row_id for r in rows])
    finally:
        shard.close()


def test_compaction_after_many_moves_keeps_answers_and_frees_the_vectors() -> None:
    rng = np.random.default_rng(5)
    rows, vectors = rows_for(3000), unit(rng, 3000)
    mirror = ExactMirror(DIM)
    from services.adapters.vector._payload import row_payload

    mirror.put([row_payload(r) for r in rows], vectors)
    mirror.drop(r.row_id for r in rows[:2000])
    assert len(mirror) == 1000 and len(mirror._ids) == 1000  # compacted: slots of the dropped rows gone
    query = vectors[2500]
    best = mirror.nearest(query.tolist(), ScopeFilter(must=[]), 3)
    assert best[0].row_id == rows[2500].row_id and best[0].score == pytest.approx(1.0, abs=1e-5)
    assert mirror.vectors([rows[0].row_id]) == {}


def test_a_condition_the_copy_cannot_test_is_an_error_not_a_pass() -> None:
    from services.adapters.vector._payload import row_payload

    mirror = ExactMirror(DIM)
    mirror.put([row_payload(make_row("r1", 1, acl=["eng"]))], unit(np.random.default_rng(1), 1))
    for unknown in (Condition("source", "eq", "mail"), Condition("acl", "eq", "eng"), Condition("kind", "lte", "x")):
        with pytest.raises(OrgmemError, match="cannot test"):
            mirror.nearest([1.0] * DIM, ScopeFilter(must=[unknown]), 5)

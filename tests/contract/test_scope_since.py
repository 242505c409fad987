"""Scope.since (a lower bound on event time, inclusive; undated rows fail it) means the same in
every index as in services.core.scope.admits: the row store, each lexical index, each vector index.
The adapters' own contract modules provide the fixtures (each adapter they test, this one tests)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import numpy as np

from schemas.rows import Row
from services.core.scope import Scope, admits
from services.core.term_match import ANY_TERM
from tests.contract.test_lexical_index import location, open_index  # noqa: F401 (fixtures)
from tests.contract.test_row_store import observed, store  # noqa: F401 (fixtures)
from tests.contract.test_vector_index import DIM, backend, unit  # noqa: F401 (fixtures)

T0 = datetime(2025, 2, 1, tzinfo=UTC)


def dated_rows(n: int, seed: int) -> list[Row]:
    rng = random.Random(seed)
    # Sub-second times on purpose: an index that kept whole seconds would let a row in early.
    times = [None, T0, T0 + timedelta(microseconds=1), *(T0 + timedelta(seconds=rng.uniform(-4e6, 8e6)) for _ in range(n))]
    return [Row(row_id=f"r{i}", tenant="acme", text="release train decision", ingest_position=i + 1,
                ingested_at=T0 + timedelta(minutes=i), event_time=moment, author="rita", kind="email")
            for i, moment in enumerate(times)]


def scopes(rows: list[Row], seed: int) -> list[Scope]:
    rng = random.Random(seed)
    moments = [r.event_time for r in rows if r.event_time is not None]
    found = [Scope("acme", since=T0), Scope("acme", since=T0 + timedelta(microseconds=1)),
             Scope("acme", since=T0, as_of=T0 + timedelta(days=30))]
    for _ in range(30):
        since = rng.choice(moments) + timedelta(microseconds=rng.choice([-1, 0, 1]))
        found.append(Scope("acme", since=since, as_of=rng.choice([None, since + timedelta(days=rng.uniform(0, 60))])))
    return found


def expected(rows: list[Row], scope: Scope) -> set[str]:
    return {r.row_id for r in rows if admits(r, scope)}


def test_admits_leaves_out_undated_and_earlier_rows():
    rows = dated_rows(0, 1)
    assert expected(rows, Scope("acme", since=T0)) == {"r1", "r2"}
    assert expected(rows, Scope("acme", since=T0 + timedelta(microseconds=1))) == {"r2"}
    # A naive bound is UTC, as as_of is.
    assert expected(rows, Scope("acme", since=T0.replace(tzinfo=None))) == {"r1", "r2"}


def test_the_row_store_applies_since_as_admits(store):  # noqa: F811
    rows = dated_rows(60, 2)
    store.apply([observed(r) for r in rows], [], len(rows))
    for scope in scopes(rows, 3):
        assert {r.row_id for r in store.in_scope(scope)} == expected(rows, scope)
        assert {h.row_id for h in store.recent(scope, [], len(rows))} == expected(rows, scope)


def test_each_lexical_index_applies_since_as_admits(open_index, location):  # noqa: F811
    index = open_index(location)
    rows = dated_rows(60, 4)
    index.upsert(rows)
    for scope in scopes(rows, 5):
        assert {h.row_id for h in index.search_text(["release"], scope, 100, ANY_TERM)} == expected(rows, scope)


def test_each_vector_index_applies_since_as_admits(backend):  # noqa: F811
    index = backend.open()
    rows = dated_rows(60, 6)
    vectors = unit(np.random.default_rng(7), len(rows))
    index.upsert(rows, vectors)
    for scope in scopes(rows, 8):
        assert {h.row_id for h in index.search(vectors[0], scope, limit=100)} == expected(rows, scope)

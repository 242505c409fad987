"""The Qdrant server adapter keeps the state of the highest log position in a point's payload:
its writes with `positions` are conditional (Qdrant's conditional update), so a stalled indexer
cannot put an older state back. Run on qdrant-client's local mode, which implements the same
filters; a server needs 1.16 or later for `update_filter`."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest
from qdrant_client import QdrantClient

from schemas.rows import Row
from services.adapters.vector.qdrant_server import QdrantServerVectorIndex
from services.core.scope import Scope

T0 = datetime(2025, 6, 2, tzinfo=UTC)
DIM = 4


@pytest.fixture(params=["local", "standin"])
def index(request, tmp_path):
    """Local mode in process, and the same over HTTP through tests/qdrant_rest.py (the
    conditional upsert's `update_filter` and the payload overwrite's filter in REST bodies)."""
    if request.param == "local":
        idx = QdrantServerVectorIndex(QdrantClient(":memory:"), "rows", DIM)
        yield idx
        idx.close()
        return
    from tests.qdrant_rest import qdrant_rest_url

    with qdrant_rest_url(tmp_path / "standin") as url:
        idx = QdrantServerVectorIndex(QdrantClient(url=url, check_compatibility=False), "rows", DIM)
        yield idx
        idx.close()


def row(row_id: str, position: int, **changes) -> Row:
    return Row(row_id=row_id, tenant="acme", text=row_id, ingest_position=position, ingested_at=T0, **changes)


def active(index) -> list[str]:
    return sorted(h.row_id for h in index.search(np.ones(DIM, dtype=np.float32), Scope("acme"), 10))


def test_an_older_state_never_replaces_a_newer_one(index):
    vectors = np.eye(DIM, dtype=np.float32)[:2]
    index.upsert([row("a", 1), row("b", 2)], vectors, positions={"a": 1, "b": 2})
    index.update_state([row("a", 1, state="archived")], positions={"a": 6})
    # The stalled indexer wakes: its upsert of the new rows and its older state step change nothing.
    index.upsert([row("a", 1), row("b", 2)], vectors, positions={"a": 1, "b": 2})
    index.update_state([row("a", 1, state="active", kind="email")], positions={"a": 4})
    assert active(index) == ["b"]
    # A later step still applies, and a row never indexed is passed over.
    index.update_state([row("a", 1), row("ghost", 9)], positions={"a": 8, "ghost": 9})
    assert active(index) == ["a", "b"]


def test_points_written_without_positions_are_still_updated(index):
    # A collection filled before payloads kept positions: its points name none, so any step applies.
    index.upsert([row("a", 1)], np.eye(DIM, dtype=np.float32)[:1])
    index.update_state([row("a", 1, state="archived")], positions={"a": 3})
    assert active(index) == []
    index.update_state([row("a", 1)], positions={"a": 2})  # older than the step now recorded
    assert active(index) == []

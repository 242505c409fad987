"""The Elasticsearch row store keeps one checkpoint per lane (log partition), checked without a
server against the stand-ins of test_es_fencing (Elasticsearch's versioning rules) and
test_blue_green (indices created and deleted): each lane's checkpoint moves, fences and is
redone on its own, and lane 0 is the checkpoint document of a store from before lanes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from schemas.rows import Row, RowChange
from services.adapters.row_store.elasticsearch import ElasticsearchRowStore
from services.core.positions import LANE_SPAN, Checkpoints, lane_start
from services.errors import OrgmemError, ProjectionFenced
from services.ports import RowMutation, SkippedDocument
from tests.adapters.test_blue_green import AliasedStandIn
from tests.adapters.test_es_fencing import VersionedStandIn, store_over

T0 = datetime(2025, 9, 1, tzinfo=UTC)
L1 = LANE_SPAN  # where lane 1 starts: its first event is at L1 + 1


def lane_row(row_id: str, at: int, state: str = "active", tenant: str | None = None) -> Row:
    return Row(row_id=row_id, tenant=tenant or ("acme" if at < L1 else "globex"), text=f"text of {row_id}",
               ingest_position=at, ingested_at=T0, state=state)


def step(position: int, changed: Row, change: str = "observed") -> RowMutation:
    return RowMutation(changed, RowChange(position=position, at=T0 + timedelta(seconds=position % 1000), change=change,
                                          state=changed.state))


def meta(client: VersionedStandIn) -> dict[str, dict]:
    return client.docs["rows-meta"]


def test_two_lanes_checkpoints_move_independently():
    client = VersionedStandIn()
    store = store_over(client)
    store.apply([step(1, lane_row("a1", 1))], [], 1)
    store.apply([step(L1 + 1, lane_row("g1", L1 + 1)), step(L1 + 2, lane_row("g2", L1 + 2))], [], L1 + 2)
    store.apply([step(3, lane_row("a2", 3))], [SkippedDocument("a3", 4, "empty", tenant="acme")], 4)
    assert (store.applied_position(), store.applied_position(0), store.applied_position(1)) == (4, 4, L1 + 2)
    assert sorted(meta(client)) == ["checkpoint", "checkpoint-1"]
    fresh = store_over(client)  # another process reads both, in one request
    assert fresh.applied_positions() == {0: 4, 1: L1 + 2}
    assert isinstance(fresh.applied_positions(), Checkpoints)
    # An older batch of a lane is a replay there: neither that lane nor the other goes back.
    fresh.apply([step(L1 + 1, lane_row("g1", L1 + 1))], [], L1 + 1)
    assert fresh.applied_positions() == {0: 4, 1: L1 + 2}


def test_a_batch_in_lane_one_leaves_lane_zero_untouched_and_unwritten_lanes_are_absent():
    client = VersionedStandIn()
    store = store_over(client)
    store.apply([step(L1 + 5, lane_row("g1", L1 + 5))], [], L1 + 5)
    assert "checkpoint" not in meta(client)  # lane 0 was never written, not even as a start
    assert store.applied_position(0) == 0 and store.applied_position(2) == lane_start(2)
    assert store.applied_positions() == {1: L1 + 5}
    assert store.applied_positions().of(0) == 0 and store.applied_positions().of(3) == lane_start(3)

    store.apply([step(2, lane_row("a1", 2))], [], 2)
    lane_zero = dict(meta(client)["checkpoint"])
    store.apply([step(L1 + 9, lane_row("g2", L1 + 9))], [], L1 + 9)
    assert meta(client)["checkpoint"] == lane_zero  # not rewritten: same sequence number
    assert store_over(client).applied_positions() == {0: 2, 1: L1 + 9}


def test_a_batch_holding_events_of_another_lane_is_refused_before_anything_is_written():
    client = VersionedStandIn()
    store = store_over(client)
    with pytest.raises(OrgmemError, match="another lane"):
        store.apply([step(3, lane_row("a1", 3)), step(L1 + 4, lane_row("g1", L1 + 4))], [], L1 + 4)
    with pytest.raises(OrgmemError, match="another lane"):
        store.apply([step(L1 + 4, lane_row("g1", L1 + 4))], [SkippedDocument("a9", 3, "empty", tenant="acme")], L1 + 4)
    assert client.docs == {}


def test_a_stale_writer_is_fenced_in_lane_one_while_its_lane_zero_writes_go_on():
    client = VersionedStandIn()
    zombie, member = store_over(client), store_over(client)
    zombie.apply([step(1, lane_row("a1", 1))], [], 1)
    zombie.apply([step(L1 + 1, lane_row("g1", L1 + 1))], [], L1 + 1)
    assert member.applied_position(1) == L1 + 1  # lane 1 is handed to the member (a rebalance)

    def member_moves_lane_one_on():
        # The zombie stalls between its lane-1 redo record and its rows: the member finishes
        # that pending batch, then archives the same row later in the lane.
        assert member.applied_position(1) == L1 + 3
        member.apply([step(L1 + 6, lane_row("g1", L1 + 1, "archived"), "archived")], [], L1 + 6)

    client.before_bulk = member_moves_lane_one_on
    with pytest.raises(ProjectionFenced, match="lane 1"):
        zombie.apply([step(L1 + 3, lane_row("g1", L1 + 1, "active"), "restored")], [], L1 + 3)
    assert member.get("g1").state == "archived" and client.docs["rows"]["g1"]["_version"] == L1 + 6
    assert member.applied_position(1) == L1 + 6
    # Lane 0's fencing state is its own: the zombie's lane-0 writes still go through.
    zombie.apply([step(2, lane_row("a2", 2))], [], 2)
    assert member.applied_positions() == {0: 2, 1: L1 + 6}
    # A second stale lane-1 write: still fenced, lane 0 still at the zombie's last write.
    member.apply([step(L1 + 7, lane_row("g3", L1 + 7))], [], L1 + 7)
    assert zombie.applied_position(1) == L1 + 7  # fenced once, it re-read the lane
    member.apply([step(L1 + 8, lane_row("g4", L1 + 8))], [], L1 + 8)
    with pytest.raises(ProjectionFenced, match="lane 1"):
        zombie.apply([step(L1 + 8, lane_row("g4", L1 + 8))], [], L1 + 8)
    zombie.apply([step(5, lane_row("a5", 5))], [], 5)
    assert store_over(client).applied_positions() == {0: 5, 1: L1 + 8}


def leave_pending_in_lane_one(client: VersionedStandIn) -> ElasticsearchRowStore:
    """A writer whose lane-1 batch ES refused half-way: the batch stays pending in lane 1."""
    store = store_over(client)
    store.apply([step(3, lane_row("a1", 3))], [], 3)
    store.apply([step(L1 + 1, lane_row("g1", L1 + 1))], [], L1 + 1)
    client.reject.add("g2")
    with pytest.raises(OrgmemError, match="batch not applied"):
        store.apply([step(L1 + 4, lane_row("g2", L1 + 4))], [SkippedDocument("g3", L1 + 4, "empty", tenant="globex")],
                    L1 + 4)
    client.reject.clear()
    assert meta(client)["checkpoint-1"]["_source"]["pending"]["position"] == L1 + 4
    return store


def test_a_pending_batch_in_lane_one_is_finished_by_the_next_read_of_lane_one_only():
    client = VersionedStandIn()
    leave_pending_in_lane_one(client)
    successor = store_over(client)
    assert successor.applied_position(0) == 3  # lane 0's read does not touch lane 1
    assert meta(client)["checkpoint-1"]["_source"]["pending"] is not None and "g2" not in client.docs["rows"]
    reader = store_over(client)
    reader.writer = False  # a reader leaves the batch to the writers
    assert reader.applied_position(1) == L1 + 1 and meta(client)["checkpoint-1"]["_source"]["pending"] is not None
    assert successor.applied_position(1) == L1 + 4
    assert meta(client)["checkpoint-1"]["_source"] == {"applied_position": L1 + 4, "pending": None}
    assert successor.get("g2") == lane_row("g2", L1 + 4) and f"g3:{L1 + 4}" in client.docs["rows-skipped"]
    successor.apply([step(L1 + 5, lane_row("g5", L1 + 5))], [], L1 + 5)  # and writes on from there
    assert store_over(client).applied_positions() == {0: 3, 1: L1 + 5}


def test_a_pending_batch_in_lane_one_is_finished_by_applied_positions():
    client = VersionedStandIn()
    leave_pending_in_lane_one(client)
    reader = store_over(client)
    reader.writer = False
    assert reader.applied_positions() == {0: 3, 1: L1 + 1}
    successor = store_over(client)
    assert successor.applied_positions() == {0: 3, 1: L1 + 4}
    assert meta(client)["checkpoint-1"]["_source"]["pending"] is None
    assert sorted(client.docs["rows"]) == ["a1", "g1", "g2"] and f"g3:{L1 + 4}" in client.docs["rows-skipped"]
    successor.apply([step(L1 + 5, lane_row("g5", L1 + 5))], [], L1 + 5)  # its fencing state is current
    successor.apply([step(4, lane_row("a4", 4))], [], 4)
    assert store_over(client).applied_positions() == {0: 4, 1: L1 + 5}


def test_lane_zero_reads_a_checkpoint_document_from_before_lanes_unchanged():
    client = VersionedStandIn()
    # What the store wrote before lanes: one `checkpoint` document, here with a batch left pending.
    old_batch = {"position": 42, "skipped": [["a9", 42, "empty", None, "acme"]],
                 "mutations": [{"row": lane_row("a1", 40).model_dump(mode="json"),
                                "change": step(42, lane_row("a1", 40)).change.model_dump(mode="json")}]}
    client.index("rows-meta", "checkpoint", {"applied_position": 41, "pending": old_batch})
    reader = store_over(client)
    reader.writer = False
    assert reader.applied_position() == 41 and reader.applied_positions() == {0: 41}
    store = store_over(client)
    assert store.applied_position() == 42 and store.get("a1") == lane_row("a1", 40)
    store.apply([step(43, lane_row("a2", 43))], [], 43)
    assert sorted(meta(client)) == ["checkpoint"]  # no `checkpoint-0`: lane 0 is the old document
    assert meta(client)["checkpoint"]["_source"] == {"applied_position": 43, "pending": None}
    assert store_over(client).applied_positions() == {0: 43}


def test_reset_clears_every_lane_and_fences_their_writers():
    cluster = AliasedStandIn()
    store = ElasticsearchRowStore(client=cluster, index="rows")
    other = ElasticsearchRowStore(client=cluster, index="rows")
    store.apply([step(2, lane_row("a1", 2))], [], 2)
    other.apply([step(L1 + 3, lane_row("g1", L1 + 3))], [], L1 + 3)
    other.apply([step(2 * L1 + 1, lane_row("h1", 2 * L1 + 1, tenant="initech"))], [], 2 * L1 + 1)
    assert store.applied_positions() == {0: 2, 1: L1 + 3, 2: 2 * L1 + 1}
    store.reset()
    assert store.applied_positions() == {} and store.applied_position(1) == lane_start(1)
    assert store.get("g1") is None and cluster.docs.get("rows-meta", {}) == {}
    # The other writer saw lanes 1 and 2 before the reset: its next write to either is fenced...
    with pytest.raises(ProjectionFenced, match="lane 1"):
        other.apply([step(L1 + 4, lane_row("x1", L1 + 4))], [], L1 + 4)
    # ...and once it re-reads every lane, it replays each from its start.
    assert other.applied_positions() == {}
    other.apply([step(2 * L1 + 1, lane_row("h1", 2 * L1 + 1, tenant="initech"))], [], 2 * L1 + 1)
    other.apply([step(L1 + 1, lane_row("g1", L1 + 1))], [], L1 + 1)
    assert store.applied_positions() == {1: L1 + 1, 2: 2 * L1 + 1}


class ErasableStandIn(VersionedStandIn):
    """With the two calls an erasure adds: delete_by_query (by ids, or by row_id terms) and
    forcemerge (nothing to do in memory)."""

    def delete_by_query(self, index, query, refresh=None, conflicts=None):
        (kind, body), = query.items()
        wanted = set(body["values"]) if kind == "ids" else set(body["row_id"])
        stored = self.docs.get(index, {})
        for doc_id in [d for d, doc in stored.items() if (d if kind == "ids" else doc["_source"]["row_id"]) in wanted]:
            del stored[doc_id]

    @property
    def indices(self):
        return self

    def forcemerge(self, index, only_expunge_deletes=False):
        pass


def test_an_erasure_moves_the_checkpoint_of_its_position_s_lane_only():
    client = ErasableStandIn()
    store = store_over(client)
    store.apply([step(1, lane_row("a1", 1))], [], 1)
    store.apply([step(L1 + 1, lane_row("g1", L1 + 1)), step(L1 + 2, lane_row("g2", L1 + 2))], [], L1 + 2)
    assert store.erase("globex", ["g1", "nope"], L1 + 7) == ["g1"]
    assert store.applied_positions() == {0: 1, 1: L1 + 7} and store.get("g1") is None
    assert {(s["_source"]["row_id"], s["_source"]["position"]) for s in client.docs["rows-skipped"].values()} == {
        ("g1", L1 + 7), ("nope", L1 + 7)}


def test_an_out_of_band_purge_records_its_skips_at_the_rows_lane_and_moves_no_checkpoint():
    client = ErasableStandIn()
    store = store_over(client)
    store.apply([step(5, lane_row("a1", 5))], [], 5)
    store.apply([step(L1 + 8, lane_row("g2", L1 + 8))], [], L1 + 8)
    before = {doc_id: dict(doc) for doc_id, doc in meta(client).items()}
    assert store.erase("globex", ["g2"], None) == ["g2"]
    assert store.erase("acme", ["gone"], None) == []  # no row stored: lane 0's checkpoint
    skips = {s["_source"]["row_id"]: s["_source"]["position"] for s in client.docs["rows-skipped"].values()}
    assert skips == {"g2": L1 + 8, "gone": 5}
    assert meta(client) == before  # a purge is not a log event: no checkpoint moved

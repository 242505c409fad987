"""RowStore contract: every adapter of the port passes the same tests."""

import os
import random
from datetime import UTC, datetime, timedelta

import pytest

from schemas.rows import Row, RowChange
from services.core.positions import lane_start
from services.core.scope import Scope, admits
from services.ports import RowMutation, SkippedDocument

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _sqlite(tmp_path):
    from services.adapters.row_store.sqlite import SqliteRowStore

    return SqliteRowStore(tmp_path / "rows.sqlite")


def _elasticsearch(tmp_path):
    if not os.environ.get("ORGMEM_ES_URL"):
        pytest.skip("ORGMEM_ES_URL not set: no Elasticsearch to test against")
    from services.adapters.row_store.elasticsearch import ElasticsearchRowStore

    return ElasticsearchRowStore.for_tests(os.environ["ORGMEM_ES_URL"])


@pytest.fixture(params=[_sqlite, _elasticsearch], ids=["sqlite", "elasticsearch"])
def store(request, tmp_path):
    s = request.param(tmp_path)
    yield s
    s.close()


def make_row(i, **kw):
    base = dict(row_id=f"r{i}", tenant="t", text=f"text {i}", author="Alice", ingest_position=i,
                ingested_at=T0 + timedelta(days=i), event_time=T0 + timedelta(days=i), thread="th")
    base.update(kw)
    return Row(**base)


def observed(row, change="observed", state=None, position=None):
    position = position or row.ingest_position
    return RowMutation(row=row, change=RowChange(position=position, at=T0 + timedelta(days=position),
                                                 change=change, state=state or row.state))


def test_apply_get_history_and_checkpoint(store):
    r1, r2 = make_row(1, source="email", source_id="m1"), make_row(2)
    store.apply([observed(r1), observed(r2)], [SkippedDocument("r9", 3, "duplicate_text", "r1", "t")], 3)
    assert store.get("r1") == r1 and store.get("nope") is None
    assert set(store.get_many(["r1", "r2", "x"])) == {"r1", "r2"}
    assert store.applied_position() == 3
    assert store.find_source("t", "email", "m1") == "r1" and store.find_source("u", "email", "m1") is None
    assert store.skipped("r9").duplicate_of == "r1"
    archived = r1.model_copy(update={"state": "archived"})
    store.apply([observed(archived, "archived", position=5)], [], 5)
    assert store.get("r1").state == "archived"
    assert [h.change for h in store.history("r1")] == ["observed", "archived"]
    # replaying the same batch changes nothing
    store.apply([observed(archived, "archived", position=5)], [], 5)
    assert len(store.history("r1")) == 2 and store.applied_position() == 5
    assert store.count("t") == {"active": 1, "archived": 1, "skipped": 1}


def test_skipped_documents_are_counted_per_tenant(store):
    # Issue 16 (low): /v1/stats of one tenant counted every tenant's skipped documents.
    t_row, u_row = make_row(1), make_row(2, tenant="u")
    store.apply([observed(t_row), observed(u_row)], [
        SkippedDocument("r7", 3, "duplicate_text", "r1", "t"),
        SkippedDocument("r8", 4, "empty", None, "u"),
        SkippedDocument("r9", 5, "duplicate_text", "r2", "u"),
    ], 5)
    assert store.count("t") == {"active": 1, "archived": 0, "skipped": 1}
    assert store.count("u") == {"active": 1, "archived": 0, "skipped": 2}
    assert store.count("nobody") == {"active": 0, "archived": 0, "skipped": 0}
    assert store.count() == {"active": 2, "archived": 0, "skipped": 3}
    assert store.skipped("r8").tenant == "u"


def test_rows_in_scope_without_their_texts_are_the_same_rows_with_empty_text(store):
    rows = [make_row(1, participants=["Bob <bob@x.example>"], acl=["group:eng"]), make_row(2, tenant="u"),
            make_row(3, tags=["assignee:bob"])]
    store.apply([observed(r) for r in rows], [], 3)
    whole, bare = store.in_scope(Scope("t")), store.in_scope(Scope("t"), with_text=False)
    assert [r.row_id for r in whole] == [r.row_id for r in bare] == ["r1", "r3"]
    assert [r.model_copy(update={"text": ""}) for r in whole] == bare and all(r.text for r in whole)
    fetched, titled = store.get_many(["r3", "r1", "r2"]), store.get_many(["r3", "r1", "missing"], with_text=False)
    assert set(fetched) == {"r1", "r2", "r3"} and set(titled) == {"r1", "r3"}  # get_many does not scope
    assert all(titled[i] == fetched[i].model_copy(update={"text": ""}) for i in titled) and fetched["r1"].text


def test_heads_carry_the_ranking_fields_of_stored_rows(store):
    dated, undated = make_row(1, thread="th-1"), make_row(2, event_time=None, thread=None)
    store.apply([observed(dated), observed(undated)], [], 2)
    heads = store.heads(["r2", "r1", "missing", "r1"])
    assert set(heads) == {"r1", "r2"}
    assert heads["r1"] == ("r1", "th-1", 1, dated.event_time, dated.ingested_at)
    assert heads["r2"].thread is None and heads["r2"].event_time is None
    # Undated rows order by their ingest time in the recency reserve.
    assert heads["r2"].recency == (undated.ingested_at, 2) and heads["r1"].recency == (dated.event_time, 1)
    assert store.heads([]) == {}


def test_active_text_lookup_is_per_author_scope_and_active_only(store):
    from services.core.write_rules import author_scope, content_hash

    store.apply([observed(make_row(1, text="Remote days: 3"))], [], 1)
    assert store.find_active_text("t", author_scope("alice"), content_hash("Remote days: 3")) == "r1"
    assert store.find_active_text("t", author_scope("bob"), content_hash("Remote days: 3")) is None
    store.apply([observed(make_row(1, text="Remote days: 3", state="archived"), "archived", position=2)], [], 2)
    assert store.find_active_text("t", author_scope("alice"), content_hash("Remote days: 3")) is None


def test_thread_in_date_order_with_undated_last(store):
    rows = [make_row(1, event_time=T0 + timedelta(days=30)), make_row(2, event_time=None), make_row(3, event_time=T0)]
    store.apply([observed(r) for r in rows], [], 3)
    assert [r.row_id for r in store.thread("t", "th")] == ["r3", "r1", "r2"]


def test_inactive_at_follows_the_state_history(store):
    r = make_row(1)
    store.apply([observed(r)], [], 1)
    store.apply([observed(r.model_copy(update={"state": "archived"}), "archived", position=10)], [], 10)
    store.apply([observed(r, "restored", position=20)], [], 20)
    assert store.inactive_at("t", T0 + timedelta(days=5)) == frozenset()
    assert store.inactive_at("t", T0 + timedelta(days=15)) == {"r1"}
    assert store.inactive_at("t", T0 + timedelta(days=25)) == frozenset()
    assert store.inactive_at("other", T0 + timedelta(days=15)) == frozenset()


def test_recent_equals_reference_scope_semantics(store):
    rng = random.Random(3)
    rows = []
    for i in range(1, 121):
        rows.append(make_row(
            i, tenant=rng.choice(["t", "u"]), acl=rng.choice([[], ["alice"], ["bob", "group:eng"]]),
            event_time=rng.choice([None, T0 + timedelta(days=rng.randint(0, 300))]),
            state=rng.choice(["active", "active", "archived"]), kind=rng.choice(["email", "ticket"]),
            author=rng.choice(["Alice", "Bob"]),
        ))
    store.apply([observed(r) for r in rows], [], 120)
    for _ in range(150):
        known = rng.choice([None, T0 + timedelta(days=rng.randint(0, 130))])
        scope = Scope(
            tenant=rng.choice(["t", "u"]),
            readers=rng.choice([None, frozenset({"alice"}), frozenset({"group:eng"}), frozenset()]),
            as_of=rng.choice([None, T0 + timedelta(days=rng.randint(0, 300))]),
            known_at=known,
            inactive_at_known=frozenset(rng.sample([r.row_id for r in rows], 5)) if known else frozenset(),
            kinds=rng.choice([None, frozenset({"email"})]),
            authors=rng.choice([None, frozenset({"Bob"})]),
        )
        expected = sorted((r for r in rows if admits(r, scope)), key=lambda r: -r.ingest_position)
        exclude = [r.row_id for r in expected[:2]]
        got = store.recent(scope, exclude=exclude, limit=5)
        assert [r.row_id for r in got] == [r.row_id for r in expected[2:7]]


def test_named_finds_rows_by_exact_source_id_inside_the_scope_only(store):
    rng = random.Random(5)
    rows = []
    for i in range(1, 121):
        rows.append(make_row(
            i, tenant=rng.choice(["t", "u"]), acl=rng.choice([[], ["alice"], ["bob"]]),
            event_time=rng.choice([None, T0 + timedelta(days=rng.randint(0, 300))]),
            state=rng.choice(["active", "active", "archived"]), source=rng.choice(["email", "jira"]),
            # Ids repeat across sources and tenants; some rows have none.
            source_id=rng.choice([None, f"id-{rng.randint(0, 30)}@host"]),
        ))
    rows = list({(r.tenant, r.source, r.source_id or r.row_id): r for r in rows}.values())  # unique per source
    store.apply([observed(r) for r in rows], [], 120)
    for _ in range(150):
        scope = Scope(tenant=rng.choice(["t", "u"]), readers=rng.choice([None, frozenset({"alice"}), frozenset()]),
                      as_of=rng.choice([None, T0 + timedelta(days=rng.randint(0, 300))]))
        asked = [f"id-{rng.randint(0, 30)}@host" for _ in range(rng.randint(0, 4))]
        expected = sorted((r for r in rows if admits(r, scope) and r.source_id in asked), key=lambda r: -r.ingest_position)
        got = store.named(scope, asked, limit=3)
        assert [h.row_id for h in got] == [r.row_id for r in expected[:3]]
    # A near miss names nothing: the lookup is exact (case, brackets, a prefix, a pattern).
    some = next(r for r in rows if r.source_id and r.state == "active")
    near = [some.source_id.upper(), f"<{some.source_id}>", some.source_id[:-1], "id-%", "*", "", "' OR 1=1 --"]
    assert store.named(Scope(tenant=some.tenant), near, limit=10) == []
    assert [h.row_id for h in store.named(Scope(tenant=some.tenant), [some.source_id], limit=10)] != []


def test_reset_empties_everything(store):
    store.apply([observed(make_row(1))], [], 1)
    store.apply([in_lane_row(2, 1, "r-lane2")], [], lane_start(2) + 1)
    store.reset()
    assert store.get("r1") is None and store.applied_position() == 0
    assert store.applied_positions() == {} and store.applied_position(2) == lane_start(2)


def in_lane_row(lane: int, place: int, row_id: str) -> RowMutation:
    """A row of tenant "u" observed at `place` in `lane` of the log."""
    row = make_row(1, row_id=row_id, tenant="u", ingest_position=lane_start(lane) + place)
    return RowMutation(row=row, change=RowChange(position=row.ingest_position, at=T0, change="observed", state="active"))


def test_each_lane_of_the_log_has_its_own_checkpoint(store):
    # A log split by tenant: lane 1's positions are all above lane 0's, and neither lane's
    # checkpoint may move the other's (lane 0 would skip its next events, or lane 1 replay).
    assert store.applied_position(1) == lane_start(1) and store.applied_positions() == {}
    far = lane_start(1) + 65_536
    store.apply([in_lane_row(1, 65_536, "u1")], [], far)
    assert store.applied_position() == 0 and store.applied_position(1) == far
    store.apply([observed(make_row(3))], [SkippedDocument("r9", 4, "empty", None, "t")], 4)
    assert store.applied_positions() == {0: 4, 1: far}
    # A late redelivery in one lane never moves it back, nor the other lane.
    store.apply([observed(make_row(2))], [], 2)
    store.apply([in_lane_row(1, 65_535, "u0")], [], far - 1)
    assert store.applied_positions() == {0: 4, 1: far}
    erased_at = far + 65_536
    assert store.erase("u", ["u1"], erased_at) == ["u1"]
    assert store.applied_positions() == {0: 4, 1: erased_at} and store.get("u1") is None


def test_a_sqlite_store_from_before_skip_tenants_gains_them(tmp_path):
    import sqlite3

    from services.adapters.row_store.sqlite import SqliteRowStore

    store = SqliteRowStore(tmp_path / "rows.sqlite")
    store.apply([observed(make_row(1, tenant="u"))], [], 1)
    store.close()
    conn = sqlite3.connect(tmp_path / "rows.sqlite")  # the table as it was, with one repeat and one empty skip
    conn.executescript("DROP TABLE skipped; CREATE TABLE skipped (row_id TEXT NOT NULL, position INTEGER NOT NULL, "
                       "reason TEXT NOT NULL, duplicate_of TEXT, PRIMARY KEY (row_id, position));"
                       "INSERT INTO skipped VALUES ('r5', 2, 'duplicate_text', 'r1'), ('r6', 3, 'empty', NULL);")
    conn.close()
    store = SqliteRowStore(tmp_path / "rows.sqlite")
    try:
        assert store.count("u")["skipped"] == 1 and store.count("t")["skipped"] == 0
        assert store.count()["skipped"] == 2  # the old empty skip names no tenant: only the total has it
    finally:
        store.close()


def test_versions_of_reads_threads_and_named_rows_in_one_call_with_state_at_known_at(store):
    rows = [make_row(i) for i in range(1, 5)] + [make_row(5, thread="other"), make_row(6, tenant="u"),
                                                 make_row(7, thread=None, acl=["finance"])]
    store.apply([observed(r) for r in rows], [], 7)
    superseded = rows[0].model_copy(update={"superseded_by": "r3"})
    store.apply([RowMutation(row=superseded, change=RowChange(position=10, at=T0 + timedelta(days=10),
                                                              change="superseded", state="active", superseded_by="r3"))], [], 10)
    store.apply([observed(rows[1].model_copy(update={"state": "archived"}), "archived", position=12)], [], 12)

    now = {f.row_id: f for f in store.versions_of("t", ["th"], ["r7", "r6"])}
    assert set(now) == {"r1", "r2", "r3", "r4", "r7"}  # r6 is another tenant's, r5 another thread
    assert (now["r1"].superseded_by, now["r2"].state, now["r7"].acl, now["r7"].thread) == ("r3", "archived", ("finance",), None)
    assert now["r3"].event_time == rows[2].event_time and now["r3"].ingest_position == 3
    between = {f.row_id: f for f in store.versions_of("t", ["th"], known_at=T0 + timedelta(days=11))}
    assert (between["r1"].superseded_by, between["r2"].state) == ("r3", "active")
    before = {f.row_id: f for f in store.versions_of("t", ["th"], known_at=T0 + timedelta(days=9))}
    assert (before["r1"].superseded_by, before["r1"].state) == (None, "active")
    assert store.versions_of("t", [], []) == []


def test_thread_limit_keeps_the_latest_rows_the_readers_may_read(store):
    day = timedelta(days=1)
    rows = [make_row(1, event_time=T0 + 10 * day), make_row(2, event_time=None), make_row(3, event_time=T0),
            make_row(4, event_time=T0 + 20 * day, acl=["finance"]), make_row(5, event_time=T0 + 5 * day),
            make_row(6, tenant="u")]
    store.apply([observed(r) for r in rows], [], 6)

    def ids(**kw):
        return [r.row_id for r in store.thread("t", "th", **kw)]

    assert ids() == ["r3", "r5", "r1", "r4", "r2"]
    assert ids(limit=2) == ["r4", "r2"]  # the end of the thread, still in date order
    # A row the readers may not read is never counted against the limit (nor shown).
    assert ids(readers=frozenset({"eng"}), limit=2) == ["r1", "r2"]
    assert ids(readers=frozenset({"eng"})) == ["r3", "r5", "r1", "r2"]
    assert ids(readers=frozenset({"finance"}), limit=10) == ["r3", "r5", "r1", "r4", "r2"]
    assert [r.row_id for r in store.thread("u", "th")] == ["r6"]


def test_a_row_state_from_an_earlier_position_never_replaces_a_later_one(store):
    from services.core.write_rules import author_scope, content_hash

    # A stalled indexer that wakes after another has moved the row on writes its older batch.
    r1 = make_row(1, text="Remote days: 3")
    archived = r1.model_copy(update={"state": "archived", "superseded_by": "r2"})
    store.apply([observed(r1)], [], 1)
    store.apply([observed(archived, "archived", position=5)], [], 5)
    store.apply([observed(r1)], [], 1)
    store.apply([observed(r1.model_copy(update={"acl": ["finance"]}), "restored", position=3)], [], 3)
    assert store.get("r1") == archived and store.applied_position() == 5  # neither state nor checkpoint went back
    assert store.find_active_text("t", author_scope("alice"), content_hash("Remote days: 3")) is None
    assert store.recent(Scope("t", readers=frozenset({"finance"})), [], 5) == []
    # A later state still replaces it, in the same batch as an earlier step too.
    restored = archived.model_copy(update={"state": "active", "superseded_by": None})
    store.apply([observed(archived, "archived", position=5), observed(restored, "restored", position=8)], [], 8)
    assert store.get("r1") == restored and store.applied_position() == 8


def test_a_sqlite_row_erased_since_is_not_written_back_by_an_older_batch(tmp_path):
    from services.adapters.row_store.sqlite import SqliteRowStore

    store = SqliteRowStore(tmp_path / "rows.sqlite")
    try:
        r1 = make_row(1)
        store.apply([observed(r1)], [], 1)
        assert store.erase("t", ["r1"], 4) == ["r1"]
        store.apply([observed(r1)], [], 1)  # the stalled writer's batch, from before the erasure
        assert store.get("r1") is None and store.history("r1") == [] and store.in_scope(Scope("t")) == []
        assert store.skipped("r1").reason == "erased" and store.applied_position() == 4
    finally:
        store.close()


def test_a_sqlite_store_from_before_state_positions_gains_them(tmp_path):
    import sqlite3

    from services.adapters.row_store.sqlite import SqliteRowStore

    store = SqliteRowStore(tmp_path / "rows.sqlite")
    r1, r2 = make_row(1), make_row(2)
    store.apply([observed(r1), observed(r2)], [], 2)
    store.apply([observed(r1.model_copy(update={"state": "archived"}), "archived", position=6)], [], 6)
    store.close()
    conn = sqlite3.connect(tmp_path / "rows.sqlite")  # the rows table as it was, without the column
    conn.executescript("ALTER TABLE rows DROP COLUMN state_position;")
    conn.close()
    store = SqliteRowStore(tmp_path / "rows.sqlite")
    try:
        store.apply([observed(r1, "restored", position=4)], [], 4)  # older than its archived step
        store.apply([observed(r2.model_copy(update={"state": "archived"}), "archived", position=7)], [], 7)
        assert store.get("r1").state == "archived" and store.get("r2").state == "archived"
        assert store.applied_position() == 7
    finally:
        store.close()

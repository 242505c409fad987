"""Versions of a thread in the caller's view (services.core.versions): counted and named only
from rows the view holds, so neither a count nor a pointer tells that a hidden version exists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.core.scope import Scope, reader_tokens_for
from services.core.versions import Version, VersionFields, describe, versions, wanted

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def vf(row_id, day, *, thread="budget", tenant="acme", acl=(), state="active", superseded_by=None,
       dated=True, ingested_day=None, position=None):
    return VersionFields(row_id, tenant, thread, T0 + timedelta(days=day) if dated else None,
                         T0 + timedelta(days=ingested_day if ingested_day is not None else day),
                         position if position is not None else day, tuple(acl), state, superseded_by)


ALICE = frozenset(reader_tokens_for("alice@corp.example", ["eng"]))
FINANCE = frozenset(reader_tokens_for("fay@corp.example", ["finance"]))


def test_a_thread_in_date_order_names_the_next_version_and_the_latest():
    rows = [vf("r3", 30), vf("r1", 10), vf("r2", 20)]
    got = versions(["r1", "r2", "r3"], rows, Scope(tenant="acme"))
    assert got["r1"] == Version(1, 3, "r3", "r2", T0 + timedelta(days=20), ())
    assert got["r2"] == Version(2, 3, "r3", "r3", T0 + timedelta(days=30), ())
    assert got["r3"] == Version(3, 3, "r3", None, None, ())


def test_a_version_hidden_by_its_access_list_in_the_middle_is_neither_counted_nor_named():
    rows = [vf("r1", 10), vf("secret", 20, acl=["finance"]), vf("r3", 30, acl=["eng"])]
    alice = versions(["r1", "r3"], rows, Scope(tenant="acme", readers=ALICE))
    assert alice["r1"] == Version(1, 2, "r3", "r3", T0 + timedelta(days=30), ())  # skips the hidden one
    assert alice["r3"].index == 2 and alice["r3"].count == 2
    assert "secret" not in alice  # asked for, but not in her view: no version at all
    finance = versions(["r1", "secret"], rows, Scope(tenant="acme", readers=FINANCE))
    assert finance["r1"].superseded_by == "secret" and finance["secret"] == Version(2, 2, "secret", None, None, ())


def test_a_hidden_latest_version_does_not_make_the_visible_one_look_superseded():
    rows = [vf("r1", 10), vf("r2", 20, acl=["user:fay@corp.example"])]
    # A principal called "finance" is not the group finance, and a group is not a user.
    sneaky = frozenset(reader_tokens_for("fay", ["fay@corp.example"]))
    for readers in (ALICE, sneaky, frozenset()):
        assert versions(["r1"], rows, Scope(tenant="acme", readers=readers))["r1"] == Version(1, 1, "r1", None, None, ())


def test_other_tenants_archived_rows_and_later_rows_do_not_count():
    rows = [vf("r1", 10), vf("other", 15, tenant="globex"), vf("gone", 20, state="archived"), vf("r3", 30)]
    got = versions(["r1"], rows, Scope(tenant="acme"))
    assert (got["r1"].count, got["r1"].superseded_by) == (2, "r3")
    as_of = versions(["r1"], rows, Scope(tenant="acme", as_of=T0 + timedelta(days=25)))
    assert as_of["r1"] == Version(1, 1, "r1", None, None, ())  # r3 is after as_of: not yet a version


def test_known_at_counts_rows_ingested_by_then_in_their_state_then():
    # r2 was dated early but ingested late (a backfill); r4 inactive at known_at.
    rows = [vf("r1", 10), vf("r2", 12, ingested_day=40), vf("r3", 20), vf("r4", 21)]
    scope = Scope(tenant="acme", known_at=T0 + timedelta(days=30), inactive_at_known=frozenset({"r4"}))
    got = versions(["r1", "r3"], rows, scope)
    assert (got["r1"].count, got["r1"].superseded_by, got["r3"].latest_row_id) == (2, "r3", "r3")


def test_undated_rows_sit_at_their_ingest_time_and_fail_as_of():
    rows = [vf("r1", 10), vf("note", 0, dated=False, ingested_day=15), vf("r3", 20)]
    got = versions(["r1", "note"], rows, Scope(tenant="acme"))
    assert got["r1"].superseded_by == "note" and got["r1"].superseded_on is None
    assert (got["note"].index, got["note"].superseded_by) == (2, "r3")
    assert "(undated)" in describe(got["r1"])
    dated_only = versions(["r1"], rows, Scope(tenant="acme", as_of=T0 + timedelta(days=100)))
    assert dated_only["r1"].count == 2 and dated_only["r1"].superseded_by == "r3"


def test_contradictions_follow_the_pointer_only_through_rows_the_view_holds():
    rows = [vf("old", 10, superseded_by="mid"), vf("mid", 20, thread="other", superseded_by="new"),
            vf("new", 30, thread="other"), vf("hidden", 25, thread="x", acl=["finance"], superseded_by="new"),
            vf("via", 11, superseded_by="hidden")]
    got = versions(["old", "via"], rows, Scope(tenant="acme", readers=ALICE))
    assert got["old"].contradicted_by == ("mid", "new")
    assert got["via"].contradicted_by == ()  # its pointer names a row she cannot read: not named, not passed
    assert got["old"].count == 2  # a contradicted row stays a version of its thread
    looped = versions(["a"], [vf("a", 1, superseded_by="b"), vf("b", 2, superseded_by="a")], Scope(tenant="acme"))
    assert looped["a"].contradicted_by == ("b",)


def test_the_query_narrowing_does_not_change_the_versions():
    rows = [vf("r1", 10), vf("r2", 20)]
    narrowed = Scope(tenant="acme", kinds=frozenset({"ticket"}), authors=frozenset({"x"}), threads=frozenset({"y"}))
    assert versions(["r1"], rows, narrowed)["r1"].count == 2


def test_threadless_rows_are_threads_of_one_and_what_to_read():
    lone = vf("lone", 5, thread=None, superseded_by="r2")
    got = versions(["lone"], [lone, vf("r2", 20), vf("r1", 1, thread="")], Scope(tenant="acme"))
    assert got["lone"] == Version(1, 1, "lone", None, None, ("r2",))
    assert describe(got["lone"]) == "version 1 of 1, contradicted by r2"
    assert describe(Version(1, 1, "x", None, None, ())) is None

    class R:
        def __init__(self, row_id, thread, superseded_by=None):
            self.row_id, self.thread, self.superseded_by = row_id, thread, superseded_by

    assert wanted([R("a", "t1", "z"), R("b", None), R("c", "t1"), R("d", "")]) == (["t1"], ["b", "d", "z"])


def test_describe_reads_as_one_line():
    assert describe(Version(2, 3, "r3", "r3", T0 + timedelta(days=245), ())) == \
        "version 2 of 3, superseded by r3 on 2025-09-03"
    assert describe(Version(3, 3, "r3", None, None, ("x",))) == "version 3 of 3 (latest), contradicted by x"


def test_the_evidence_gets_one_version_line_per_row_header_and_never_the_stored_pointer():
    from schemas.rows import Row
    from services.core.evidence import render_evidence

    def row(row_id, day, **kw):
        return Row(row_id=row_id, tenant="acme", text=f"text of {row_id}", author="cfo", kind="email", thread="budget",
                   event_time=T0 + timedelta(days=day), ingest_position=day, ingested_at=T0 + timedelta(days=day), **kw)

    old, new = row("r1", 10, superseded_by="hidden"), row("r3", 245)
    found = versions(["r1", "r3"], [vf("r1", 10, superseded_by="hidden"), vf("hidden", 100, acl=["finance"]),
                                    vf("r3", 245)], Scope(tenant="acme", readers=ALICE))
    text = render_evidence([old, new], show_supersession=True, versions=found)
    assert text.split("\n")[:3] == ["[1] 2025-01-11 · cfo · email · thread budget",
                                    "version 1 of 2, superseded by r3 on 2025-09-03", "text of r1"]
    assert "version 2 of 2 (latest)" in text and "hidden" not in text
    alone = render_evidence([row("solo", 3)], versions=versions(["solo"], [vf("solo", 3)], Scope(tenant="acme")))
    assert alone == "[1] 2025-01-04 · cfo · email · thread budget\ntext of solo"  # nothing to say: no line
    assert "superseded by hidden" in render_evidence([old], show_supersession=True)  # no versions: as before


def test_a_bound_without_a_zone_is_utc_not_a_crash():
    from datetime import datetime

    from services.core.scope import Scope

    naive = Scope(tenant="t", as_of=datetime(2025, 7, 15), known_at=datetime(2025, 8, 1, 12))
    assert naive.as_of == datetime(2025, 7, 15, tzinfo=UTC) and naive.known_at.tzinfo is UTC


def _reference(row_ids, fields, scope):
    """The rules read plainly: every row in the view, each thread sorted whole."""
    from services.core.versions import in_view, view_of

    view = view_of(scope)
    visible = {f.row_id: f for f in fields if in_view(f, view)}
    threads: dict[str, list] = {}
    for f in sorted((f for f in visible.values() if f.thread), key=lambda f: f.order):
        threads.setdefault(f.thread, []).append(f)
    out = {}
    for row_id in row_ids:
        if row_id not in visible:
            continue
        row = visible[row_id]
        thread = threads[row.thread] if row.thread else [row]
        i = thread.index(row)
        later = thread[i + 1] if i + 1 < len(thread) else None
        chain, pointer = [], row.superseded_by
        while pointer in visible and pointer != row_id and pointer not in chain:
            chain.append(pointer)
            pointer = visible[pointer].superseded_by
        out[row_id] = Version(i + 1, len(thread), thread[-1].row_id, later.row_id if later else None,
                              later.event_time if later else None, tuple(chain))
    return out


def test_the_fast_path_gives_what_the_rules_read_plainly_give_on_random_threads():
    """versions() inlines the view's test and sorts thread by thread (it runs over thousands of
    fields per query); on random stores and views it must agree with the plain reading."""
    import random

    rnd = random.Random(41)
    for _ in range(300):
        n = rnd.randint(1, 40)
        ids = [f"r{i}" for i in range(n)]
        fields = [vf(rid, rnd.randint(0, 9), thread=rnd.choice(["a", "b", "c", None]), tenant=rnd.choice(["acme", "acme", "other"]),
                     acl=rnd.choice([(), ("eng",), ("finance",), ("user:alice@corp.example",)]),
                     state=rnd.choice(["active", "active", "active", "archived"]),
                     superseded_by=rnd.choice([None, None, rnd.choice(ids)]), dated=rnd.random() > 0.1,
                     ingested_day=rnd.randint(0, 9), position=rnd.randint(0, 5))
                  for rid in ids]
        scope = Scope(tenant="acme", readers=rnd.choice([None, ALICE, FINANCE]),
                      as_of=rnd.choice([None, T0 + timedelta(days=5)]),
                      known_at=rnd.choice([None, None, T0 + timedelta(days=6)]),
                      inactive_at_known=frozenset(rnd.sample(ids, k=min(2, n))) if rnd.random() < 0.2 else frozenset())
        asked = rnd.sample(ids, k=rnd.randint(1, n))
        assert versions(asked, fields, scope) == _reference(asked, fields, scope)

"""The write path's decisions (services.core.write_path) over an in-memory row store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas.documents import DocumentIn
from schemas.events import (
    DocumentObserved,
    LoggedEvent,
    MaintenanceRunStarted,
    RowArchived,
    RowDerived,
    RowRestored,
    RowSuperseded,
)
from schemas.rows import Row
from services.core.write_path import RowMutation, SkippedDocument, WritePlan, plan_batch
from services.core.write_rules import author_scope, content_hash, row_id_for

T0 = datetime(2025, 1, 1, tzinfo=UTC)
TENANT = "acme"


class FakeRows:
    """The lookups a row store answers, over dicts; `commit` stores a plan as the store would."""

    def __init__(self):
        self.rows: dict[str, Row] = {}
        self.skipped: list[SkippedDocument] = []

    def get(self, row_id: str) -> Row | None:
        return self.rows.get(row_id)

    def find_source(self, tenant: str, source: str, source_id: str) -> str | None:
        return next((r.row_id for r in self.rows.values()
                     if r.tenant == tenant and (r.source or "") == source and r.source_id == source_id), None)

    def find_active_text(self, tenant: str, author_scope_: str, content_hash_: str) -> str | None:
        return next((r.row_id for r in self.rows.values() if r.tenant == tenant and r.state == "active"
                     and author_scope(r.author) == author_scope_ and content_hash(r.text) == content_hash_), None)

    def commit(self, plan: WritePlan) -> None:
        for mutation in plan.mutations:
            self.rows[mutation.row.row_id] = mutation.row
        self.skipped.extend(plan.skipped)


def logged(events) -> list[LoggedEvent]:
    return [LoggedEvent(position=i, appended_at=T0 + timedelta(minutes=i), event=e) for i, e in enumerate(events, start=1)]


def observed(text: str, author: str = "ann", tenant: str = TENANT, **fields) -> DocumentObserved:
    doc = DocumentIn(text=text, author=author, **fields)
    return DocumentObserved(tenant=tenant, row_id=row_id_for(tenant, doc), document=doc)


def planned(events, rows: FakeRows | None = None) -> WritePlan:
    return plan_batch(logged(events), rows or FakeRows())


def test_a_document_becomes_an_active_row_with_its_fields():
    event = observed("Launch moved to May", thread="t1", title="Launch", tags=["plan"], source="mail", source_id="m1")
    plan = planned([event])
    [row] = plan.new_rows
    assert row.row_id == event.row_id and row.state == "active" and row.thread == "t1" and row.title == "Launch"
    assert (row.ingest_position, row.ingested_at, row.source_id, row.tags) == (1, T0 + timedelta(minutes=1), "m1", ["plan"])
    assert [m.change.change for m in plan.mutations] == ["observed"]
    assert plan.skipped == [] and plan.changed_rows == []


def test_an_empty_document_is_skipped():
    event = observed(" \n\t")
    plan = planned([event])
    assert plan.skipped == [SkippedDocument(event.row_id, 1, "empty")]
    assert plan.mutations == [] and plan.new_rows == []


def test_an_exact_repeat_in_the_same_author_scope_is_skipped():
    rows = FakeRows()
    first = observed("Budget approved", author="Ann", source="mail", source_id="m1")
    rows.commit(planned([first], rows))
    again = observed("  Budget approved\n", author=" ann ", source="mail", source_id="m2")
    plan = plan_batch(logged([again]), rows)
    assert plan.skipped == [SkippedDocument(again.row_id, 1, "duplicate_text", first.row_id)]
    # Without a source the repeat has the same row id: it repeats itself.
    plain, fresh = observed("Budget approved", author="ann"), FakeRows()
    fresh.commit(plan_batch(logged([plain]), fresh))
    assert plan_batch(logged([plain]), fresh).skipped == [SkippedDocument(plain.row_id, 1, "duplicate_text", plain.row_id)]


def test_the_same_text_by_another_author_is_a_new_row():
    rows = FakeRows()
    rows.commit(planned([observed("Budget approved", author="ann")], rows))
    plan = plan_batch(logged([observed("Budget approved", author="bob")]), rows)
    assert len(plan.new_rows) == 1 and plan.skipped == []
    other_tenant = plan_batch(logged([observed("Budget approved", author="ann", tenant="other")]), rows)
    assert len(other_tenant.new_rows) == 1


def test_a_repeated_source_is_skipped_whatever_its_text():
    rows = FakeRows()
    first = observed("v1", source="jira", source_id="OPS-1")
    rows.commit(planned([first], rows))
    edited = observed("v2, edited", source="jira", source_id="OPS-1")
    assert edited.row_id == first.row_id
    assert plan_batch(logged([edited]), rows).skipped == [SkippedDocument(first.row_id, 1, "duplicate_source", first.row_id)]
    # An event naming another row id for a known source is found by the source lookup.
    renamed = DocumentObserved(tenant=TENANT, row_id="rX", document=edited.document)
    assert plan_batch(logged([renamed]), rows).skipped == [SkippedDocument("rX", 1, "duplicate_source", first.row_id)]


def test_repeats_within_one_batch_see_the_batch_s_earlier_rows():
    first = observed("Ship it", source="mail", source_id="m1")
    text_repeat = observed("Ship it", source="mail", source_id="m2")
    source_repeat = DocumentObserved(tenant=TENANT, row_id="rY", document=DocumentIn(text="other", source="mail", source_id="m1"))
    plan = planned([first, text_repeat, source_repeat])
    assert [r.row_id for r in plan.new_rows] == [first.row_id]
    assert plan.skipped == [SkippedDocument(text_repeat.row_id, 2, "duplicate_text", first.row_id),
                            SkippedDocument("rY", 3, "duplicate_source", first.row_id)]


def test_state_steps_rewrite_a_known_row():
    rows = FakeRows()
    a, b = observed("old policy"), observed("new policy")
    rows.commit(planned([a, b], rows))
    plan = plan_batch(logged([
        RowSuperseded(tenant=TENANT, row_id=a.row_id, superseded_by=b.row_id, run_id="run1", reason="newer"),
        RowArchived(tenant=TENANT, row_id=a.row_id, run_id="run1"),
        RowRestored(tenant=TENANT, row_id=a.row_id, reason="undo"),
    ]), rows)
    steps = [(m.change.change, m.change.state, m.change.superseded_by, m.change.run_id) for m in plan.mutations]
    assert steps == [("superseded", "active", b.row_id, "run1"), ("archived", "archived", b.row_id, "run1"),
                     ("restored", "active", None, None)]
    assert plan.new_rows == [] and [r.row_id for r in plan.changed_rows] == [a.row_id]
    assert plan.touched[a.row_id].state == "active" and plan.touched[a.row_id].superseded_by is None


def test_a_step_naming_an_unknown_row_or_another_tenant_s_is_set_aside():
    rows = FakeRows()
    a = observed("x")
    rows.commit(planned([a], rows))
    plan = plan_batch(logged([RowArchived(tenant=TENANT, row_id="nope"), RowArchived(tenant="other", row_id=a.row_id)]), rows)
    assert plan.mutations == [] and [e.position for e in plan.unknown] == [1, 2]


def test_a_derived_row_is_written_once_with_its_sources():
    doc = DocumentIn(text="Summary of a and b", author="orgmem")
    derive = RowDerived(tenant=TENANT, row_id="d1", document=doc, sources=["ra", "rb"], run_id="run2", reason="merge")
    plan = planned([derive, derive])
    assert [m.row.row_id for m in plan.mutations] == ["d1"] and plan.skipped == []
    assert plan.new_rows[0].derived_from == ["ra", "rb"]
    assert (plan.mutations[0].change.change, plan.mutations[0].change.run_id) == ("derived", "run2")


def test_a_repeat_of_an_archived_row_is_a_new_row_in_the_same_batch_or_the_next():
    rows = FakeRows()
    first = observed("Quarterly numbers", source="mail", source_id="m1")
    rows.commit(planned([first], rows))
    archive = RowArchived(tenant=TENANT, row_id=first.row_id)
    repeat = observed("Quarterly numbers", source="mail", source_id="m2")
    together = plan_batch(logged([archive, repeat]), rows)
    assert [r.row_id for r in together.new_rows] == [repeat.row_id] and together.skipped == []
    rows.commit(plan_batch(logged([archive]), rows))
    assert [r.row_id for r in plan_batch(logged([repeat]), rows).new_rows] == [repeat.row_id]


def _project(events, batch: int) -> tuple[dict[str, Row], list[SkippedDocument], list[RowMutation]]:
    rows, mutations = FakeRows(), []
    log = logged(events)
    for start in range(0, len(log), batch):
        plan = plan_batch(log[start:start + batch], rows)
        mutations += plan.mutations
        rows.commit(plan)
    return rows.rows, rows.skipped, mutations


def test_a_replay_decides_the_same_whatever_the_batches():
    a, b = observed("alpha", source="s", source_id="1"), observed("beta")
    events = [
        a, b, observed("alpha", source="s", source_id="2"), observed(""), observed("beta", author="cy"),
        MaintenanceRunStarted(tenant=TENANT, run_id="run1", job="refine"),
        RowSuperseded(tenant=TENANT, row_id=a.row_id, superseded_by=b.row_id),
        RowArchived(tenant=TENANT, row_id=a.row_id), observed("alpha", source="s", source_id="3"),
        RowRestored(tenant=TENANT, row_id=a.row_id), observed("alpha", source="s", source_id="4"),
        RowDerived(tenant=TENANT, row_id="d1", document=DocumentIn(text="beta"), sources=[b.row_id]),
        observed("beta", source="s", source_id="5", author=""), a,
    ]
    once = _project(events, len(events))
    assert _project(events, len(events)) == once
    for batch in (1, 2, 3, 5):
        assert _project(events, batch)[:2] == once[:2], batch
    rows, skipped, _ = once
    assert [(s.position, s.reason) for s in skipped] == [(3, "duplicate_text"), (4, "empty"), (11, "duplicate_text"),
                                                        (13, "duplicate_text"), (14, "duplicate_source")]
    assert rows[a.row_id].state == "active" and len(rows) == 5

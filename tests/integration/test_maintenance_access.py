"""Maintenance never takes a fact from its readers nor moves text across access lists, on a real
embedded memory (SQLite log and rows, tantivy, Qdrant Edge, the real encoder).

The attack (hardening issue, finding 4): a public row and a finance-only row say nearly the same
thing. Before the fix, consolidation superseded the public budget by the finance-only one (public
readers learnt a newer figure exists), merged the public release note into a finance-only derived
row (public readers lost it), and a judge's reason quoting the finance row was written into the
public rows' history. The judge here is the rule judge with a model's habit: it quotes the rows it
was shown in its reasons.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from schemas.documents import DocumentIn
from schemas.rows import Row
from services.adapters.judge import RuleJudge
from services.app.maintenance import MaintenanceService
from services.core.caller import Caller
from services.core.maintenance import Budget, GroupLabel, PairDecision
from services.core.scope import Scope
from services.errors import NotFound

MARKER = "bluefin"  # a word only the finance-only rows contain

BUDGET_PUBLIC = "The Q3 marketing budget is 40,000 EUR, approved by Dana Whitfield in the planning review."
BUDGET_FINANCE = "The Q3 marketing budget is 55,000 EUR, approved by Dana Whitfield in the Bluefin planning review."
RELEASE_PUBLIC = "Release 2.4 ships to the staging cluster first; Priya Raman owns the rollout checklist."
RELEASE_PUBLIC_AGAIN = "Release 2.4 ships to the staging cluster first, Priya Raman owns the rollout checklist!"
RELEASE_FINANCE = "Release 2.4 ships to the Bluefin staging cluster first, Priya Raman owns the rollout checklist!"
FILLER = [
    "The cafeteria switches to the winter menu next week, with soup on Tuesdays.",
    "Minutes: the hiring committee agreed to interview three candidates for the data role.",
]

PUBLIC_READER = Caller(tenant="acme", readers=frozenset({"alice"}), name="alice", role="reader")


def day(month: int, d: int) -> datetime:
    return datetime(2024, month, d, 9, tzinfo=UTC)


class QuotingJudge(RuleJudge):
    """The rule judge's decisions, with reasons that quote every row it was shown (as a model's may)."""

    @staticmethod
    def _quote(rows: Sequence[Row]) -> str:
        return " | ".join(f"{r.row_id} said {r.text!r}" for r in rows)

    def label_group(self, rows: Sequence[Row]) -> GroupLabel:
        label = super().label_group(rows)
        return GroupLabel(label.label, f"{label.reason}; {self._quote(rows)}")

    def judge_pair(self, a: Row, b: Row, similarity: float) -> PairDecision:
        d = super().judge_pair(a, b, similarity)
        return PairDecision(d.action, d.keep, d.archive, d.merged_text, f"{d.reason}; {self._quote([a, b])}")


def ingest(memory, docs: list[DocumentIn], tenant: str = "acme") -> list[str]:
    ids = memory.ingest(docs, Caller(tenant=tenant)).row_ids
    memory.catch_up()
    return ids


def retrieved(memory, q: str, caller: Caller, k: int = 10) -> list[Row]:
    scope = memory.scope_for(caller)
    return [s.row for s in memory.query(q, scope, memory.config_for(k=k)).selected]


def readable(memory, row_ids, caller: Caller) -> dict[str, tuple[Row, list]]:
    """Every row of `row_ids` the caller may open (any state), with its history."""
    out = {}
    for rid in row_ids:
        try:
            out[rid] = memory.row(rid, caller)
        except NotFound:
            continue
    return out


def assert_nothing_crossed(memory, service: MaintenanceService, row_ids: list[str], runs) -> set[str]:
    """What a public reader can open names no row it cannot open and quotes no finance-only text."""
    derived = {e.row_id for run in runs for e in service.ledger.run_events(run) if e.type == "row_derived"}
    everything = [*row_ids, *sorted(derived)]
    visible = readable(memory, everything, PUBLIC_READER)
    for rid, (row, history) in visible.items():
        assert MARKER not in row.text.lower(), f"{rid}: restricted text in a public row"
        if row.superseded_by is not None:
            assert row.superseded_by in visible, f"{rid}: superseded by {row.superseded_by}, a row alice cannot read"
        for change in history:
            assert MARKER not in change.reason.lower(), f"{rid}: restricted text in its history: {change.reason}"
            assert change.superseded_by is None or change.superseded_by in visible
    return set(visible)


def test_consolidate_then_refine_keeps_public_facts_public_and_restricted_text_restricted(memory):
    docs = [
        DocumentIn(text=BUDGET_PUBLIC, author="dana", date=day(3, 1), kind="email", thread="q3-budget"),
        DocumentIn(text=BUDGET_FINANCE, author="dana", date=day(5, 10), kind="email", thread="q3-budget",
                   acl=["finance"]),
        DocumentIn(text=RELEASE_PUBLIC, author="priya", date=day(4, 2), kind="ticket"),
        DocumentIn(text=RELEASE_FINANCE, author="cfo", date=day(4, 3), kind="chat", acl=["Finance"]),
        DocumentIn(text=RELEASE_PUBLIC_AGAIN, author="lee", date=day(4, 9), kind="chat"),
        *[DocumentIn(text=t, author="ops", date=day(2, i + 1)) for i, t in enumerate(FILLER)],
    ]
    ids = ingest(memory, docs)
    budget_public, budget_finance, release_public, release_finance, release_again = ids[:5]
    # The attack needs the public and finance rows to look alike to the index.
    service = MaintenanceService(memory, QuotingJudge())
    neighbours = service.neighbours_fn("acme", 10)
    assert dict(neighbours(budget_public))[budget_finance] >= 0.85
    assert dict(neighbours(release_public))[release_finance] >= 0.85

    consolidated = service.consolidate("acme", 0.85)
    refined = service.refine("acme", Budget(max_bytes=0))
    assert consolidated.status == refined.status == "finished"
    # The two public release notes are one public row now; nothing crossed the finance list.
    assert consolidated.summary["labels"] == {"restatement": 1}, consolidated.summary
    assert consolidated.summary["pairs_skipped_access"] >= 2, consolidated.summary  # budget and release
    assert refined.summary["pairs_skipped_access"] >= 1, refined.summary

    visible = assert_nothing_crossed(memory, service, ids, [consolidated, refined])

    # The public budget is still current for a public reader, and still found.
    row, _ = memory.row(budget_public, PUBLIC_READER)
    assert (row.state, row.superseded_by) == ("active", None)
    assert budget_public in [r.row_id for r in retrieved(memory, "Q3 marketing budget approved by Dana", PUBLIC_READER)]
    # The release fact is still found by a public reader, in a row it can read (a public merge).
    hits = retrieved(memory, "Release 2.4 staging rollout checklist Priya", PUBLIC_READER)
    release_hits = [r for r in hits if "Release 2.4" in r.text]
    assert release_hits and all(r.row_id in visible and not r.acl for r in release_hits)
    # The finance rows are untouched by anything public, and finance still reads them.
    finance = Caller(tenant="acme", readers=frozenset({"bob", "finance"}), name="bob", role="reader")
    for rid in (budget_finance, release_finance):
        assert rid not in visible
        row, history = memory.row(rid, finance)
        assert row.acl in (["finance"], ["Finance"])
        assert all(c.superseded_by in (None, budget_finance, release_finance) for c in history)
    # Every derived row carries exactly its sources' list.
    for rid in {e.row_id for run in (consolidated, refined) for e in service.ledger.run_events(run)
                if e.type == "row_derived"}:
        derived = memory.stored_row(rid)
        source_lists = {tuple(sorted(a.lower() for a in memory.stored_row(s).acl)) for s in derived.derived_from}
        assert source_lists == {tuple(sorted(a.lower() for a in derived.acl))}
    assert release_public in visible and release_again in visible


def test_refine_alone_never_merges_a_public_row_into_a_restricted_one(memory):
    # Same day, same figures: not versions, so the rule judge would merge them.
    finance_text = BUDGET_PUBLIC.replace("the planning review", "the Bluefin planning review")
    ids = ingest(memory, [
        DocumentIn(text=BUDGET_PUBLIC, author="dana", date=day(3, 1)),
        DocumentIn(text=finance_text, author="cfo", date=day(3, 1), acl=["finance"]),
    ], tenant="acme")
    service = MaintenanceService(memory, QuotingJudge(similarity_delete=1.0, similarity_merge=0.5))
    run = service.refine("acme", Budget(max_bytes=0))
    assert run.status == "finished"
    assert run.summary["pairs_judged"] == 0 and run.summary["pairs_skipped_access"] == 1, run.summary
    assert run.events == 0
    assert_nothing_crossed(memory, service, ids, [run])
    assert {r.row_id for r in memory.rows_in_scope(Scope(tenant="acme"))} == set(ids)
    assert ids[0] in [r.row_id for r in retrieved(memory, "Q3 marketing budget", PUBLIC_READER)]

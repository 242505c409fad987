"""Maintenance runs on a real embedded memory (SQLite log and rows, tantivy, Qdrant Edge, the real
encoder), with the rule judge and with an OpenAI-compatible judge behind a local scripted server."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import SecretStr

from schemas.documents import DocumentIn
from schemas.events import RowArchived, RowDerived, RowRestored, RowSuperseded
from services.adapters.judge import OpenAICompatJudge, RuleJudge
from services.app.maintenance import MaintenanceService, active_set
from services.app.task_runner import run_job
from services.bootstrap import maintenance_for
from services.core.caller import Caller
from services.core.maintenance import Budget, row_size_bytes
from services.core.scope import Scope
from services.errors import RunConflict
from tests.integration.fake_chat_server import FakeChatServer, Reply


def day(month: int, d: int) -> datetime:
    return datetime(2024, month, d, 9, tzinfo=UTC)


BUDGET_OLD = "The Q3 marketing budget is 40,000 EUR, approved by Dana Whitfield in the planning review."
BUDGET_NEW = "The Q3 marketing budget is 55,000 EUR, approved by Dana Whitfield in the planning review."
RELEASE_A = "Release 2.4 ships to the staging cluster first; Priya Raman owns the rollout checklist."
RELEASE_B = "Release 2.4 ships to the staging cluster first, Priya Raman owns the rollout checklist!"
FILLER = [
    "The cafeteria switches to the winter menu next week, with soup on Tuesdays.",
    "Ticket OPS-118: the VPN certificate for the Berlin office expires on 12 June.",
    "Minutes: the hiring committee agreed to interview three candidates for the data role.",
    "Reminder that the parking garage is closed on Saturday for resurfacing.",
]


def corpus() -> list[DocumentIn]:
    return [
        DocumentIn(text=BUDGET_OLD, author="dana", date=day(3, 1), kind="email", thread="q3-budget"),
        DocumentIn(text=RELEASE_A, author="priya", date=day(4, 2), kind="ticket", tags=["release"]),
        *[DocumentIn(text=t, author="ops", date=day(2, i + 1)) for i, t in enumerate(FILLER)],
        DocumentIn(text=RELEASE_B, author="lee", date=day(4, 9), kind="chat", tags=["rollout"]),
        DocumentIn(text=BUDGET_NEW, author="dana", date=day(5, 10), kind="email", thread="q3-budget"),
        # The same facts again, protected: maintenance must leave them out.
        DocumentIn(text=BUDGET_OLD, author="finance-bot", date=day(3, 2), tags=["label:pinned"]),
        DocumentIn(text=RELEASE_A, author="sec", date=day(4, 3), tags=["sensitivity=Confidential"]),
    ]


def ingest(memory, docs, tenant: str = "acme") -> list[str]:
    result = memory.ingest(docs, Caller(tenant=tenant))
    memory.catch_up()
    return result.row_ids


def texts(memory, row_ids) -> dict[str, str]:
    return {rid: memory.row(rid, Caller(tenant=memory.stored_row(rid).tenant))[0].text for rid in row_ids}


def retrieved(memory, tenant: str, q: str, k: int = 10) -> list[str]:
    config = memory.config_for(k=k)
    return [s.row.row_id for s in memory.query(q, Scope(tenant=tenant), config).selected]


def test_consolidation_then_revert_on_a_real_memory(memory):
    acme = ingest(memory, corpus())
    globex = ingest(memory, corpus(), tenant="globex")  # identical content in another tenant
    old, rel_a, rel_b, new, pinned, confidential = acme[0], acme[1], acme[6], acme[7], acme[8], acme[9]
    before_acme, before_globex = active_set(memory, "acme"), active_set(memory, "globex")
    originals = texts(memory, acme + globex)

    service = MaintenanceService(memory, RuleJudge())
    seen: list[dict] = []
    run = service.consolidate("acme", 0.85, requested_by="alice", progress=seen.append)

    assert run.status == "finished" and run.judge == "rule" and run.requested_by == "alice"
    assert run.params["tau"] == 0.85 and run.params["judge_model"] is None
    assert run.summary["labels"] == {"conflict": 1, "restatement": 1}, run.summary
    assert seen and seen[-1]["phase"] == "judging" and seen[-1]["done"] == seen[-1]["total"]

    # Conflict: the older version is superseded by the later one and stays active and retrievable.
    row_old, history = memory.row(old, Caller(tenant="acme"))
    assert (row_old.state, row_old.superseded_by) == ("active", new)
    assert history[-1].change == "superseded" and history[-1].run_id == run.run_id
    assert "[rule]" in history[-1].reason
    assert old in retrieved(memory, "acme", "Q3 marketing budget approved by Dana")

    # Restatement: one derived row (earliest date, every author, links to sources); originals archived.
    derived = [r for r in memory.rows_in_scope(Scope(tenant="acme")) if r.derived_from]
    assert len(derived) == 1
    merged = derived[0]
    assert sorted(merged.derived_from) == sorted([rel_a, rel_b])
    assert merged.event_time == day(4, 2)
    assert "priya" in merged.author and "lee" in merged.author
    assert {"author:priya", "author:lee", "release", "rollout"} <= set(merged.tags)
    for rid in (rel_a, rel_b):
        row, history = memory.row(rid, Caller(tenant="acme"))
        assert row.state == "archived" and history[-1].run_id == run.run_id and merged.row_id in history[-1].reason
    hits = retrieved(memory, "acme", "Release 2.4 staging rollout checklist")
    assert merged.row_id in hits and rel_a not in hits and rel_b not in hits

    # Pinned and confidential rows, and the other tenant, are untouched.
    for rid in (pinned, confidential):
        assert [h.change for h in memory.row_history(rid)] == ["observed"]
    assert active_set(memory, "globex") == before_globex
    assert all(len(memory.row_history(rid)) == 1 for rid in globex)

    # Every decision event carries the run id and the judge.
    events = list(service.ledger.run_events(run))
    assert len(events) == run.events == 4  # 1 superseded, 1 derived, 2 archived
    assert {type(e) for e in events} == {RowSuperseded, RowDerived, RowArchived}
    assert all(e.run_id == run.run_id and "[rule]" in e.reason for e in events)

    # Revert: the active set is the one before the run; nothing was ever lost.
    undo = service.revert(run.run_id, requested_by="alice")
    assert undo.status == "finished" and undo.job == "revert" and undo.params == {"reverts": run.run_id}
    assert active_set(memory, "acme") == before_acme
    assert all(isinstance(e, (RowRestored, RowArchived)) for e in service.ledger.run_events(undo))
    assert service.run(run.run_id).status == "reverted" and service.run(run.run_id).reverted_by == undo.run_id
    assert texts(memory, acme + globex) == originals
    assert memory.row(merged.row_id, Caller(tenant="acme"))[0].state == "archived"  # still readable
    with pytest.raises(RunConflict, match="reverted already"):
        service.revert(run.run_id)
    with pytest.raises(RunConflict, match="itself a revert"):
        service.revert(undo.run_id)


def near_duplicates() -> list[DocumentIn]:
    base = [
        "Sam moved the weekly sync with the Lisbon design team to Thursdays at 10:00.",
        "Ana booked the offsite venue in Porto for the engineering summit in October.",
        "The customer portal login page now supports passkeys for enterprise accounts.",
        "Budget owners must submit headcount plans to finance by the end of the month.",
    ]
    docs = []
    for i, text in enumerate(base):
        docs.append(DocumentIn(text=text, author="a", date=day(6, 1 + i)))
        docs.append(DocumentIn(text=text.replace(".", " as discussed."), author="b", date=day(6, 1 + i)))
        docs.append(DocumentIn(text=f"Note: {text}", author="c", date=day(6, 1 + i)))
    docs += [DocumentIn(text=t, author="ops", date=day(6, 20)) for t in FILLER]
    return docs


def test_refine_meets_a_budget_then_revert_restores_the_active_set(memory):
    ids = ingest(memory, near_duplicates(), tenant="r1")
    before = active_set(memory, "r1")
    start = sum(row_size_bytes(r) for r in memory.rows_in_scope(Scope(tenant="r1")))
    service = MaintenanceService(memory, RuleJudge(similarity_delete=0.9, similarity_merge=0.85))

    run = service.refine("r1", Budget(fraction=0.8))
    s = run.summary
    realised = sum(row_size_bytes(r) for r in memory.rows_in_scope(Scope(tenant="r1")))
    assert run.status == "finished" and s["start_bytes"] == start
    assert s["realised_bytes"] == realised  # the planner's accounting matches the projected store
    assert s["stop_reason"] == "budget_reached" and realised <= s["target_bytes"] == int(start * 0.8)
    assert s["decisions"].get("delete", 0) + s["decisions"].get("merge", 0) >= 1
    assert run.events >= 1

    undo = service.revert(run.run_id)
    assert undo.status == "finished" and undo.summary["reverts"] == run.run_id
    assert active_set(memory, "r1") == before
    assert all(memory.row(rid, Caller(tenant="r1"))[0].text for rid in ids)


def test_preserve_cache_carries_to_the_next_run_of_the_same_judge(memory):
    ingest(memory, [DocumentIn(text=t, author="ops", date=day(6, 20)) for t in FILLER], tenant="c1")
    service = MaintenanceService(memory, RuleJudge())
    first = service.refine("c1", Budget(fraction=0.5))
    assert first.summary["stop_reason"] == "no_candidates"
    judged = first.summary["pairs_judged"]
    assert judged >= 3 and first.summary["decisions"] == {"preserve": judged}
    second = service.refine("c1", Budget(fraction=0.5))
    assert second.params["preserve_cache_from"] == first.run_id
    assert second.summary["pairs_judged"] == 0 and second.summary["stop_reason"] == "no_candidates"
    third = service.refine("c1", Budget(fraction=0.5), use_cache=False)
    assert third.summary["pairs_judged"] == judged


def test_later_runs_must_be_reverted_first(memory):
    ids = ingest(memory, corpus(), tenant="r2")
    before = active_set(memory, "r2")
    service = MaintenanceService(memory, RuleJudge())
    first = service.consolidate("r2")  # merges the release restatement into a derived row
    derived = next(r for r in memory.rows_in_scope(Scope(tenant="r2")) if r.derived_from)
    # Someone restates the merged row once more; the next run merges it with the derived row.
    again = ingest(memory, [DocumentIn(text=derived.text, author="zed", date=day(4, 20))], tenant="r2")[0]
    middle = active_set(memory, "r2")
    second = service.consolidate("r2")
    assert memory.stored_row(derived.row_id).state == "archived"
    assert any(e.row_id == derived.row_id for e in service.ledger.run_events(second))
    with pytest.raises(RunConflict, match=f"{second.run_id}.*revert those first"):
        service.revert(first.run_id)
    service.revert(second.run_id)
    assert active_set(memory, "r2") == middle
    service.revert(first.run_id)  # allowed now: the later run is reverted
    assert active_set(memory, "r2") == {**before, again: None}
    assert all(memory.row(rid, Caller(tenant="r2"))[0].text for rid in ids)


@pytest.fixture
def chat():
    server = FakeChatServer().start()
    yield server
    server.stop()


def test_consolidation_against_an_openai_compatible_server(memory, chat):
    acme = ingest(memory, corpus())
    judge = OpenAICompatJudge(chat.base_url, "fake-model", SecretStr("sk-x"), timeout_s=0.5, max_retries=0)
    # Groups are judged in ingest order: the budget versions first, then the release restatement.
    chat.add(Reply(content="they look like a conflict to me"),  # malformed: the group stays
             Reply.json({"label": "restatement", "reason": "same plan"}),
             Reply.json({"text": "Release 2.4 goes to staging first; Priya Raman owns the rollout checklist."}))
    with judge:
        run = MaintenanceService(memory, judge).consolidate("acme", 0.85)
    assert run.status == "finished" and run.judge == "openai:fake-model"
    assert run.params["judge_model"] == "fake-model" and run.params["judge_base_url"] == chat.base_url
    assert run.summary["labels"] == {"failed": 1, "restatement": 1}
    assert memory.stored_row(acme[0]).superseded_by is None and len(memory.row_history(acme[0])) == 1
    assert memory.stored_row(acme[1]).state == memory.stored_row(acme[6]).state == "archived"
    assert "BUDGET" not in str(chat.requests[1].body) and "Release 2.4" in str(chat.requests[1].body)
    # Protected rows never reach the model.
    assert not any("finance-bot" in str(r.body) or "sec ·" in str(r.body) for r in chat.requests)


def test_refine_against_an_openai_compatible_server_survives_timeouts(memory, chat):
    pair_x = ["Kim signed the supplier contract with Nordlys on 3 May.", "Kim signed the supplier contract with Nordlys on 3 May!"]
    pair_y = ["The onboarding guide now covers laptop setup for new hires.", "The onboarding guide now covers laptop set-up for new hires."]
    ids = ingest(memory, [DocumentIn(text=t, author=a, date=day(5, 3)) for t, a in
                          zip(pair_x + pair_y, ["kim", "ops", "hr", "it"], strict=True)], tenant="t")
    before = active_set(memory, "t")
    judge = OpenAICompatJudge(chat.base_url, "fake-model", timeout_s=0.3, max_retries=0)
    chat.add(Reply.json({"action": "delete", "drop": "a", "merge_instruction": "", "reason": "x"}, delay_s=1.0),
             Reply.json({"action": "delete", "drop": "a", "merge_instruction": "", "reason": "same facts"}))
    with judge:
        run = MaintenanceService(memory, judge).refine("t", Budget(max_bytes=0))
    decisions = run.summary["decisions"]
    assert run.status == "finished" and decisions["delete"] == 1 and decisions["failed"] >= 1
    assert run.summary["stop_reason"] == "no_candidates"  # every other pair failed (unscripted: HTTP 418)
    first, second = (str(chat.requests[i].body) for i in (0, 1))
    timed_out = [ids[0], ids[1]] if "Nordlys" in first else [ids[2], ids[3]]
    deleted = [ids[0], ids[1]] if "Nordlys" in second else [ids[2], ids[3]]
    assert timed_out != deleted
    assert all(memory.stored_row(rid).state == "active" for rid in timed_out)  # the timed-out pair is untouched
    assert [memory.stored_row(rid).state for rid in deleted] == ["archived", "active"]  # drop "a": the earlier row
    MaintenanceService(memory).revert(run.run_id)
    assert active_set(memory, "t") == before


def test_jobs_run_by_name_with_the_settings_judge(settings, memory):
    service = maintenance_for(settings, memory)
    ingest(memory, near_duplicates(), tenant="j")
    done = run_job(service, "refine", "j", {"budget_fraction": 0.9}, "system").view()
    assert done["status"] == "finished" and done["judge"] == "rule"
    assert isinstance(done["summary"]["preserved"], int)  # the view counts the cache
    listed = [r.view() for r in service.runs("j")]
    assert [r["run_id"] for r in listed] == [done["run_id"]]
    reverted = run_job(service, "revert", "j", {"reverts": done["run_id"]}, "system").view()
    assert reverted["status"] == "finished" and service.runs("j")[0].status == "reverted"


def test_cli_consolidate_runs_and_revert(tmp_path, capsys):
    import json

    from services.bootstrap import build_memory
    from services.cli.main import main
    from services.settings import Settings

    data = tmp_path / "cli-data"
    memory, lock = build_memory(Settings(data_dir=data))
    try:
        ids = ingest(memory, corpus(), tenant="default")
        before = active_set(memory, "default")
    finally:
        memory.close()
        lock.release()
    assert main(["maintenance", "consolidate", "--data", str(data), "--tau", "0.85"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["status"] == "finished" and run["judge"] == "rule" and run["requested_by"] == "cli"
    assert run["summary"]["labels"] == {"conflict": 1, "restatement": 1}
    assert main(["maintenance", "refine", "--data", str(data), "--budget", "0.7", "--tenant", "default"]) == 0
    refined = json.loads(capsys.readouterr().out)
    assert refined["job"] == "refine" and refined["params"]["budget_fraction"] == 0.7
    assert main(["maintenance", "revert", "--data", str(data), refined["run_id"]]) == 0
    assert main(["maintenance", "revert", "--data", str(data), run["run_id"]]) == 0
    capsys.readouterr()
    assert main(["maintenance", "runs", "--data", str(data), "--json"]) == 0
    listed = {r["run_id"]: r["status"] for r in json.loads(capsys.readouterr().out)}
    assert listed[run["run_id"]] == listed[refined["run_id"]] == "reverted" and len(listed) == 4
    assert main(["maintenance", "revert", "--data", str(data), run["run_id"]]) == 2  # already reverted
    assert "reverted already" in capsys.readouterr().err
    memory, lock = build_memory(Settings(data_dir=data))
    try:
        assert active_set(memory, "default") == before
        assert all(memory.stored_row(rid).text for rid in ids)
    finally:
        memory.close()
        lock.release()


def test_a_run_interrupted_by_a_killed_command_is_recorded_failed_and_revertible(tmp_path, capsys):
    """What SIGKILL leaves behind (a started run with some decisions and no end) is recorded as
    failed by the next command that owns the data folder, and its decisions can be reverted."""
    import json

    from schemas.events import MaintenanceRunStarted
    from services.bootstrap import build_memory
    from services.cli.main import main
    from services.settings import Settings

    data = tmp_path / "killed"
    memory, lock = build_memory(Settings(data_dir=data))
    try:
        ids = ingest(memory, corpus(), tenant="default")
        before = active_set(memory, "default")
        memory.append([
            MaintenanceRunStarted(tenant="default", run_id="refine-killed", job="refine", params={}, judge="rule",
                                  requested_by="cli"),
            RowArchived(tenant="default", row_id=ids[0], run_id="refine-killed", reason="rule judge: delete"),
        ])
        memory.catch_up()
        assert ids[0] not in active_set(memory, "default")
    finally:
        memory.close()
        lock.release()

    assert main(["maintenance", "runs", "--data", str(data), "--json"]) == 0
    (run,) = json.loads(capsys.readouterr().out)
    assert run["run_id"] == "refine-killed" and run["status"] == "failed" and run["events"] == 1
    assert "interrupted" in run["summary"]["error"]
    assert main(["maintenance", "revert", "--data", str(data), "refine-killed"]) == 0
    capsys.readouterr()
    memory, lock = build_memory(Settings(data_dir=data))
    try:
        assert active_set(memory, "default") == before
    finally:
        memory.close()
        lock.release()

"""Maintenance runs as a fold over a real SQLite event log: statuses, progress of live runs,
interrupted runs, and the events a revert appends. No projections are needed for these: the
runs are read from the log alone (the projected effects are covered by the integration tests)."""

from __future__ import annotations

import pytest
from pydantic import SecretStr

from schemas.documents import DocumentIn
from schemas.events import (
    AdminActionRecorded,
    MaintenanceRunFinished,
    MaintenanceRunStarted,
    RowArchived,
    RowDerived,
    RowRestored,
    RowSuperseded,
)
from services.adapters.event_log.sqlite import SqliteEventLog
from services.app.maintenance import MaintenanceService
from services.app.task_runner import make_budget
from services.bootstrap import judge_for
from services.errors import OrgmemError, RunConflict, RunNotFound
from services.settings import Settings


class LogOnlyMemory:
    """The part of Memory these runs touch: the log. Nothing is projected (there are no rows)."""

    def __init__(self, path):
        self.log = SqliteEventLog(path)
        self.caught_up = 0

    def append(self, events):
        return self.log.append(events)

    def head(self):
        return self.log.head()

    def heads(self):
        return self.log.heads()

    def read_log(self, after, limit):
        return self.log.read(after, limit)

    def catch_up(self):
        self.caught_up += 1


@pytest.fixture
def memory(tmp_path):
    mem = LogOnlyMemory(tmp_path / "log.sqlite")
    yield mem
    mem.log.close()


def record_run(memory, run_id="run-a", tenant="acme", finish=True):
    doc = DocumentIn(text="merged", author="a, b")
    events = [
        MaintenanceRunStarted(tenant=tenant, run_id=run_id, job="consolidate", params={"tau": 0.9}, judge="rule",
                              requested_by="alice"),
        RowSuperseded(tenant=tenant, row_id="r1", superseded_by="r2", run_id=run_id, reason="conflict [rule]"),
        RowDerived(tenant=tenant, row_id="d1", document=doc, sources=["x", "y"], run_id=run_id, reason="restatement"),
        RowArchived(tenant=tenant, row_id="x", run_id=run_id, reason="merged into d1"),
        RowArchived(tenant=tenant, row_id="y", run_id=run_id, reason="merged into d1"),
    ]
    if finish:
        events.append(MaintenanceRunFinished(tenant=tenant, run_id=run_id, status="finished",
                                             summary={"labels": {"conflict": 1}, "preserved": [["p", "q"]]}))
    memory.append(events)


def test_runs_are_a_fold_of_the_log(memory):
    service = MaintenanceService(memory)
    record_run(memory, finish=False)
    run = service.run("run-a")
    assert (run.status, run.job, run.tenant, run.judge, run.requested_by) == ("running", "consolidate", "acme", "rule", "alice")
    assert run.events == 4 and run.params == {"tau": 0.9} and run.started_position == 1
    memory.append([MaintenanceRunFinished(tenant="acme", run_id="run-a", status="finished", summary={"groups": 2}),
                   MaintenanceRunFinished(tenant="acme", run_id="unknown", status="failed")])
    run = service.run("run-a")  # read incrementally: only the new events
    assert run.status == "finished" and run.summary == {"groups": 2} and run.finished_position == 6
    assert [r.run_id for r in service.runs()] == ["run-a"]  # a finish without a start is no run
    assert service.runs("globex") == []
    with pytest.raises(RunNotFound):
        service.run("run-a", tenant="globex")  # another tenant's run is not found, not forbidden


def test_queued_and_live_runs_come_from_the_tracker(memory):
    service = MaintenanceService(memory)
    service.tracker.queued("run-q", "refine", "acme", {"budget_fraction": 0.7}, "bob")
    assert service.run("run-q").status == "queued" and service.run("run-q").requested_by == "bob"
    record_run(memory, "run-q")  # started and finished in the log, but its process is not done yet
    service.tracker.progress("run-q", {"phase": "judging", "done": 3})
    assert service.run("run-q").status == "running" and service.run("run-q").progress["done"] == 3
    service.tracker.done("run-q")
    assert service.run("run-q").status == "finished" and service.run("run-q").judge == "rule"
    service.tracker.queued("run-x", "refine", "acme", {}, "bob")
    service.tracker.failed("run-x", "OrgmemError: budget")
    assert service.run("run-x").status == "failed" and service.run("run-x").summary["error"] == "OrgmemError: budget"


def test_view_counts_the_preserve_cache(memory):
    record_run(memory)
    view = MaintenanceService(memory).run("run-a").view()
    assert view["summary"]["preserved"] == 1 and view["started_at"].startswith("20")


def test_interrupted_runs_are_recorded_as_failed(memory):
    service = MaintenanceService(memory)
    record_run(memory, "run-dead", finish=False)
    record_run(memory, "run-live", finish=False)
    service.tracker.queued("run-live", "consolidate", "acme", {}, "alice")
    assert service.fail_interrupted() == ["run-dead"]
    dead = service.run("run-dead")
    assert dead.status == "failed" and "interrupted" in dead.summary["error"]
    assert service.run("run-live").status == "running"


def test_revert_appends_the_inverse_under_a_new_run(memory):
    record_run(memory)
    service = MaintenanceService(memory)
    head = memory.log.head()
    undo = service.revert("run-a", requested_by="carol", revert_run_id="run-undo")
    appended = [e.event for e in memory.log.read(head, 100)]
    assert isinstance(appended[0], MaintenanceRunStarted) and appended[0].params == {"reverts": "run-a"}
    inverse = appended[1:5]
    assert [(type(e), e.row_id) for e in inverse] == [
        (RowRestored, "y"), (RowRestored, "x"), (RowArchived, "d1"), (RowRestored, "r1")]
    assert all(e.run_id == "run-undo" and "revert of run run-a" in e.reason for e in inverse)
    assert [type(e) for e in appended[5:]] == [MaintenanceRunFinished, MaintenanceRunFinished, AdminActionRecorded]
    assert appended[7].actor == "carol" and appended[7].details["run_id"] == "run-a"
    assert undo.run_id == "run-undo" and undo.status == "finished" and undo.events == 4
    original = service.run("run-a")
    assert original.status == "reverted" and original.reverted_by == "run-undo"
    assert original.summary["labels"] == {"conflict": 1}  # the run's own result is kept
    assert memory.caught_up >= 1  # it waited for the projections


def test_what_cannot_be_reverted(memory):
    service = MaintenanceService(memory)
    record_run(memory, "run-open", finish=False)
    with pytest.raises(RunConflict, match="running"):
        service.revert("run-open")
    record_run(memory, "run-a")
    # A later run that touched a row of run-a blocks its revert until that run is reverted.
    memory.append([
        MaintenanceRunStarted(tenant="acme", run_id="run-b", job="refine"),
        RowArchived(tenant="acme", row_id="d1", run_id="run-b", reason="near duplicate"),
        MaintenanceRunFinished(tenant="acme", run_id="run-b", status="finished"),
    ])
    with pytest.raises(RunConflict, match=r"\['run-b'\].*revert those first"):
        service.revert("run-a")
    undo_b = service.revert("run-b")
    with pytest.raises(RunConflict, match="itself a revert"):
        service.revert(undo_b.run_id)
    service.revert("run-a")
    with pytest.raises(RunConflict, match="reverted already"):
        service.revert("run-a")
    with pytest.raises(RunNotFound):
        service.revert("nope")


def test_a_run_id_is_used_once(memory):
    record_run(memory)
    with pytest.raises(RunConflict, match="exists already"):
        MaintenanceService(memory, judge_for(Settings(_env_file=None))).consolidate("acme", run_id="run-a")


def test_the_judge_comes_from_the_settings():
    assert judge_for(Settings()).name == "rule"
    judge = judge_for(Settings(judge_base_url="http://127.0.0.1:9/v1", judge_model="m", judge_api_key=SecretStr("k")))
    assert judge.name == "openai:m" and judge.base_url == "http://127.0.0.1:9/v1"
    judge.close()
    with pytest.raises(OrgmemError, match="judge_base_url, judge_model"):
        judge_for(Settings(judge_model="m"))


def test_budget_errors_name_the_field():
    assert make_budget(0.7, None).fraction == 0.7
    with pytest.raises(OrgmemError, match="budget"):
        make_budget(0.7, 100)
    with pytest.raises(OrgmemError, match="budget.fraction"):
        make_budget(1.5, None)

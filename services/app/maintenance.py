"""Maintenance runs (consolidation, MemRefine, revert) as audited use cases over one Memory.

A run reads one tenant's projections, asks a judge, and appends what the pure planners in
`services.core.maintenance` return; it never writes a projection itself. Every run is framed by
MaintenanceRunStarted / MaintenanceRunFinished in the log, every decision event carries the run
id, the judge and a reason, and the list of runs is a fold over the log, so it survives restarts
and a rebuild (`services.app.maintenance_runs`). The in-process runner and the Celery tasks both
call this module through `services.app.task_runner.run_job`.
"""

from __future__ import annotations

import logging
import os
import socket
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Literal

from schemas.documents import DocumentIn
from schemas.events import (
    AdminActionRecorded,
    Event,
    MaintenanceRunFinished,
    MaintenanceRunStarted,
    RowDerived,
)
from schemas.rows import Row
from services.app.maintenance_runs import (
    RunInfo,
    RunLedger,
    RunTracker,
    new_run_id,
)
from services.app.memory import Memory
from services.core.maintenance import (
    Budget,
    Judge,
    RefinePlanner,
    group_rows,
    inverse_events,
    plan_group,
    same_access,
)
from services.core.maintenance.consolidation import DEFAULT_TAU, Neighbours
from services.core.scope import Scope
from services.core.write_path import embedding_text
from services.errors import (
    IncompatibleAccess,
    JudgeFailed,
    MaintenanceFailed,
    NotReady,
    OrgmemError,
    RunConflict,
    RunNotFound,
)

log = logging.getLogger(__name__)

Progress = Callable[[dict], None]


def runner_name() -> str:
    """Which process runs a run, recorded with its start, so that an operator (and a test) can
    tell a Celery worker's runs from the server's own. Read per run: a forked worker has its own pid."""
    return f"{socket.gethostname()}:{os.getpid()}"


class _Appender:
    """Decision events go to the log in small batches; the events of one decision (a derived
    row and the archives of its sources) always share one append, so none is half applied."""

    def __init__(self, service: MaintenanceService, batch: int):
        self.service, self.batch = service, batch
        self.pending: list[Event] = []
        self.appended = 0

    def add(self, events: Sequence[Event]) -> None:
        self.pending.extend(events)
        if len(self.pending) >= self.batch:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            logged = self.service.memory.append(self.pending)
            self.appended += len(self.pending)
            self.pending = []
            self.service.sync(logged[-1].position)


class MaintenanceService:
    """The maintenance use cases over one Memory.

    indexer: the embedded server's indexer thread; when it runs, the service wakes it and waits
    for it to apply what a run appended; otherwise the service projects in-process.
    neighbours: how many nearest rows the vector index proposes per row (MemRefine's top-m).
    """

    def __init__(self, memory: Memory, judge: Judge | None = None, *, indexer=None, batch_events: int = 64,
                 neighbours: int = 20, projection_timeout_s: float = 300.0, tracker: RunTracker | None = None,
                 owns_runs: bool = False):
        self.memory, self.judge, self.indexer = memory, judge, indexer
        self.batch_events, self.neighbours, self.projection_timeout_s = batch_events, neighbours, projection_timeout_s
        self.tracker = tracker or RunTracker()
        self.ledger = RunLedger(memory)
        # This process runs maintenance for its memory, so a run the log shows running with no
        # live process is one a stop interrupted (see recover()).
        self._owns_runs, self._recovered = owns_runs, False

    def recover(self) -> list[str]:
        """Once, where this process owns the runs: record interrupted runs as failed."""
        if not self._owns_runs or self._recovered:
            return []
        self._recovered = True
        interrupted = self.fail_interrupted()
        if interrupted:
            log.warning("maintenance runs %s were interrupted by a stop; recorded as failed", interrupted)
        return interrupted

    def close(self) -> None:
        close = getattr(self.judge, "close", None)
        if close is not None:
            close()

    # --- projections -------------------------------------------------------------------------
    def sync(self, position: int | None = None) -> None:
        """Return once the projections have applied `position` (default: every lane's head)."""
        positions = list(self.memory.heads().values()) if position is None else [position]
        indexer = self.indexer
        if indexer is not None and indexer.is_alive():
            indexer.wake()
            for target in positions:
                if not self.memory.wait_for(target, self.projection_timeout_s):
                    raise NotReady(f"maintenance: position {target} not indexed within "
                                   f"{self.projection_timeout_s:g} s")
        else:
            self.memory.catch_up()

    def active_rows(self, tenant: str) -> list[Row]:
        return self.memory.rows_in_scope(Scope(tenant=tenant))

    def neighbours_fn(self, tenant: str, m: int) -> Neighbours:
        """row id -> its m nearest active rows of the same tenant, by the row's own stored vector."""
        scope = Scope(tenant=tenant)

        def neighbours(row_id: str) -> list[tuple[str, float]]:
            vector = self.memory.stored_vectors([row_id]).get(row_id)
            if vector is None:
                return []
            return [(rid, score) for rid, score in self.memory.nearest(vector, scope, m + 1) if rid != row_id]

        return neighbours

    def _neighbours_of_document(self, tenant: str, document: DocumentIn, m: int) -> list[tuple[str, float]]:
        # A derived row is not indexed yet while the run goes on; embed it as the indexer will.
        vector = self.memory.embed([embedding_text(document.title, document.text)])[0]
        return self.memory.nearest(vector, Scope(tenant=tenant), m)

    # --- runs ---------------------------------------------------------------------------------
    def _judge(self) -> Judge:
        if self.judge is None:
            raise OrgmemError("judge: this maintenance service has no judge configured")
        return self.judge

    def _start(self, job: str, tenant: str, params: dict, requested_by: str, run_id: str | None, judge: str) -> str:
        run_id = run_id or new_run_id(job)
        if run_id in self.ledger.refresh():
            raise RunConflict(f"run_id: run {run_id} exists already")
        self.memory.append([MaintenanceRunStarted(tenant=tenant, run_id=run_id, job=job, params=params,
                                                  judge=judge, requested_by=requested_by, runner=runner_name())])
        return run_id

    def _finish(self, tenant: str, run_id: str, status: Literal["finished", "failed"], summary: dict) -> RunInfo:
        logged = self.memory.append([MaintenanceRunFinished(tenant=tenant, run_id=run_id, status=status,
                                                            summary=summary)])
        self.sync(logged[-1].position)
        return self.run(run_id)

    def _judge_params(self) -> dict:
        judge = self._judge()
        return {"judge_model": getattr(judge, "model", None), "judge_base_url": getattr(judge, "base_url", None)}

    def _guarded(self, tenant: str, run_id: str, appender: _Appender, body: Callable[[], dict]) -> RunInfo:
        try:
            summary = body()
            appender.flush()
        except Exception as exc:
            log.exception("maintenance run %s failed", run_id)
            try:
                self._finish(tenant, run_id, "failed", {"error": f"{type(exc).__name__}: {exc}"[:500],
                                                        "events": appender.appended})
            except Exception:  # the log itself may be what failed; the run then reads as running
                log.exception("could not record the failure of run %s", run_id)
            raise MaintenanceFailed(f"run {run_id} failed: {exc}") from exc
        summary["events"] = appender.appended
        return self._finish(tenant, run_id, "finished", summary)

    def consolidate(self, tenant: str, tau: float = DEFAULT_TAU, *, run_id: str | None = None,
                    requested_by: str = "system", max_calls: int | None = None,
                    progress: Progress | None = None) -> RunInfo:
        """Mem++ Algorithm 2 over the tenant's current rows; see services.core.maintenance."""
        if not 0.0 < tau <= 1.0:
            raise OrgmemError(f"tau: must be in (0, 1], got {tau}")
        judge = self._judge()
        params = {"tau": tau, "max_calls": max_calls, "neighbours": self.neighbours, **self._judge_params()}
        run_id = self._start("consolidate", tenant, params, requested_by, run_id, judge.name)
        appender = _Appender(self, self.batch_events)
        report = progress or (lambda _p: None)

        def body() -> dict:
            self.sync()
            rows = self.active_rows(tenant)
            report({"phase": "grouping", "rows": len(rows)})
            # Groups hold rows of one access list only: a judge never sees, and no decision or
            # reason ever mixes, rows of different readers (services.core.maintenance.access).
            kept_apart: set[tuple[str, str]] = set()
            groups = group_rows(rows, self.neighbours_fn(tenant, self.neighbours), tau, kept_apart=kept_apart)
            counts: Counter[str] = Counter()
            calls, stop = 0, "done"
            for index, group in enumerate(groups):
                if max_calls is not None and calls >= max_calls:
                    stop = "call_cap"
                    break
                if not same_access(group):  # group_rows never forms one; never send one to a judge
                    counts["refused"] += 1
                    continue
                calls += 1
                try:
                    label = judge.label_group(group)
                    text = judge.merge(group) if label.label == "restatement" else None
                    events = plan_group(group, label, text, run_id, judge.name)
                except (JudgeFailed, ValueError) as exc:  # the group stays as it is
                    counts["failed"] += 1
                    log.warning("run %s: judge failed on group %s: %s", run_id, [r.row_id for r in group], exc)
                    continue
                except IncompatibleAccess as exc:
                    counts["refused"] += 1
                    log.info("run %s: %s", run_id, exc)
                    continue
                counts[label.label] += 1
                appender.add(events)
                report({"phase": "judging", "done": index + 1, "total": len(groups), "labels": dict(counts)})
            return {"rows": len(rows), "groups": len(groups), "groups_judged": calls, "labels": dict(counts),
                    "pairs_skipped_access": len(kept_apart), "stop_reason": stop}

        return self._guarded(tenant, run_id, appender, body)

    def refine(self, tenant: str, budget: Budget, *, run_id: str | None = None, requested_by: str = "system",
               max_calls: int | None = None, min_similarity: float = 0.0, use_cache: bool = True,
               progress: Progress | None = None) -> RunInfo:
        """MemRefine until the tenant's active rows fit `budget` or no unjudged pair is left."""
        judge = self._judge()
        cache_run = self._cache_run(tenant, judge.name) if use_cache else None
        preserved = [tuple(p) for p in cache_run.summary.get("preserved", [])] if cache_run else []
        params = {"budget_fraction": budget.fraction, "budget_bytes": budget.max_bytes, "max_calls": max_calls,
                  "min_similarity": min_similarity, "neighbours": self.neighbours,
                  "preserve_cache_from": cache_run.run_id if cache_run else None, **self._judge_params()}
        run_id = self._start("refine", tenant, params, requested_by, run_id, judge.name)
        appender = _Appender(self, self.batch_events)
        report = progress or (lambda _p: None)

        def body() -> dict:
            self.sync()
            rows = self.active_rows(tenant)
            report({"phase": "proposing", "rows": len(rows)})
            planner = RefinePlanner(rows, self.neighbours_fn(tenant, self.neighbours), budget, run_id,
                                    judge=judge.name, max_calls=max_calls, min_similarity=min_similarity,
                                    preserved=preserved)
            derived_ids: set[str] = set()
            while (candidate := planner.next_pair()) is not None:
                try:
                    decision = judge.judge_pair(candidate.a, candidate.b, candidate.similarity)
                    decision.check_pair(candidate.a, candidate.b)
                except (JudgeFailed, ValueError) as exc:  # the pair stays as it is
                    planner.fail(candidate, str(exc))
                    log.warning("run %s: judge failed on pair %s: %s", run_id, candidate.key, exc)
                    continue
                events = planner.apply(candidate, decision)
                appender.add(events)
                if events and isinstance(events[0], RowDerived):
                    derived = events[0]
                    derived_ids.add(derived.row_id)
                    planner.offer(derived.row_id, self._neighbours_of_document(tenant, derived.document,
                                                                               self.neighbours))
                span = max(planner.start_bytes - planner.target_bytes, 1)
                report({"phase": "judging", "pairs_judged": planner.calls, "active_bytes": planner.active_bytes,
                        "target_bytes": planner.target_bytes,
                        "fraction_done": round(min(1.0, (planner.start_bytes - planner.active_bytes) / span), 4)})
            known = {r.row_id for r in rows} | derived_ids
            # Pairs with a row that left the store before this run will not be proposed again.
            kept = sorted(p for p in planner.preserved_pairs if p[0] in known and p[1] in known)
            return {**planner.report().as_dict(), "rows": len(rows), "preserved": [list(p) for p in kept]}

        return self._guarded(tenant, run_id, appender, body)

    def _cache_run(self, tenant: str, judge: str) -> RunInfo | None:
        """The latest completed refine run of the tenant by the same judge: its preserve cache."""
        done = [r for r in self.ledger.refresh().values()
                if r.job == "refine" and r.tenant == tenant and r.judge == judge and r.status in ("finished", "reverted")
                and "preserved" in r.summary]
        return max(done, key=lambda r: r.finished_position or 0, default=None)

    # --- listing ------------------------------------------------------------------------------
    def runs(self, tenant: str | None = None) -> list[RunInfo]:
        """Every run, oldest first: the log's fold, with progress and queued runs of this process."""
        self.recover()
        logged = self.ledger.refresh()
        merged: dict[str, RunInfo] = {}
        for run_id, live in self.tracker.snapshot().items():
            run = logged.pop(run_id, None)
            if run is None:
                merged[run_id] = live
            else:
                run.progress = live.progress
                if self.tracker.is_live(run_id):
                    # Its end is in the log, but the projections may not have applied it yet:
                    # the run is done when the process running it says so.
                    run.status = "running"
                merged[run_id] = run
        merged.update(logged)
        found = [r for r in merged.values() if tenant is None or r.tenant == tenant]
        return sorted(found, key=lambda r: (r.started_position or 1 << 62, r.run_id))

    def run(self, run_id: str, tenant: str | None = None) -> RunInfo:
        for run in self.runs(tenant):
            if run.run_id == run_id:
                return run
        raise RunNotFound(f"run {run_id} not found")

    def fail_interrupted(self) -> list[str]:
        """Record as failed the runs the log shows running that no live process runs.

        Call only where this process is the one that runs maintenance for the data folder
        (the embedded server holds its lock), at start, before any run is queued."""
        stale = [r for r in self.ledger.refresh().values() if r.status == "running" and not self.tracker.is_live(r.run_id)]
        for run in stale:
            self.memory.append([MaintenanceRunFinished(
                tenant=run.tenant, run_id=run.run_id, status="failed",
                summary={"error": "interrupted: the process running it stopped before it finished"})])
        return [r.run_id for r in stale]

    # --- revert -------------------------------------------------------------------------------
    def check_revertible(self, run_id: str, tenant: str | None = None) -> RunInfo:
        run = self.run(run_id, tenant)
        if run.status in ("queued", "running"):
            raise RunConflict(f"run {run_id} is {run.status}; revert it once it has stopped")
        if run.status == "reverted":
            raise RunConflict(f"run {run_id} was reverted already (by {run.reverted_by})")
        if run.job == "revert":
            raise RunConflict(f"run {run_id} is itself a revert; a revert is not reverted")
        touched = {e.row_id for e in self.ledger.run_events(run)}
        later = self.ledger.later_changes(run, touched)
        if later:
            raise RunConflict(f"run {run_id}: rows it changed were changed again by later runs "
                              f"{sorted(later)}; revert those first")
        return run

    def revert(self, run_id: str, *, requested_by: str = "system", tenant: str | None = None,
               revert_run_id: str | None = None, progress: Progress | None = None) -> RunInfo:
        """Append the inverse of a run's decisions under a new run id, and mark the run reverted.

        The revert run's markers, the inverse events and the reverted mark are one append:
        either the whole revert is in the log or none of it is."""
        run = self.check_revertible(run_id, tenant)
        revert_id = revert_run_id or new_run_id("revert")
        inverse = inverse_events(list(self.ledger.run_events(run)), revert_id)
        if progress:
            progress({"phase": "reverting", "events": len(inverse)})
        logged = self.memory.append([
            MaintenanceRunStarted(tenant=run.tenant, run_id=revert_id, job="revert", params={"reverts": run_id},
                                  requested_by=requested_by, runner=runner_name()),
            *inverse,
            MaintenanceRunFinished(tenant=run.tenant, run_id=revert_id, status="finished",
                                   summary={"reverts": run_id, "events": len(inverse)}),
            MaintenanceRunFinished(tenant=run.tenant, run_id=run_id, status="reverted",
                                   summary={"reverted_by": revert_id}),
            AdminActionRecorded(tenant=run.tenant, action="maintenance.revert", actor=requested_by,
                                details={"run_id": run_id, "revert_run_id": revert_id, "events": len(inverse)}),
        ])
        self.sync(logged[-1].position)
        return self.run(revert_id)


def active_set(memory: Memory, tenant: str) -> dict[str, str | None]:
    """The tenant's active rows and what supersedes each: what a revert must give back."""
    return {row.row_id: row.superseded_by for row in memory.rows_in_scope(Scope(tenant=tenant))}


__all__ = ["MaintenanceService", "Progress", "active_set", "runner_name"]

"""The ledger of maintenance runs: what the log says about each run, plus the live progress of
runs in this process. The list of runs is a fold over the log, so it survives restarts and a
rebuild; nothing here writes."""

from __future__ import annotations

import dataclasses
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from schemas.events import (
    Event,
    LoggedEvent,
    MaintenanceRunFinished,
    MaintenanceRunStarted,
    RowArchived,
    RowDerived,
    RowRestored,
    RowSuperseded,
)
from services.app.memory import Memory
from services.core.positions import Checkpoints, lane_of

DECISION_EVENTS = (RowSuperseded, RowArchived, RowDerived, RowRestored)
READ_BATCH = 1000


@dataclass
class RunInfo:
    """What the log says about one run, plus live progress from the process running it."""

    run_id: str
    job: str
    tenant: str
    status: str  # queued | running | finished | failed | reverted
    params: dict = field(default_factory=dict)
    judge: str = ""
    requested_by: str = ""
    runner: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    started_position: int | None = None
    finished_position: int | None = None
    summary: dict = field(default_factory=dict)
    progress: dict = field(default_factory=dict)
    events: int = 0  # decision events appended under this run id
    reverted_by: str | None = None

    def view(self) -> dict:
        """The run for people and APIs: the preserve cache is reported as a count, not listed."""
        data = dataclasses.asdict(self)
        summary = dict(self.summary)
        if "preserved" in summary:
            summary["preserved"] = len(summary["preserved"])
        data["summary"] = summary
        for key in ("started_at", "finished_at"):
            data[key] = data[key].isoformat() if data[key] else None
        return data


class RunTracker:
    """Runs that live only in this process so far: queued ones, progress, early failures."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: dict[str, RunInfo] = {}
        self._live: set[str] = set()

    def queued(self, run_id: str, job: str, tenant: str, params: dict, requested_by: str, live: bool = True) -> None:
        """live=False: another process runs it (a Celery worker); the log, once it shows the run,
        is the only word on its status."""
        with self._lock:
            self._runs[run_id] = RunInfo(run_id, job, tenant, "queued", dict(params), requested_by=requested_by)
            if live:
                self._live.add(run_id)

    def progress(self, run_id: str, progress: dict) -> None:
        with self._lock:
            if run_id in self._runs:
                self._runs[run_id].progress = dict(progress)

    def failed(self, run_id: str, error: str) -> None:
        with self._lock:
            if run_id in self._runs:
                self._runs[run_id].status = "failed"
                self._runs[run_id].summary = {"error": error}

    def done(self, run_id: str) -> None:
        with self._lock:
            self._live.discard(run_id)

    def is_live(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._live

    def snapshot(self) -> dict[str, RunInfo]:
        with self._lock:
            return {rid: dataclasses.replace(run) for rid, run in self._runs.items()}


class RunLedger:
    """The runs as a fold over the log, read incrementally (each call reads only new events)."""

    def __init__(self, memory: Memory):
        self.memory = memory
        self._lock = threading.Lock()
        self._after = Checkpoints()  # how far each lane of the log is folded in
        self._runs: dict[str, RunInfo] = {}

    def refresh(self) -> dict[str, RunInfo]:
        with self._lock:
            for lane in sorted(self.memory.heads()):
                while batch := self.memory.read_log(self._after.of(lane), READ_BATCH):
                    for logged in batch:
                        self._fold(logged)
                    self._after[lane] = batch[-1].position
            return {rid: dataclasses.replace(run) for rid, run in self._runs.items()}

    def run_events(self, run: RunInfo) -> Iterator[Event]:
        """The decision events of a run, in log order."""
        after = (run.started_position or 1) - 1
        end = run.finished_position or self.memory.heads().of(lane_of(after))
        while after < end and (batch := self.memory.read_log(after, READ_BATCH)):
            for logged in batch:
                event = logged.event
                if logged.position <= end and isinstance(event, DECISION_EVENTS) and event.run_id == run.run_id:
                    yield event
            after = batch[-1].position

    def later_changes(self, run: RunInfo, touched: set[str]) -> set[str]:
        """Runs after `run` (not reverted, not reverts) whose decisions touch rows of `touched`."""
        runs = self.refresh()
        after, found = run.finished_position or 0, set()
        while touched and (batch := self.memory.read_log(after, READ_BATCH)):
            for logged in batch:
                event = logged.event
                if not isinstance(event, DECISION_EVENTS) or event.run_id in (None, run.run_id):
                    continue
                other = runs.get(event.run_id)
                # A later run that was reverted, or a revert itself, leaves the rows as they were.
                if other is not None and (other.status == "reverted" or other.job == "revert"):
                    continue
                if event.row_id in touched:
                    found.add(event.run_id)
            after = batch[-1].position
        return found

    def _fold(self, logged: LoggedEvent) -> None:
        event = logged.event
        if isinstance(event, MaintenanceRunStarted):
            self._runs[event.run_id] = RunInfo(
                event.run_id, event.job, event.tenant, "running", dict(event.params), event.judge,
                event.requested_by, event.runner, started_at=logged.appended_at, started_position=logged.position,
            )  # fmt: skip
        elif isinstance(event, MaintenanceRunFinished) and event.run_id in self._runs:
            run = self._runs[event.run_id]
            if event.status == "reverted":  # keeps the run's own summary; says who reverted it
                run.status, run.reverted_by = "reverted", event.summary.get("reverted_by")
            else:
                run.status, run.summary = event.status, dict(event.summary)
                run.finished_at, run.finished_position = logged.appended_at, logged.position
        elif isinstance(event, DECISION_EVENTS) and event.run_id in self._runs:
            self._runs[event.run_id].events += 1


def new_run_id(job: str) -> str:
    return f"{job}-{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"

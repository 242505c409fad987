"""Running maintenance jobs: one dispatch (`run_job`) that every runner calls, and the embedded
profile's runner, a thread of the server process. The cluster's runner hands the same jobs to
Celery workers (`services/adapters/task_runner/celery.py`, executed by `workers/maintenance`).
"""

from __future__ import annotations

import logging
import queue
import threading

from services.app.maintenance import MaintenanceService, Progress
from services.app.maintenance_runs import RunInfo, RunTracker, new_run_id
from services.core.maintenance import Budget
from services.core.maintenance.consolidation import DEFAULT_TAU
from services.errors import Invalid

log = logging.getLogger(__name__)

JOBS = ("consolidate", "refine", "revert")


def make_budget(fraction: float | None, max_bytes: int | None) -> Budget:
    try:
        return Budget(fraction=fraction, max_bytes=max_bytes)
    except ValueError as exc:
        raise Invalid(str(exc)) from None


def run_job(service: MaintenanceService, job: str, tenant: str, params: dict, requested_by: str,
            run_id: str | None = None, progress: Progress | None = None) -> RunInfo:
    """Run one job by name with the parameters the admin API and the CLI accept.
    revert: `params["reverts"]` names the run to undo; `run_id` names the revert run."""
    if job == "consolidate":
        return service.consolidate(tenant, params.get("tau") or DEFAULT_TAU, run_id=run_id, requested_by=requested_by,
                                   max_calls=params.get("max_calls"), progress=progress)
    if job == "refine":
        budget = make_budget(params.get("budget_fraction"), params.get("budget_bytes"))
        return service.refine(tenant, budget, run_id=run_id, requested_by=requested_by,
                              max_calls=params.get("max_calls"), min_similarity=params.get("min_similarity", 0.0),
                              use_cache=params.get("use_cache", True), progress=progress)
    if job == "revert":
        return service.revert(params["reverts"], requested_by=requested_by, tenant=tenant, revert_run_id=run_id,
                              progress=progress)
    raise Invalid(f"job: expected one of {', '.join(JOBS)}, got {job!r}")


class InProcessRunner:
    """The embedded profile's task runner: one background thread runs queued jobs in order.

    One at a time on purpose: two runs over the same tenant would judge from the same snapshot
    and could both act on one row. Status and progress of queued and running jobs live in the
    service's tracker; everything else is in the log.
    """

    def __init__(self, service: MaintenanceService):
        self.service = service
        self.tracker: RunTracker = service.tracker
        self._queue: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def start(self, job: str, tenant: str, params: dict, requested_by: str) -> str:
        """Queue a job; returns the run id at once (status queued)."""
        if job not in JOBS:
            raise Invalid(f"job: expected one of {', '.join(JOBS)}, got {job!r}")
        self.service.recover()  # before this run is live, so it is never taken for an interrupted one
        run_id = new_run_id(job)
        self.tracker.queued(run_id, job, tenant, params, requested_by)
        self._ensure_thread()
        self._queue.put((run_id, job, tenant, params, requested_by))
        return run_id

    def _ensure_thread(self) -> None:
        with self._start_lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="orgmem-maintenance", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            run_id, job, tenant, params, requested_by = item
            try:
                run_job(self.service, job, tenant, params, requested_by, run_id,
                        lambda progress, rid=run_id: self.tracker.progress(rid, progress))
            except Exception as exc:  # recorded in the log as failed when it got that far
                log.exception("maintenance run %s failed", run_id)
                self.tracker.failed(run_id, f"{type(exc).__name__}: {exc}"[:500])
            finally:
                self.tracker.done(run_id)

    def close(self, timeout: float | None = None) -> None:
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)

    def idle(self) -> bool:
        """No job queued or running."""
        return not any(self.tracker.is_live(run_id) for run_id in self.tracker.snapshot())

"""Maintenance jobs as plain functions, and the embedded profile's in-process task runner.

`consolidate`, `refine`, `revert` and `runs` take either Settings (they open the data folder,
run, and close it: what a Celery task does) or an open Memory (in-process), and return the run
as a plain dict (JSON-serialisable, as a Celery result must be). A Celery task wraps them as is
and may pass `progress` to publish progress (e.g. `task.update_state`).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from services.app.maintenance import MaintenanceService, Progress
from services.app.maintenance_runs import RunInfo, RunTracker, new_run_id
from services.app.memory import Memory
from services.core.maintenance import Budget, Judge
from services.core.maintenance.consolidation import DEFAULT_TAU
from services.errors import OrgmemError
from services.settings import Settings

log = logging.getLogger(__name__)

Target = Settings | Memory


def judge_for(settings: Settings) -> Judge:
    """An OpenAI-compatible judge when `judge_base_url` and `judge_model` are set, else the rule judge."""
    from services.adapters.judge import OpenAICompatJudge, RuleJudge

    if settings.judge_base_url and settings.judge_model:
        return OpenAICompatJudge(settings.judge_base_url, settings.judge_model, settings.judge_api_key)
    if settings.judge_base_url or settings.judge_model:
        raise OrgmemError("judge_base_url, judge_model: set both to use a model judge, or neither for the rule judge")
    return RuleJudge()


@contextmanager
def _service(target: Target, judge: Judge | None = None, *, needs_judge: bool = False) -> Iterator[MaintenanceService]:
    """A service over an open memory, or over the data folder `target` names (opened and closed
    here, as a Celery task does). A judge the function builds itself is closed again."""
    if isinstance(target, Memory):
        yield MaintenanceService(target, judge)
        return
    from services.bootstrap import DataFolderLock, build_memory

    own = needs_judge and judge is None
    judge = judge_for(target) if own else judge
    memory, lock = build_memory(target)
    try:
        service = MaintenanceService(memory, judge)
        if isinstance(lock, DataFolderLock):
            # This process owns the data folder, so a run the log shows running was interrupted
            # (a killed CLI command or server): record it as failed before anything else.
            interrupted = service.fail_interrupted()
            if interrupted:
                log.warning("maintenance runs %s were interrupted by a stop; recorded as failed", interrupted)
        yield service
    finally:
        if own and hasattr(judge, "close"):
            judge.close()  # type: ignore[union-attr]
        memory.close()
        if lock is not None:
            lock.release()


def _pick(target: Target, judge: Judge | None, settings: Settings | None) -> Judge | None:
    # With an open Memory, the judge comes from `settings` (or the environment); with Settings,
    # _service builds it from them.
    if judge is None and isinstance(target, Memory):
        return judge_for(settings or Settings())
    return judge


def consolidate(target: Target, tenant: str = "default", tau: float = DEFAULT_TAU, *, judge: Judge | None = None,
                settings: Settings | None = None, run_id: str | None = None, requested_by: str = "system",
                max_calls: int | None = None, progress: Progress | None = None) -> dict:
    """Consolidate one tenant's rows (Mem++ Algorithm 2). Without `judge`, the judge comes from
    the settings (a model when judge_base_url and judge_model are set, else the rule judge)."""
    with _service(target, _pick(target, judge, settings), needs_judge=True) as service:
        return service.consolidate(tenant, tau, run_id=run_id, requested_by=requested_by, max_calls=max_calls,
                                   progress=progress).view()


def refine(target: Target, tenant: str = "default", *, budget_fraction: float | None = None,
           budget_bytes: int | None = None, judge: Judge | None = None, settings: Settings | None = None,
           run_id: str | None = None, requested_by: str = "system", max_calls: int | None = None,
           min_similarity: float = 0.0, use_cache: bool = True, progress: Progress | None = None) -> dict:
    """MemRefine one tenant to `budget_fraction` of its active size or to `budget_bytes`."""
    budget = make_budget(budget_fraction, budget_bytes)
    with _service(target, _pick(target, judge, settings), needs_judge=True) as service:
        return service.refine(tenant, budget, run_id=run_id, requested_by=requested_by, max_calls=max_calls,
                              min_similarity=min_similarity, use_cache=use_cache, progress=progress).view()


def revert(target: Target, run_id: str, *, requested_by: str = "system", tenant: str | None = None,
           revert_run_id: str | None = None, progress: Progress | None = None) -> dict:
    """Undo a run: the active set afterwards equals the one before it."""
    with _service(target) as service:
        return service.revert(run_id, requested_by=requested_by, tenant=tenant, revert_run_id=revert_run_id,
                              progress=progress).view()


def runs(target: Target, tenant: str | None = None) -> list[dict]:
    """Every run (oldest first) as the log records it."""
    with _service(target) as service:
        return [run.view() for run in service.runs(tenant)]


def make_budget(fraction: float | None, max_bytes: int | None) -> Budget:
    try:
        return Budget(fraction=fraction, max_bytes=max_bytes)
    except ValueError as exc:
        raise OrgmemError(str(exc)) from None


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
        interrupted = service.fail_interrupted()
        if interrupted:
            log.warning("maintenance runs %s were interrupted by a stop; recorded as failed", interrupted)

    def submit(self, job: str, tenant: str, params: dict, requested_by: str,
               work: Callable[[str, Progress], RunInfo]) -> str:
        """Queue `work(run_id, progress)`; returns the run id at once (status queued)."""
        run_id = new_run_id(job)
        self.tracker.queued(run_id, job, tenant, params, requested_by)
        self._ensure_thread()
        self._queue.put((run_id, work))
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
            run_id, work = item
            try:
                work(run_id, lambda progress, rid=run_id: self.tracker.progress(rid, progress))
            except Exception as exc:  # recorded in the log as failed when it got that far
                log.exception("maintenance run %s failed", run_id)
                self.tracker.failed(run_id, f"{type(exc).__name__}: {exc}"[:500])
            finally:
                self.tracker.done(run_id)

    def stop(self, timeout: float | None = None) -> None:
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)

    def idle(self) -> bool:
        """No job queued or running."""
        return not any(self.tracker.is_live(run_id) for run_id in self.tracker.snapshot())

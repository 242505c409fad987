"""The Celery app of the cluster profile: maintenance and rebuilds on workers, Redis as broker
and result backend.

    celery -A workers.maintenance.celery_app worker --concurrency 1
    celery -A workers.maintenance.celery_app beat

Configured from `services.settings.Settings` (ORGMEM_ environment) when Celery first reads its
configuration, not at import. Delivery is at least once: tasks are acknowledged after they
finish (acks_late), so a worker killed mid-task leaves the message unacknowledged and Redis
hands it to another worker once the visibility timeout has passed. Every task is therefore
safe to run twice: a rebuild replays the log from the start; a maintenance run is named after
its task id, so a redelivered run either returns the finished run or records the interrupted
attempt as failed and runs again.

One maintenance run per tenant at a time, across every worker: two runs over one tenant would
judge from the same snapshot and could both act on one row. A Redis lock per tenant enforces it;
a task that finds its tenant busy is retried later rather than holding a worker while it waits.
The lock expires a minute after the hard time limit, so a killed worker cannot keep it.
"""

from __future__ import annotations

import logging
import math
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from celery import Celery, signals
from celery.schedules import crontab

from schemas.events import MaintenanceRunFinished
from services import bootstrap
from services.app.task_runner import run_job
from services.errors import BackendUnavailable
from services.settings import Settings

log = logging.getLogger(__name__)

# A maintenance pass over a large tenant takes minutes; the hard limit kills a stuck one.
SOFT_TIME_LIMIT_S = 3_300
TIME_LIMIT_S = 3_600
# Longer than the longest task: Redis redelivers an unacknowledged task after this long, and a
# shorter timeout would hand a still-running task to a second worker.
VISIBILITY_TIMEOUT_S = TIME_LIMIT_S + 600

app = Celery("orgmem")


def celery_config(settings: Settings) -> dict:
    cluster = settings.cluster
    redis_url = cluster.redis_url
    soft = getattr(cluster, "task_soft_time_limit_s", SOFT_TIME_LIMIT_S)
    hard = getattr(cluster, "task_time_limit_s", TIME_LIMIT_S)
    visibility = getattr(cluster, "task_visibility_timeout_s", max(VISIBILITY_TIMEOUT_S, hard + 60))
    return {
        "broker_url": redis_url,
        "result_backend": redis_url,
        "broker_transport_options": {"visibility_timeout": visibility},
        "result_backend_transport_options": {"retry_policy": {"timeout": 5.0}},
        "broker_connection_retry_on_startup": True,
        "broker_connection_max_retries": None,  # keep reconnecting when Redis restarts
        "task_serializer": "json",
        "result_serializer": "json",
        "accept_content": ["json"],
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,  # a killed pool process requeues its task
        "worker_prefetch_multiplier": 1,  # an unstarted task is not held hostage by a busy worker
        "task_soft_time_limit": soft,
        "task_time_limit": hard,
        "task_track_started": True,
        "result_expires": 7 * 86_400,
        "timezone": "UTC",
        "beat_schedule": beat_schedule(),
    }


def beat_schedule() -> dict:
    return {
        "health-every-minute": {"task": "orgmem.health", "schedule": 60.0},
        # Nightly consolidation of the default tenant with the settings' judge; other tenants
        # are added by the operator (docs/cluster.md).
        "consolidate-nightly": {"task": "orgmem.consolidate", "schedule": crontab(hour=2, minute=30),
                                "kwargs": {"tenant": "default"}},
    }


@app.on_configure.connect
def _configure(sender: Celery, **_kwargs) -> None:
    sender.conf.update(celery_config(Settings()))


# -- the memory of this worker process ---------------------------------------------------------

_memory = None
_lock = None
_service = None
_memory_guard = threading.Lock()


def worker_memory():
    """One Memory per worker process, opened on first use (profile from the settings): in the
    cluster profile a reader of the projections; in the embedded profile it owns a data folder."""
    global _memory, _lock
    with _memory_guard:
        if _memory is None:
            _memory, _lock = bootstrap.build_memory(Settings())
        return _memory


def worker_maintenance():
    """The maintenance use cases of this worker process, with the settings' judge. Several
    workers share the runs, so an interrupted run is recognised per task (`_run_id`), not here."""
    global _service
    memory = worker_memory()
    with _memory_guard:
        if _service is None:
            _service = bootstrap.maintenance_for(Settings(), memory, owns_runs=False)
        return _service


@signals.worker_process_shutdown.connect
@signals.worker_shutdown.connect
def _close_memory(**_kwargs) -> None:
    global _memory, _lock, _service
    with _memory_guard:
        if _service is not None:
            _service.close()
        if _memory is not None:
            _memory.close()
            if _lock is not None:
                _lock.release()
        _memory = _lock = _service = None


RETRY = {"autoretry_for": (BackendUnavailable,), "retry_backoff": 5, "retry_backoff_max": 300,
         "retry_jitter": True, "max_retries": 10}


def _progress(task):
    """A maintenance job's progress (a dict) as the task's PROGRESS state."""
    return lambda progress: task.update_state(state="PROGRESS", meta=dict(progress))


def _replay_progress(task):
    def report(position, stats) -> None:
        task.update_state(state="PROGRESS", meta={"position": position, "events": stats.events,
                                                  "rows_added": stats.rows_added, "skipped": stats.skipped})
    return report


@app.task(name="orgmem.health", bind=True, **RETRY)
def health(self) -> dict:
    """What this worker sees: the log head, the projections' checkpoint and counts."""
    memory = worker_memory()
    heads = memory.heads()
    return {"worker": socket.gethostname(), "profile": Settings().profile, "log_head": heads.summary(),
            "applied_position": memory.projection.applied, "lag": memory.lag(heads), "rows": memory.counts()}


@app.task(name="orgmem.rebuild", bind=True, **RETRY)
def rebuild(self) -> dict:
    """Replay the log into fresh projections. Cluster: beside the live ones, which keep serving,
    then switched to (docs/cluster.md, "Rebuild without downtime"); embedded: in place."""
    settings = Settings()
    if settings.profile == "cluster":
        stats, counts = bootstrap.rebuild_cluster_beside(settings, progress=_replay_progress(self))
        return {"events": stats.events, **counts}
    memory = worker_memory()
    stats = memory.rebuild(progress=_replay_progress(self))
    return {"events": stats.events, **memory.stats()}


class TenantBusy(Exception):
    """Another worker holds the tenant's maintenance lock."""


def tenant_lock_name(tenant: str) -> str:
    return f"orgmem:maintenance:{tenant}"


@contextmanager
def tenant_run_lock(tenant: str) -> Iterator[None]:
    import redis

    settings = Settings()
    client = redis.Redis.from_url(settings.cluster.redis_url)
    lock = client.lock(tenant_lock_name(tenant), timeout=settings.cluster.task_time_limit_s + 60)
    try:
        if not lock.acquire(blocking=False):
            raise TenantBusy(f"tenant {tenant!r} has a maintenance run on another worker")
        try:
            yield
        finally:
            try:
                lock.release()
            except redis.exceptions.LockError:  # expired: the run outlived its time limit
                log.warning("the maintenance lock of tenant %r had expired before the run ended", tenant)
    finally:
        client.close()


def _one_run_per_tenant(task, tenant: str, work: Callable[[], dict]) -> dict:
    try:
        with tenant_run_lock(tenant):
            return work()
    except TenantBusy as exc:
        cluster = Settings().cluster
        log.info("%s; task %s retries in %g s", exc, task.request.id, cluster.tenant_busy_retry_s)
        # Enough retries to outwait the longest run: the lock expires with its time limit.
        patience = math.ceil((cluster.task_time_limit_s + 60) / cluster.tenant_busy_retry_s) + RETRY["max_retries"]
        raise task.retry(exc=exc, countdown=cluster.tenant_busy_retry_s, max_retries=patience) from None


def _run_id(task, job: str, tenant: str, given: str | None) -> tuple[str, dict | None]:
    """A run named after the task, so a redelivered task finds its own earlier attempt. Called
    under the tenant's lock, so an attempt the log shows running is one whose worker was lost."""
    run_id = given or f"{job}-{task.request.id}"
    service = worker_maintenance()
    attempts = [r.view() for r in service.runs(tenant) if r.run_id.startswith(run_id)]
    for run in attempts:
        if run.get("status") == "finished":
            return run_id, run
        if run.get("status") == "running":
            service.memory.append([MaintenanceRunFinished(
                tenant=tenant, run_id=run["run_id"], status="failed",
                summary={"error": "interrupted: the worker running it was lost; the task was redelivered"})])
    return (f"{run_id}-attempt{len(attempts) + 1}" if attempts else run_id), None


def _job(task, job: str, tenant: str, params: dict, requested_by: str, run_id: str | None) -> dict:
    def work() -> dict:
        named, done = _run_id(task, job, tenant, run_id)
        if done is not None:
            return done
        return run_job(worker_maintenance(), job, tenant, params, requested_by, named, _progress(task)).view()

    return _one_run_per_tenant(task, tenant, work)


@app.task(name="orgmem.consolidate", bind=True, **RETRY)
def consolidate(self, tenant: str = "default", tau: float | None = None, run_id: str | None = None,
                requested_by: str = "celery", max_calls: int | None = None) -> dict:
    return _job(self, "consolidate", tenant, {"tau": tau, "max_calls": max_calls}, requested_by, run_id)


@app.task(name="orgmem.refine", bind=True, **RETRY)
def refine(self, tenant: str = "default", budget_fraction: float | None = None, budget_bytes: int | None = None,
           run_id: str | None = None, requested_by: str = "celery", max_calls: int | None = None,
           min_similarity: float = 0.0, use_cache: bool = True) -> dict:
    params = {"budget_fraction": budget_fraction, "budget_bytes": budget_bytes, "max_calls": max_calls,
              "min_similarity": min_similarity, "use_cache": use_cache}
    return _job(self, "refine", tenant, params, requested_by, run_id)


@app.task(name="orgmem.revert", bind=True, **RETRY)
def revert(self, run_id: str, requested_by: str = "celery", tenant: str | None = None,
           revert_run_id: str | None = None) -> dict:
    service = worker_maintenance()
    owner = next((r.tenant for r in service.runs(tenant) if r.run_id == run_id), tenant) or "default"
    # The revert run is named by the API (or after the task), and a revert is one append: a
    # redelivered task whose revert is in the log returns it instead of failing on "reverted already".
    named = revert_run_id or f"revert-{self.request.id}"

    def work() -> dict:
        done = next((r for r in service.runs(owner) if r.run_id == named and r.status == "finished"), None)
        if done is not None:
            return done.view()
        return run_job(service, "revert", owner, {"reverts": run_id}, requested_by, named, _progress(self)).view()

    return _one_run_per_tenant(self, owner, work)

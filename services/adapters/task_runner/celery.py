"""The cluster profile's task runner: maintenance jobs go to the Celery workers over Redis.

This side only sends: it names tasks (`orgmem.consolidate`, `orgmem.refine`, `orgmem.revert`,
defined in `workers/maintenance/celery_app.py`) and never imports the worker code. The run id is
chosen here and passed along, so the API answers with it at once and the worker's run (and a
redelivered attempt of it) carries it. Until a worker has logged the run's start, the API shows
it queued from its own tracker; after that the log is the only word on its status.
"""

from __future__ import annotations

import logging

from services.app.maintenance_runs import RunTracker, new_run_id
from services.errors import BackendUnavailable, Invalid

log = logging.getLogger(__name__)

TASKS = {"consolidate": "orgmem.consolidate", "refine": "orgmem.refine", "revert": "orgmem.revert"}


class CeleryTaskRunner:
    def __init__(self, redis_url: str, tracker: RunTracker, send_timeout_s: float = 5.0):
        from celery import Celery

        self.tracker = tracker
        # No result backend here: the API never reads task results (the log says how a run went),
        # and a Redis result backend would retry its own connection for ~20 s on every send while
        # Redis is down. The workers still store results with their own configuration.
        self._app = Celery("orgmem-client", broker=redis_url, set_as_current=False)
        # One send either reaches Redis within send_timeout_s or fails: kombu would otherwise retry
        # the connection for broker_connection_timeout (4 s) per publish, without a retry limit.
        self._app.conf.update(task_serializer="json", accept_content=["json"], broker_connection_retry=False,
                              broker_connection_max_retries=0, broker_connection_timeout=send_timeout_s,
                              broker_transport_options={"socket_timeout": send_timeout_s,
                                                        "socket_connect_timeout": send_timeout_s,
                                                        "max_retries": 1, "interval_start": 0.2,
                                                        "interval_step": 0.2, "interval_max": 0.2,
                                                        "connect_retries_timeout": send_timeout_s})

    def start(self, job: str, tenant: str, params: dict, requested_by: str) -> str:
        if job not in TASKS:
            raise Invalid(f"job: expected one of {', '.join(TASKS)}, got {job!r}")
        run_id = new_run_id(job)
        kwargs = {"tenant": tenant, "requested_by": requested_by, **params}
        if job == "revert":
            kwargs = {"run_id": params["reverts"], "tenant": tenant, "requested_by": requested_by,
                      "revert_run_id": run_id}
        else:
            kwargs["run_id"] = run_id
        try:
            self._app.send_task(TASKS[job], kwargs=kwargs, retry=False)
        except Exception as exc:  # kombu raises its own and redis-py's errors; all mean "not queued"
            raise BackendUnavailable("task queue (redis)", f"{type(exc).__name__}: {exc}") from exc
        self.tracker.queued(run_id, job, tenant, params, requested_by, live=False)
        return run_id

    def close(self) -> None:
        self._app.close()

"""The admin maintenance routes on the cluster's task runner: a real Redis, a real Celery worker
process and the HTTP API with `task_runner="celery"`. A refine and its revert started through
`POST /v1/admin/maintenance/...` are run by the worker, not by the API process: the run's
`runner` (host:pid recorded with its start) is the worker's, and the decision events in the log
carry the run id the API answered with. With Redis down the POST answers 503 at once.

No Elasticsearch, Qdrant server or Kafka runs here, so the API is wired as the cluster's reader
role from adapters that do: it shares the worker's SQLite log and row store (SQLite takes readers
and writers from several processes), with its own lexical and vector indexes in folders of its
own, and never projects. The worker owns the data folder (embedded profile): it projects the log
and takes the folder's lock. Skips without `redis-server`.
"""

from __future__ import annotations

import os
import shutil
import socket
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.conftest import LiveServer, create_key, free_port
from tests.integration.test_celery_redis import Redis, Worker

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("redis-server") is None,
                                                   reason="redis-server not installed (apt-get install redis-server)")]

TENANT = "default"  # the admin key's tenant
RUN_WAIT_S = 120
BASE = [
    "Sam moved the weekly sync with the Lisbon design team to Thursdays at 10:00.",
    "Ana booked the offsite venue in Porto for the engineering summit in October.",
    "The customer portal login page now supports passkeys for enterprise accounts.",
    "Budget owners must submit headcount plans to finance by the end of the month.",
]
FILLER = [
    "The cafeteria switches to the winter menu next week, with soup on Tuesdays.",
    "Ticket OPS-118: the VPN certificate for the Berlin office expires on 12 June.",
    "Minutes: the hiring committee agreed to interview three candidates for the data role.",
    "Reminder that the parking garage is closed on Saturday for resurfacing.",
]


def documents():
    from schemas.documents import DocumentIn

    def day(d: int) -> datetime:
        return datetime(2024, 6, d, 9, tzinfo=UTC)

    docs = []
    for i, text in enumerate(BASE):  # near-duplicates, so that MemRefine has pairs to act on
        docs.append(DocumentIn(text=text, author="a", date=day(1 + i)))
        docs.append(DocumentIn(text=text.replace(".", "!"), author="b", date=day(1 + i)))
        docs.append(DocumentIn(text=text.replace(".", " as discussed."), author="c", date=day(1 + i)))
    docs += [DocumentIn(text=t, author="ops", date=day(20)) for t in FILLER]
    return docs


@pytest.fixture
def data_dir(tmp_path) -> Path:
    """A data folder with the documents in its log and projected (so a reader is not behind)."""
    from services.bootstrap import build_memory
    from services.core.caller import Caller
    from services.settings import Settings

    folder = tmp_path / "data"
    memory, lock = build_memory(Settings(data_dir=folder))
    try:
        memory.ingest(documents(), Caller(tenant=TENANT))
        memory.catch_up()
    finally:
        memory.close()
        lock.release()  # the worker takes the folder from here on
    return folder


@pytest.fixture
def redis_server(tmp_path):
    folder = tmp_path / "redis"
    folder.mkdir()
    server = Redis(free_port(), folder).start()
    yield server
    server.stop()


@contextmanager
def api_server(tmp_path: Path, data_dir: Path, redis_url: str):
    """The HTTP API in this process with the Celery task runner, wired as a cluster reader."""
    from qdrant_client import QdrantClient

    from services.adapters.event_log.sqlite import SqliteEventLog
    from services.adapters.lexical.tantivy import TantivyLexicalIndex
    from services.adapters.row_store.sqlite import SqliteRowStore
    from services.adapters.vector.qdrant_server import QdrantServerVectorIndex
    from services.api.app import create_app
    from services.bootstrap import assemble_memory, embedder_for
    from services.settings import Settings

    settings = Settings(data_dir=data_dir, indexer_poll_s=0.05, task_runner="celery", cluster={"redis_url": redis_url},
                        auth={"enabled": True, "rate_limit": "", "failed_auth_limit": ""})
    memory = assemble_memory(
        settings, SqliteEventLog(data_dir / "log.sqlite"), SqliteRowStore(data_dir / "projections" / "rows.sqlite"),
        TantivyLexicalIndex(tmp_path / "api" / "lexical"),
        QdrantServerVectorIndex(QdrantClient(path=str(tmp_path / "api" / "qdrant")), "orgmem-rows",
                                embedder_for(settings.embedder).dim),
        role="reader")
    try:
        token = create_key(data_dir)  # before the app, which would otherwise make a bootstrap key
        with LiveServer(create_app(settings, memory), free_port(), token) as server:
            yield server
    finally:
        memory.close()


@pytest.fixture
def start_worker(tmp_path, redis_server, data_dir):
    started: list[Worker] = []

    def start(name: str = "w1") -> Worker:
        # The production app (no test overrides): what `celery -A workers.maintenance.celery_app worker` runs.
        worker = Worker(name, redis_server.url, data_dir, tmp_path / f"{name}.log",
                        app="workers.maintenance.celery_app", env={"ORGMEM_INDEXER_BATCH": "64"})
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def wait_finished(server: LiveServer, run_id: str, worker: Worker) -> dict:
    deadline = time.monotonic() + RUN_WAIT_S
    while True:
        response = server.client.get(f"/v1/admin/maintenance/runs/{run_id}")
        assert response.status_code == 200, response.text
        run = response.json()
        if run["status"] not in ("queued", "running"):
            return run
        if worker.process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"run {run_id} is still {run['status']} (worker exit code {worker.process.poll()}); "
                        f"worker log:\n{worker.output()}")
        time.sleep(0.2)


def logged_events(data_dir: Path) -> list:
    from services.adapters.event_log.sqlite import SqliteEventLog

    log = SqliteEventLog(data_dir / "log.sqlite")
    try:
        found, after = [], 0
        while batch := log.read(after, 1000):
            found.extend(batch)
            after = batch[-1].position
        return found
    finally:
        log.close()


def test_refine_and_revert_started_through_the_api_run_on_the_celery_worker(tmp_path, redis_server, data_dir,
                                                                            start_worker):
    from schemas.events import (
        MaintenanceRunStarted,
        RowArchived,
        RowDerived,
        RowRestored,
        RowSuperseded,
    )

    decisions = (RowSuperseded, RowArchived, RowDerived, RowRestored)
    with api_server(tmp_path, data_dir, redis_server.url) as server:
        head_before = len(logged_events(data_dir))
        # No worker yet: the run waits in Redis, and the API shows it queued from its own tracker.
        accepted = server.client.post("/v1/admin/maintenance/refine", json={"budget_fraction": 0.9})
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["run_id"]
        assert accepted.json()["status"] == "queued" and accepted.headers["location"].endswith(f"/runs/{run_id}")
        time.sleep(1.0)
        queued = server.client.get(f"/v1/admin/maintenance/runs/{run_id}").json()
        assert queued["status"] == "queued" and queued["runner"] == "" and queued["job"] == "refine"
        assert len(logged_events(data_dir)) == head_before, "the API process ran (part of) the job itself"

        worker = start_worker()
        run = wait_finished(server, run_id, worker)
        worker_runner = f"{socket.gethostname()}:{worker.process.pid}"  # --pool solo: the task runs in it
        assert run["status"] == "finished", (run, worker.output())
        assert run["runner"] == worker_runner and run["runner"] != f"{socket.gethostname()}:{os.getpid()}"
        assert run["judge"] == "rule" and run["requested_by"].startswith("test-admin")
        assert run["params"]["budget_fraction"] == 0.9
        assert run["events"] >= 1, run

        events = logged_events(data_dir)
        started = [e.event for e in events if isinstance(e.event, MaintenanceRunStarted) and e.event.run_id == run_id]
        assert [s.runner for s in started] == [worker_runner]
        ran = [e.event for e in events if isinstance(e.event, decisions) and e.event.run_id == run_id]
        assert len(ran) == run["events"] >= 1
        assert all(e.tenant == TENANT for e in ran)

        # The revert goes the same way: checked by the API (404/409 now), executed by the worker.
        accepted = server.client.post(f"/v1/admin/maintenance/runs/{run_id}/revert")
        assert accepted.status_code == 202, accepted.text
        revert_id = accepted.json()["run_id"]
        assert accepted.json()["reverts"] == run_id and revert_id != run_id
        undo = wait_finished(server, revert_id, worker)
        assert undo["status"] == "finished" and undo["job"] == "revert", (undo, worker.output())
        assert undo["runner"] == worker_runner and undo["summary"]["reverts"] == run_id
        assert server.client.get(f"/v1/admin/maintenance/runs/{run_id}").json()["status"] == "reverted"
        events = logged_events(data_dir)
        inverse = [e.event for e in events if isinstance(e.event, decisions) and e.event.run_id == revert_id]
        assert len(inverse) == undo["events"] >= 1
        assert [e.event.runner for e in events
                if isinstance(e.event, MaintenanceRunStarted) and e.event.run_id == revert_id] == [worker_runner]

        listed = {r["run_id"]: r for r in server.client.get("/v1/admin/maintenance/runs").json()["runs"]}
        assert listed[run_id]["status"] == "reverted" and listed[revert_id]["status"] == "finished"
        assert {listed[run_id]["runner"], listed[revert_id]["runner"]} == {worker_runner}

    # The same revert task delivered again (at-least-once delivery) returns the finished revert.
    from celery import Celery

    client = Celery("orgmem-test-client", broker=redis_server.url, backend=redis_server.url)
    try:
        again = client.send_task("orgmem.revert", kwargs={"run_id": run_id, "tenant": TENANT, "requested_by": "x",
                                                          "revert_run_id": revert_id}).get(timeout=60)
    finally:
        client.close()
    assert again["run_id"] == revert_id and again["status"] == "finished" and again["runner"] == worker_runner
    assert len(logged_events(data_dir)) == len(events)  # nothing appended twice


def test_with_redis_down_a_start_answers_503_naming_the_task_queue_at_once(tmp_path, redis_server, data_dir):
    with api_server(tmp_path, data_dir, redis_server.url) as server:
        redis_server.stop()
        started = time.monotonic()
        refused = server.client.post("/v1/admin/maintenance/refine", json={"budget_fraction": 0.9})
        took = time.monotonic() - started
        assert refused.status_code == 503, refused.text
        problem = refused.json()
        assert problem["component"] == "task queue (redis)" and "task queue (redis)" in problem["detail"]
        assert took < 5.0, f"the start took {took:.1f} s with Redis down"
        assert server.client.get("/v1/admin/maintenance/runs").json()["runs"] == []  # nothing half-queued

        redis_server.start()  # back on the same port: the next start is queued again
        accepted = server.client.post("/v1/admin/maintenance/refine", json={"budget_fraction": 0.9})
        assert accepted.status_code == 202, accepted.text
        queued = server.client.get(f"/v1/admin/maintenance/runs/{accepted.json()['run_id']}").json()
        assert queued["status"] == "queued"

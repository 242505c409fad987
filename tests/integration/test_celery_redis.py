"""Celery with a real Redis and real worker processes: maintenance tasks end to end, a worker
killed mid-task (the task is redelivered and completed by a new worker), one run per tenant at
a time, Redis restarted under a running worker. Skips without `redis-server` (CI installs it)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_port

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("redis-server") is None,
                                                   reason="redis-server not installed (apt-get install redis-server)")]

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = 400


class Redis:
    def __init__(self, port: int, folder: Path):
        self.port, self.folder, self.process = port, folder, None
        self.url = f"redis://127.0.0.1:{port}/0"

    def start(self) -> Redis:
        # Append-only with fsync per write: a queued task survives a Redis restart, as in deploy/.
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes",
             "--appendfsync", "always", "--dir", str(self.folder), "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        import redis

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if redis.Redis.from_url(self.url, socket_timeout=1).ping():
                    return self
            except redis.ConnectionError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=20)


@pytest.fixture
def redis_server(tmp_path):
    server = Redis(free_port(), tmp_path).start()
    yield server
    server.stop()


@pytest.fixture
def data_dir(tmp_path):
    """A data folder whose log holds DOCUMENTS documents and whose projections are empty."""
    from schemas.documents import DocumentIn
    from services.app.memory import append_documents
    from services.bootstrap import open_event_log
    from services.core.caller import Caller
    from services.settings import Settings

    rnd = random.Random(11)
    words = "budget hiring kafka outage roadmap policy remote office vendor contract review launch".split()
    documents = [DocumentIn(text=f"note {i}: " + " ".join(rnd.choices(words, k=12)), author=rnd.choice(["ann", "bo"]),
                            kind="doc") for i in range(DOCUMENTS)]
    folder = tmp_path / "data"
    log = open_event_log(Settings(data_dir=folder))  # sealed, as every orgmem process writes it
    append_documents(log, documents, Caller())
    log.close()
    return folder


class Worker:
    """A real `celery worker` process (solo pool: tasks run in this very process, `process.pid`)."""

    def __init__(self, name: str, redis_url: str, data_dir: Path, log_path: Path,
                 app: str = "tests.integration.celery_short_visibility", env: dict[str, str] | None = None):
        env = {**os.environ, "ORGMEM_PROFILE": "embedded", "ORGMEM_DATA_DIR": str(data_dir),
               "ORGMEM_CLUSTER__REDIS_URL": redis_url, "ORGMEM_INDEXER_BATCH": "4", "HF_HUB_OFFLINE": "1",
               "ORGMEM_CLUSTER__TENANT_BUSY_RETRY_S": "1", **(env or {})}
        self.log_path = log_path
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", app, "worker",
             "--pool=solo", "--concurrency=1", "--without-gossip", "--without-mingle", "--without-heartbeat",
             "-n", f"{name}@%h", "--loglevel=INFO"],
            cwd=ROOT, env=env, stdout=open(log_path, "wb"), stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=20)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]


@pytest.fixture
def workers(tmp_path, redis_server, data_dir):
    started: list[Worker] = []

    def start(name: str) -> Worker:
        worker = Worker(name, redis_server.url, data_dir, tmp_path / f"{name}.log")
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def client(redis_server):
    from celery import Celery

    app = Celery("orgmem-test-client", broker=redis_server.url, backend=redis_server.url)
    app.conf.broker_connection_retry_on_startup = True
    yield app
    app.close()


def wait_result(result, worker: Worker, timeout: float = 120):
    try:
        return result.get(timeout=timeout, propagate=True)
    except Exception as exc:
        pytest.fail(f"task {result.id} did not complete ({type(exc).__name__}: {exc}); worker log:\n{worker.output()}")


def projections(data_dir: Path) -> dict:
    from services.bootstrap import build_memory
    from services.settings import Settings

    memory, lock = build_memory(Settings(data_dir=data_dir))
    try:
        return memory.stats()
    finally:
        memory.close()
        lock.release()


def test_health_and_rebuild_run_end_to_end_on_a_worker(workers, client, data_dir):
    worker = workers("w1")
    health = wait_result(client.send_task("orgmem.health"), worker)
    assert health["log_head"] == DOCUMENTS and health["profile"] == "embedded"
    assert health["applied_position"] == 0 and health["lag"] == DOCUMENTS  # nothing projected yet

    rebuilt = wait_result(client.send_task("orgmem.rebuild"), worker)
    assert rebuilt["events"] == DOCUMENTS
    assert rebuilt["applied_position"] == rebuilt["log_head"] == DOCUMENTS

    # A maintenance job through the worker; the same task delivered twice is one run.
    run = wait_result(client.send_task("orgmem.consolidate", kwargs={"tenant": "default"}, task_id="cons-1"), worker)
    assert run["status"] == "finished" and run["run_id"] == "consolidate-cons-1"
    again = wait_result(client.send_task("orgmem.consolidate", kwargs={"tenant": "default"}, task_id="cons-1"), worker)
    assert again["run_id"] == run["run_id"] and again["status"] == "finished"
    assert rebuilt["rows"]["active"] + rebuilt["rows"]["skipped"] == DOCUMENTS
    worker.stop()
    stats = projections(data_dir)
    assert stats["applied_position"] == stats["log_head"] > DOCUMENTS  # the run's events are projected too


def test_worker_killed_mid_task_is_redelivered_and_completed(workers, client, data_dir):
    first = workers("w1")
    result = client.send_task("orgmem.rebuild")
    deadline = time.monotonic() + 120
    while result.state != "PROGRESS":
        assert result.state in ("PENDING", "STARTED"), f"{result.state}: {first.output()}"
        assert time.monotonic() < deadline, f"no progress reported: {first.output()}"
        time.sleep(0.05)
    partial = result.info["position"]
    assert 0 < partial < DOCUMENTS
    first.kill()  # SIGKILL: no chance to acknowledge, reject or clean up

    second = workers("w2")
    rebuilt = wait_result(result, second, timeout=180)
    assert rebuilt["events"] == DOCUMENTS and rebuilt["applied_position"] == DOCUMENTS
    assert "orgmem.rebuild" in second.output() and result.id in second.output()
    second.stop()
    stats = projections(data_dir)
    assert stats["applied_position"] == DOCUMENTS
    assert stats["rows"]["active"] + stats["rows"]["skipped"] == DOCUMENTS


def test_a_tenant_with_a_run_elsewhere_waits_for_it(workers, client, redis_server, data_dir):
    import redis

    from workers.maintenance.celery_app import tenant_lock_name

    worker = workers("w1")
    assert wait_result(client.send_task("orgmem.rebuild"), worker)["events"] == DOCUMENTS
    # Another worker's run of the tenant, as the lock shows it.
    held = redis.Redis.from_url(redis_server.url).lock(tenant_lock_name("default"), timeout=120)
    assert held.acquire(blocking=False)
    result = client.send_task("orgmem.consolidate", kwargs={"tenant": "default"}, task_id="cons-busy")
    deadline = time.monotonic() + 60
    while "retries in" not in worker.output():
        assert result.state in ("PENDING", "STARTED", "RETRY"), f"{result.state}: {worker.output()}"
        assert time.monotonic() < deadline, f"the busy tenant was not deferred: {worker.output()}"
        time.sleep(0.1)
    time.sleep(1.5)  # at least one more retry while the lock is held
    assert not result.ready(), "a run started while another held the tenant"
    assert wait_result(client.send_task("orgmem.health"), worker)["log_head"] >= DOCUMENTS  # the worker stays free
    held.release()
    run = wait_result(result, worker)
    assert run["status"] == "finished" and run["run_id"] == "consolidate-cons-busy"
    assert worker.output().count("retries in") >= 2


def test_redis_restarted_under_a_running_worker(workers, client, redis_server, data_dir):
    worker = workers("w1")
    assert wait_result(client.send_task("orgmem.health"), worker)["log_head"] == DOCUMENTS
    redis_server.stop()
    time.sleep(2)  # the worker notices the broker is gone and starts reconnecting
    assert worker.process.poll() is None, worker.output()
    redis_server.start()
    again = wait_result(client.send_task("orgmem.health"), worker, timeout=120)
    assert again["log_head"] == DOCUMENTS
    assert worker.process.poll() is None

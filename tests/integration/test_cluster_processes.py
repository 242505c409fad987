"""The cluster profile as separate real processes answers like the embedded profile.

Started here: tansu (a Kafka-protocol broker), `redis-server`, and the Qdrant REST stand-in
(tests/qdrant_rest.py: qdrant-client's local mode behind Qdrant's REST routes; the one test
double, for the Qdrant server that cannot run here). Then the cluster's own entry points, each its
own process: `orgmem serve --profile cluster` (the API), two `orgmem indexer --profile cluster` in
one consumer group over a log split into two partitions by tenant (each member holds one; the
test's tenant is in partition 1, so its positions, `after=` tokens and checkpoint are lane 1's,
end to end), and a Celery worker of
`workers.maintenance.celery_app`. The rows and the lexical index are the shared-folder stores
(`cluster.stores = "shared-folder"`: SQLite and tantivy in one folder every process opens),
since no Elasticsearch runs here either.

The scenario of test_cluster_equivalence.py goes in through the API's HTTP; a consolidation is
started through the admin route and must run on the worker; then the rows' ids, the top-k ids
of the queries (now and as of a date), and the rows' states after the consolidation equal the
embedded profile's for the same documents and the same job. Data keys are the embedded data
folder's, so that both name the same documents with the same ids.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from services.core.positions import lane_for_tenant, lane_of
from tests.conftest import create_key, free_port
from tests.integration.test_celery_redis import Redis, Worker
from tests.integration.test_cluster_equivalence import QUERIES, T0, answers, documents
from tests.qdrant_rest import qdrant_rest_url
from tests.tansu import kafka_bootstrap_or_skip

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("redis-server") is None,
                                                   reason="redis-server not installed (apt-get install redis-server)")]

ROOT = Path(__file__).resolve().parents[2]
TENANT = "default"  # the admin key's, and the embedded answers' (Caller())
AS_OF = T0 + timedelta(days=50)
START_S = 120  # encoders load in four processes on a shared host; tansu's first group assignment ~15 s


@pytest.fixture(scope="module")
def kafka_bootstrap():
    pytest.importorskip("kafka")
    yield from kafka_bootstrap_or_skip()


class Orgmem:
    """`orgmem <args>` (python -m services.cli) as its own process, its output in a file."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], folder: Path):
        self.log_path = folder / f"{name}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "services.cli", *args], cwd=ROOT,
                                         env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT)

    def said(self, text: str) -> bool:
        return text in self.log_path.read_text(errors="replace")

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def stop_together(processes: list[Orgmem]) -> None:
    """SIGTERM to every member at once: one by one, each would first be handed the partition the
    one before it left (a rebalance per member)."""
    for process in processes:
        if process.proc.poll() is None:
            process.proc.send_signal(signal.SIGTERM)
    for process in processes:
        process.stop()


def wait_until(condition, what: str, processes, timeout_s: float = START_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        for process in processes:
            if process.proc.poll() is not None:
                pytest.fail(f"{process.log_path.name} exited ({process.proc.returncode}) while waiting for "
                            f"{what}:\n{process.output()}")
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out waiting for {what}:\n" + "\n".join(
                f"--- {process.log_path.name}\n{process.output()}" for process in processes))
        time.sleep(0.1)


def cluster_env(data: Path, shared: Path, kafka_bootstrap: str, topic: str, qdrant_url: str,
                data_keys: Path) -> dict[str, str]:
    """The environment of the cluster's processes over the shared-folder stores and the Qdrant
    stand-in. Data keys from `data_keys` (the embedded folder's file): the same documents get the
    same row ids as in the embedded profile."""
    return {
        "ORGMEM_PROFILE": "cluster", "ORGMEM_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1",
        "ORGMEM_CLUSTER__STORES": "shared-folder", "ORGMEM_CLUSTER__SHARED_DIR": str(shared),
        "ORGMEM_CLUSTER__KAFKA_BOOTSTRAP": kafka_bootstrap, "ORGMEM_CLUSTER__KAFKA_TOPIC": topic,
        "ORGMEM_CLUSTER__QDRANT_URL": qdrant_url,
        "ORGMEM_ERASURE__KEY_STORE": "sqlite", "ORGMEM_ERASURE__DATA_KEYS_FILE": str(data_keys),
        "ORGMEM_INDEXER_POLL_S": "0.05", "ORGMEM_EMBEDDER__ENCODER_PROCESSES": "1",
    }


def http_answers(client: httpx.Client, position: int, as_of=None) -> dict[str, list[str]]:
    found = {}
    for q in QUERIES:
        body = {"q": q, "k": 10, "after": position, **({"as_of": as_of.isoformat()} if as_of else {})}
        response = client.post("/v1/query", json=body)
        assert response.status_code == 200, response.text
        found[q] = [hit["row_id"] for hit in response.json()["rows"]]
    return found


def states(rows: dict[str, tuple]) -> dict[str, tuple]:
    return dict(sorted(rows.items()))


def test_the_cluster_processes_answer_like_the_embedded_profile(tmp_path, settings, memory, kafka_bootstrap):
    from services.bootstrap import maintenance_for

    # The embedded profile: the same documents, then the same job, in process.
    docs = documents()
    ids = memory.ingest(docs).row_ids
    memory.catch_up()
    embedded_before = {"now": answers(memory), "before": answers(memory, AS_OF)}
    consolidated = maintenance_for(settings, memory).consolidate(TENANT)
    assert consolidated.status == "finished" and consolidated.events > 0  # the job changes rows
    embedded_after = {"now": answers(memory), "before": answers(memory, AS_OF)}
    embedded_states = {rid: (row.state, row.superseded_by) for rid in set(ids) if (row := memory.stored_row(rid))}
    assert embedded_before["now"][QUERIES[0]]  # the scenario has answers at all

    data = tmp_path / "cluster-data"
    shared = tmp_path / "cluster-shared"
    with ExitStack() as stack:
        redis = Redis(free_port(), tmp_path / "redis")
        (tmp_path / "redis").mkdir()
        redis.start()
        stack.callback(redis.stop)
        qdrant_url = stack.enter_context(qdrant_rest_url(tmp_path / "qdrant"))
        env = {
            **cluster_env(data, shared, kafka_bootstrap, f"orgmem-processes-{uuid.uuid4().hex[:8]}", qdrant_url,
                          Path(settings.data_dir) / "data-keys.sqlite"),
            "ORGMEM_CLUSTER__KAFKA_PARTITIONS": "2", "ORGMEM_CLUSTER__REDIS_URL": redis.url,
            "ORGMEM_AUTH__KEY_STORE": "sqlite", "ORGMEM_AUTH__RATE_LIMIT": "", "ORGMEM_AUTH__FAILED_AUTH_LIMIT": "",
            "ORGMEM_LIMITS__READ_YOUR_WRITES_TIMEOUT_S": str(START_S),
        }
        token = create_key(data)  # before the API starts, which would otherwise make a bootstrap key
        port = free_port()
        api = Orgmem("api", ["serve", "--profile", "cluster", "--port", str(port)], env, tmp_path)
        stack.callback(api.stop)
        client = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=START_S,
                                                  headers={"Authorization": f"Bearer {token}"}))

        def api_up() -> bool:
            try:
                return client.get("/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(api_up, "the API", [api])  # it opened the shared stores and the collection first
        group = f"orgmem-indexer-{uuid.uuid4().hex[:8]}"
        indexers = [Orgmem(f"indexer-{name}", ["indexer", "--profile", "cluster", "--group", group, "--batch", "8"],
                           env, tmp_path) for name in ("a", "b")]
        stack.callback(stop_together, indexers)
        worker = Worker("w1", redis.url, data, tmp_path / "worker.log", app="workers.maintenance.celery_app", env=env)
        stack.callback(worker.stop)
        wait_until(lambda: all(i.said("following the log") for i in indexers), "both indexers", indexers)

        ingested = client.post("/v1/documents", json={"documents": [d.model_dump(mode="json") for d in docs]})
        assert ingested.status_code == 200, ingested.text
        assert ingested.json()["row_ids"] == ids  # the same documents, the same ids
        position = ingested.json()["position"]
        assert lane_of(position) == lane_for_tenant(TENANT, 2) == 1  # the tenant's partition
        cluster_before = {"now": http_answers(client, position), "before": http_answers(client, position, AS_OF)}
        assert cluster_before == embedded_before

        accepted = client.post("/v1/admin/maintenance/consolidate", json={})
        assert accepted.status_code == 202, accepted.text
        run_id = accepted.json()["run_id"]
        deadline = time.monotonic() + START_S
        while (run := client.get(f"/v1/admin/maintenance/runs/{run_id}").json())["status"] in ("queued", "running"):
            assert worker.process.poll() is None, worker.output()
            assert time.monotonic() < deadline, f"run {run_id} is still {run['status']}:\n{worker.output()}"
            time.sleep(0.2)
        assert run["status"] == "finished", (run, worker.output())
        assert run["runner"] == f"{socket.gethostname()}:{worker.process.pid}"  # the worker ran it, not the API
        assert run["events"] == consolidated.events

        # The worker's run waited for the indexers to apply its decisions before finishing.
        cluster_after = {"now": http_answers(client, position), "before": http_answers(client, position, AS_OF)}
        assert cluster_after == embedded_after
        ready = client.get("/readyz").json()
        assert ready["lanes"]["0"] == {"head": 0, "applied": 0} and ready["lanes"]["1"]["applied"] >= position
        cluster_states = {}
        for rid in set(ids):
            found = client.get(f"/v1/rows/{rid}")
            assert found.status_code == 200, found.text
            cluster_states[rid] = (found.json()["row"]["state"], found.json()["row"]["superseded_by"])
        assert states(cluster_states) == states(embedded_states)

        # One consumer group: both members alive, the log projected by whichever holds the partition;
        # the vectors went over HTTP into the stand-in's folder.
        assert all(i.proc.poll() is None for i in indexers)
        assert any(i.said("indexed") for i in indexers), [i.output() for i in indexers]
        assert (tmp_path / "qdrant" / "collection" / "orgmem-rows").is_dir()

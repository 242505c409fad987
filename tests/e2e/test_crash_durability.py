"""kill -9 of the server during a stream of ingests: every acknowledged document survives."""

import os
import signal
import threading
import time

import httpx
import pytest

from bench import server
from tests.conftest import create_key, free_port

pytestmark = pytest.mark.slow


def start_server(data_dir, port):
    return server.start_server(data_dir, port, {"ORGMEM_AUTH__RATE_LIMIT": ""})  # the check reads every row


def test_acknowledged_documents_survive_kill_9(tmp_path):
    data = tmp_path / "data"
    auth = {"Authorization": f"Bearer {create_key(data)}"}
    proc, url = start_server(data, free_port())
    acknowledged: list[str] = []
    stop = threading.Event()

    def stream(client_id):
        with httpx.Client(timeout=10, headers=auth) as client:
            i = 0
            while not stop.is_set():
                docs = [{"text": f"client {client_id} decision number {i}-{j}: budget line {i * 7 + j}",
                         "author": f"writer{client_id}@corp.example", "date": "2025-05-01"} for j in range(5)]
                try:
                    response = client.post(url + "/v1/documents", json={"documents": docs})
                except httpx.HTTPError:
                    return  # the server died mid-request: that batch was never acknowledged
                if response.status_code == 200:
                    acknowledged.extend(response.json()["row_ids"])
                i += 1

    clients = [threading.Thread(target=stream, args=(c,)) for c in range(3)]
    for c in clients:
        c.start()
    # Kill mid-stream once enough was acknowledged (a loaded machine acknowledges slowly), a little
    # later than that so the kill lands during requests in flight.
    deadline = time.monotonic() + 120
    while len(acknowledged) < 60 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)  # no shutdown hooks, no flush
    proc.wait()
    stop.set()
    for c in clients:
        c.join()
    assert len(acknowledged) >= 15, "the stream acknowledged too little to test anything"

    proc, url = start_server(data, free_port())
    try:
        deadline = time.monotonic() + 600  # the restarted indexer embeds what the killed one had not
        while time.monotonic() < deadline:
            stats = httpx.get(url + "/v1/stats", headers=auth).json()
            if stats["applied_position"] == stats["log_head"]:
                break
            time.sleep(0.5)
        missing = [rid for rid in acknowledged if httpx.get(f"{url}/v1/rows/{rid}", headers=auth).status_code != 200]
        assert missing == [], f"{len(missing)} of {len(acknowledged)} acknowledged documents lost"
        stats = httpx.get(url + "/v1/stats", headers=auth).json()
        assert stats["applied_position"] == stats["log_head"]
        assert stats["rows"]["active"] >= len(set(acknowledged))
    finally:
        proc.terminate()
        proc.wait(timeout=30)

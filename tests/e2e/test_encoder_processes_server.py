"""The real server with two encoder processes: a backlog posted through the API is encoded by
them, and they end with the server, whether it is stopped (SIGTERM) or killed (SIGKILL)."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from bench import server
from tests.adapters.test_encoder_processes import encoder_workers, wait_gone
from tests.conftest import create_key, free_port

pytestmark = pytest.mark.slow


def ingest_backlog(url: str, auth: dict, prefix: str, n: int = 64) -> None:
    docs = [{"text": f"{prefix} decision {i}: the budget line {i * 7} moves to team {i % 5}",
             "author": f"w{i % 3}@corp.example", "date": "2025-05-01"} for i in range(n)]
    assert httpx.post(url + "/v1/documents", json={"documents": docs}, headers=auth, timeout=60).status_code == 200
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        stats = httpx.get(url + "/v1/stats", headers=auth).json()
        if stats["applied_position"] == stats["log_head"]:
            return
        time.sleep(0.2)
    raise AssertionError("the backlog was not indexed")


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
def test_encoder_processes_end_with_the_server(tmp_path, stop):
    data = tmp_path / "data"
    auth = {"Authorization": f"Bearer {create_key(data)}"}
    proc, url = server.start_server(data, free_port(), {"ORGMEM_EMBEDDER__ENCODER_PROCESSES": "2"})
    try:
        assert encoder_workers(proc.pid) == []  # none until a backlog comes
        ingest_backlog(url, auth, "first")
        workers = encoder_workers(proc.pid)
        assert len(workers) == 2
        assert httpx.get(url + "/v1/stats", headers=auth).json()["rows"]["active"] == 64
        os.kill(proc.pid, stop)
        proc.wait(timeout=60)
        assert wait_gone(workers) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

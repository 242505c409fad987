"""The embedded server seals its vector graph by itself: documents ingested over HTTP end up in
the graph, built in a child process, and /metrics and `orgmem stats` say so (issue 17)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def settings(tmp_path):
    from services.settings import Settings

    return Settings(data_dir=tmp_path / "data", indexer_poll_s=0.05, vector_seal_rows=5, vector_seal_check_s=0.2,
                    auth={"enabled": True, "rate_limit": "", "failed_auth_limit": ""})


def gauges(text: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^(orgmem_vector_[a-z_]+(?:\{[^}]*\})?) (\S+)$", text, re.M)}


def test_the_server_seals_ingested_rows_into_the_graph_and_reports_it(live_server, memory, settings):
    documents = [{"text": f"Release note {i}: the build pipeline moved to runner pool {i}.", "author": "ops@corp.example"}
                 for i in range(8)]
    answer = live_server.client.post("/v1/documents", json={"documents": documents})
    assert answer.status_code == 200, answer.text
    assert memory.wait_for(answer.json()["position"], 60)
    before = gauges(live_server.client.get("/metrics").text)
    assert before["orgmem_vector_rows_in_graph"] + before["orgmem_vector_rows_searched_exactly"] == 8
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        now = gauges(live_server.client.get("/metrics").text)
        if now['orgmem_vector_builds{outcome="done"}'] >= 1 and not now["orgmem_vector_builds_running"]:
            break
        time.sleep(0.2)
    else:
        raise AssertionError(f"no build finished: {now}")
    assert now["orgmem_vector_rows_in_graph"] == 8 and now["orgmem_vector_rows_searched_exactly"] == 0
    assert now["orgmem_vector_sealed_shards"] == 1 and now["orgmem_vector_shard_hosts_resident_bytes"] > 0
    assert now["orgmem_vector_last_build_duration_seconds"] > 0
    assert abs(now["orgmem_vector_last_build_timestamp_seconds"] - time.time()) < 600
    found = live_server.client.post("/v1/query", json={"q": "runner pool 3 build pipeline"})
    assert found.status_code == 200, found.text
    assert "runner pool 3" in json.dumps(found.json())


def test_orgmem_stats_names_the_rows_in_the_graph(tmp_path):
    env = dict(os.environ, ORGMEM_DATA_DIR=str(tmp_path / "data"))
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": f"Quarterly note {i} on vendor contracts.", "author": "a@corp.example"}) + "\n"
                            for i in range(3)))
    cli = [sys.executable, "-m", "services.cli.main"]
    subprocess.run([*cli, "ingest", "--jsonl", str(docs)], cwd=ROOT, env=env, check=True, capture_output=True)
    stats = json.loads(subprocess.run([*cli, "stats"], cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout)
    assert stats["vector_graph"]["rows_searched_exactly"] == 3 and stats["vector_graph"]["rows_in_graph"] == 0
    subprocess.run([*cli, "optimize"], cwd=ROOT, env=env, check=True, capture_output=True)
    stats = json.loads(subprocess.run([*cli, "stats"], cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout)
    assert stats["vector_graph"]["rows_in_graph"] == 3 and stats["vector_graph"]["rows_searched_exactly"] == 0

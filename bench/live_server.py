"""The live benchmark's side of a real server (bench/live.py, bench/live_store.py): start and stop
`orgmem serve`, create its clients' keys, sample its state (/readyz, /metrics, /v1/stats, RSS),
time a query through HTTP, measure the data folder's disk."""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from bench import live_report as lr

# /metrics names of the live vector graph (services/api/metrics.py); "n/a" is printed where a
# server lacks them (an older one, or a vector index without a live graph).
GRAPH_ROWS_METRIC = "orgmem_vector_rows_in_graph"
EXACT_ROWS_METRIC = "orgmem_vector_rows_searched_exactly"
BUILD_RUNNING_METRIC = "orgmem_vector_builds_running"
LAST_BUILD_SECONDS_METRIC = "orgmem_vector_last_build_duration_seconds"
BUILDS_METRIC = "orgmem_vector_builds"  # by outcome; summed
# Per key; three keys (writer, reader, admin) each stay far below it. The default (50/second;
# 1500/minute) would throttle the query client, which sends its questions back to back.
RATE_LIMIT = "500/second"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """`orgmem serve` on a data folder. Its stderr goes to a file beside the folder: a pipe nobody
    reads would fill during an hour-long run and stall the server."""

    def __init__(self, data: Path, timeout_s: float = 300.0, cwd: Path | None = None):
        """cwd: the source tree whose code the server runs (`python -m` imports from there first)."""
        self.port, self.log = free_port(), data.parent / f"{data.name}.server.log"
        env = {**os.environ, "ORGMEM_AUTH__RATE_LIMIT": RATE_LIMIT, "ORGMEM_AUTH__BOOTSTRAP_ADMIN_KEY": "false"}
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "services.cli", "--log-level", "WARNING", "serve", "--data", str(data),
                 "--host", "127.0.0.1", "--port", str(self.port)], env=env, stdout=subprocess.DEVNULL, stderr=err,
                cwd=cwd)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server did not start within {timeout_s:g} s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def create_keys(data: Path) -> dict[str, str]:
    """One key per client role of the default tenant; the tokens."""
    from services.bootstrap import key_store_for
    from services.settings import Settings

    store = key_store_for(Settings(data_dir=data))
    try:
        return {role: store.create("default", f"live-{role}", role, "bench", unrestricted=role == "admin")[1]
                for role in ("admin", "writer", "reader")}
    finally:
        store.close()


def client(url: str, token: str) -> httpx.Client:
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=120)


def sample(http: httpx.Client, pid: int) -> dict:
    """The server's state now: rows, log head and checkpoint, vector graph figures, RSS."""
    ready = http.get("/readyz").json()
    metrics = lr.parse_metrics(http.get("/metrics").text)
    stats = http.get("/v1/stats").json()
    count = lambda name: None if (v := lr.metric(metrics, name)) is None else int(v)  # noqa: E731
    return {"t": time.monotonic(), "rows": stats["rows"].get("active", 0), "head": ready["log_head"],
            "applied": ready["applied_position"], "status": ready["status"],
            "graph_rows": count(GRAPH_ROWS_METRIC), "exact_rows": count(EXACT_ROWS_METRIC),
            "building": lr.metric(metrics, BUILD_RUNNING_METRIC),
            "last_build_s": lr.metric(metrics, LAST_BUILD_SECONDS_METRIC), "builds": count(BUILDS_METRIC),
            "rss": lr.rss_bytes(pid), "tree_rss": lr.tree_rss_bytes(pid), **cpu_now(pid)}


def cpu_now(pid: int) -> dict:
    """CPU seconds so far: the server's own threads, its child processes (encoder workers, shard
    hosts, graph builds), and this benchmark's process (its clients share the machine too)."""
    tree = lr.tree_cpu_seconds(pid)
    mine = os.times()
    return {"cpu_server": tree and tree[0], "cpu_children": tree and tree[1], "cpu_client": mine.user + mine.system}


def timed_query(http: httpx.Client, question: str, preset: str | None,
                extra: dict | None = None) -> tuple[float, float, float, int, dict]:
    body = {"q": question[:4096], **({"preset": preset} if preset else {}), **(extra or {})}
    started = time.monotonic()
    response = http.post("/v1/query", json=body)
    ended = time.monotonic()
    timings = response.json().get("timings_ms", {}) if response.status_code == 200 else {}
    return started, ended, (ended - started) * 1000, response.status_code, timings


def stage_p50(queries: list[tuple], stage: str | None) -> float | None:
    """The median of one stage of the read path (`timings_ms`), or of all of them (None): the
    time inside retrieval, beside the wall time that adds HTTP, the response and waiting for a core."""
    values = [q[4][stage] if stage else sum(q[4].values()) for q in queries if (stage in q[4] if stage else q[4])]
    value = lr.percentile(values, 50)
    return None if value is None else round(value, 1)


# Stages that run on the lexical worker, overlapping the query's own thread: not part of its sum.
OVERLAPPING = ("lexical", "rows_lexical")


def stage_medians(samples: list[tuple[float, dict[str, float]]]) -> dict[str, float]:
    """(client ms, `timings_ms`) per query -> p50, p95, each stage's median, and "outside
    retrieval": the client's time less the stages on the query's own thread (HTTP, the
    response's rendering, waiting for a core, the client itself)."""
    totals = [t for t, _ in samples]
    stages: dict[str, list[float]] = {}
    outside = []
    for total, timings in samples:
        for name, ms in timings.items():
            stages.setdefault(name, []).append(ms)
        outside.append(total - sum(ms for name, ms in timings.items() if name not in OVERLAPPING))
    if not samples:
        return {}
    return {"p50": statistics.median(totals), "p95": lr.percentile(totals, 95),
            **{name: statistics.median(v) for name, v in stages.items()}, "outside retrieval": statistics.median(outside)}


def stages_of(window: list[tuple]) -> dict[str, float]:
    """Each stage's median over the window's answered queries, and the time outside them."""
    return {name: round(ms, 2) for name, ms in stage_medians([(q[2], q[4]) for q in window if q[4]]).items()}


def stages_line(row: dict) -> str:
    """One line under a table line: where a query's time went, live and with nothing ingested."""
    def cells(stages: dict | None) -> str:
        return ", ".join(f"{name} {ms:.1f}" for name, ms in (stages or {}).items() if name not in ("p50", "p95")) or "-"
    return f"  stage p50 ms, live: {cells(row.get('stages_ms'))}; nothing ingested: {cells(row.get('quiet_stages_ms'))}"


def disk_parts(data: Path) -> dict[str, float | None]:
    """MiB on disk: the whole data folder and each of its top-level entries (log, projections, cache)."""
    parts = {"total": lr.mib(lr.disk_bytes(data))}
    for entry in sorted(data.iterdir()):
        size = lr.disk_bytes(entry) if entry.is_dir() else entry.lstat().st_blocks * 512
        parts[entry.name] = lr.mib(size)
    return parts

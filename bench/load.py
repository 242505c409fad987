"""Load test on loopback: several clients mix ingests and queries against the embedded server,
then the server is killed with SIGKILL mid-load and every acknowledged document must be there
after a restart.

Bounded in time and count, and stops by itself:
    python -m bench.load [--duration 180] [--clients 4] [--max-requests 50000] [--kill-after 20]

The server runs as a subprocess (`orgmem serve`) on 127.0.0.1 with a fresh data folder in a
temporary directory; nothing else is contacted. Figures go to stdout and bench/out/load/.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench import server

WORDS = ("budget pricing launch roadmap hiring security audit vendor contract migration outage policy remote "
         "office travel expenses onboarding database latency customer churn forecast quarter review approval "
         "deadline incident payroll laptop compliance retention").split()
OUT = Path(__file__).resolve().parent / "out" / "load"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def start_server(data: Path, port: int, timeout_s: float = 180.0) -> tuple[subprocess.Popen, str]:
    """`orgmem serve` on `data`, once /healthz answers: the process and its URL."""
    # The limiter stays on the path (its cost is part of the figures) but never binds here.
    return server.start_server(data, port, timeout_s=timeout_s, env={
        "ORGMEM_AUTH__RATE_LIMIT": "100000/second", "ORGMEM_AUTH__BOOTSTRAP_ADMIN_KEY": "false"})


def document(rng: random.Random, client: int, i: int) -> dict:
    return {"text": f"{' '.join(rng.sample(WORDS, rng.randint(6, 14)))} (client {client}, item {i})",
            "author": f"user{rng.randint(0, 20)}@corp.example", "kind": rng.choice(["email", "ticket", "doc"]),
            "date": f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}", "thread": rng.choice(WORDS),
            "acl": [] if rng.random() < 0.7 else [rng.choice(["eng", "sales", "legal"])]}


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.latency: dict[str, list[float]] = {"ingest": [], "query": []}
        self.statuses: dict[str, int] = {}
        self.errors: list[str] = []
        self.acknowledged: list[str] = []

    def record(self, op: str, seconds: float, status: int | str, row_ids: list[str] | None = None) -> None:
        with self.lock:
            self.latency[op].append(seconds)
            self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1
            if status != 200:
                self.errors.append(f"{op}: {status}")
            if row_ids:
                self.acknowledged.extend(row_ids)


def client_loop(url: str, token: str, client: int, stop: threading.Event, budget: list[int], rec: Recorder,
                ingest_share: float, dying: bool = False) -> None:
    rng = random.Random(client)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        i = 0
        while not stop.is_set():
            with rec.lock:
                if budget[0] <= 0:
                    return
                budget[0] -= 1
            i += 1
            started = time.perf_counter()
            try:
                if rng.random() < ingest_share:
                    response = http.post("/v1/documents", json={"documents": [document(rng, client, i) for _ in range(2)]})
                    ids = response.json()["row_ids"] if response.status_code == 200 else None
                    rec.record("ingest", time.perf_counter() - started, response.status_code, ids)
                else:
                    body = {"q": " ".join(rng.sample(WORDS, rng.randint(1, 3))), "k": rng.choice([5, 10, 20]),
                            "selector": rng.choice(["rrf", "pursuit"])}
                    if rng.random() < 0.3:
                        body["as_of"] = f"2025-{rng.randint(1, 12):02d}-15"
                    response = http.post("/v1/query", json=body)
                    rec.record("query", time.perf_counter() - started, response.status_code)
            except httpx.HTTPError as exc:
                if dying:
                    return  # the server was killed under this request: it was never acknowledged
                rec.record("query", time.perf_counter() - started, type(exc).__name__)


def percentiles(values: list[float]) -> dict:
    if not values:
        return {}
    ordered = sorted(values)
    pick = lambda p: ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]  # noqa: E731
    return {"n": len(values), "p50_ms": round(pick(50) * 1000, 1), "p95_ms": round(pick(95) * 1000, 1),
            "p99_ms": round(pick(99) * 1000, 1), "max_ms": round(ordered[-1] * 1000, 1)}


def wait_indexed(url: str, headers: dict, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    stats = {}
    while time.monotonic() < deadline:
        stats = httpx.get(url + "/v1/stats", headers=headers, timeout=30).json()
        if stats["applied_position"] >= stats["log_head"]:
            return stats
        time.sleep(1)
    return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=180.0, help="seconds of mixed load")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--max-requests", type=int, default=50_000)
    parser.add_argument("--ingest-share", type=float, default=0.2)
    parser.add_argument("--kill-after", type=float, default=20.0, help="seconds of load before the SIGKILL")
    parser.add_argument("--catch-up-timeout", type=float, default=600.0)
    args = parser.parse_args(argv)

    from services.adapters.key_store.sqlite import SqliteKeyStore

    with tempfile.TemporaryDirectory(prefix="orgmem-load-") as tmp:
        data = Path(tmp) / "data"
        store = SqliteKeyStore(data / "keys.sqlite")
        admin = store.create("default", "load-admin", "admin", "bench", unrestricted=True)[1]
        tokens = [store.create("default", f"client{c}", "writer", "bench", groups=["eng"])[1] for c in range(args.clients)]
        store.close()
        admin_headers = {"Authorization": f"Bearer {admin}"}
        proc, url = start_server(data, free_port())
        report: dict = {"clients": args.clients, "duration_s": args.duration, "ingest_share": args.ingest_share,
                        "cpus": os.cpu_count()}
        try:
            # Phase 1: mixed load, RSS sampled every 5 s.
            rec, stop, budget = Recorder(), threading.Event(), [args.max_requests]
            rss: list[tuple[float, float]] = []
            threads = [threading.Thread(target=client_loop, args=(url, tokens[c], c, stop, budget, rec, args.ingest_share))
                       for c in range(args.clients)]
            began = time.monotonic()
            for t in threads:
                t.start()
            while time.monotonic() - began < args.duration and any(t.is_alive() for t in threads):
                value = rss_mib(proc.pid)
                if value is not None:
                    rss.append((round(time.monotonic() - began, 1), round(value, 1)))
                time.sleep(5)
            stop.set()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - began
            total = sum(len(v) for v in rec.latency.values())
            half = len(rss) // 2
            first, second = [v for _, v in rss[1:half]], [v for _, v in rss[half:]]
            report["load"] = {
                "requests": total, "seconds": round(elapsed, 1), "throughput_rps": round(total / elapsed, 1),
                "ingest": percentiles(rec.latency["ingest"]), "query": percentiles(rec.latency["query"]),
                "documents_acknowledged": len(rec.acknowledged), "statuses": rec.statuses, "errors": len(rec.errors),
                "rss_mib": rss, "rss_median_first_half_mib": statistics.median(first) if first else None,
                "rss_median_second_half_mib": statistics.median(second) if second else None,
            }
            report["load"]["index_lag_at_end"] = (lambda s: s["log_head"] - s["applied_position"])(
                httpx.get(url + "/v1/stats", headers=admin_headers, timeout=30).json())
            print(json.dumps({k: v for k, v in report["load"].items() if k != "rss_mib"}, indent=1), flush=True)

            # Phase 2: ingest-heavy load, SIGKILL mid-load, restart, every acknowledged row present.
            crash, stop, budget = Recorder(), threading.Event(), [args.max_requests]
            threads = [threading.Thread(target=client_loop, args=(url, tokens[c], 100 + c, stop, budget, crash, 0.7, True))
                       for c in range(args.clients)]
            for t in threads:
                t.start()
            time.sleep(args.kill_after)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            stop.set()
            for t in threads:
                t.join()
            acknowledged = set(rec.acknowledged) | set(crash.acknowledged)
            proc, url = start_server(data, free_port())
            restarted = time.monotonic()
            stats = wait_indexed(url, admin_headers, args.catch_up_timeout)
            missing = [rid for rid in sorted(acknowledged)
                       if httpx.get(f"{url}/v1/rows/{rid}", headers=admin_headers, timeout=30).status_code != 200]
            report["crash"] = {"acknowledged_before_kill": len(crash.acknowledged), "acknowledged_total": len(acknowledged),
                               "catch_up_s": round(time.monotonic() - restarted, 1), "stats_after_restart": stats,
                               "missing_after_restart": len(missing)}
            print(json.dumps(report["crash"], indent=1), flush=True)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "report.json").write_text(json.dumps(report, indent=1))
    load, crash_ = report["load"], report["crash"]
    print(f"\n{load['requests']} requests in {load['seconds']} s from {args.clients} clients = {load['throughput_rps']} req/s; "
          f"query p50/p95/p99 {load['query'].get('p50_ms')}/{load['query'].get('p95_ms')}/{load['query'].get('p99_ms')} ms; "
          f"ingest p50/p95/p99 {load['ingest'].get('p50_ms')}/{load['ingest'].get('p95_ms')}/{load['ingest'].get('p99_ms')} ms; "
          f"errors {load['errors']}; RSS median {load['rss_median_first_half_mib']} -> {load['rss_median_second_half_mib']} MiB; "
          f"kill -9: {crash_['acknowledged_total']} acknowledged, {crash_['missing_after_restart']} missing after restart")
    return 0 if load["errors"] == 0 and crash_["missing_after_restart"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

"""Abuse on loopback: what another key's query sees while one party waits on `after`, sends the
most expensive queries the limits allow, or floods bad credentials (issue 16, findings 7 and 11).

Bounded in time and count, and stops by itself:
    python -m bench.abuse [--duration 20] [--documents 400] [--max-requests 20000]

The server runs as a subprocess (`orgmem serve`, default limits) on 127.0.0.1 with a fresh data
folder in a temporary directory; nothing else is contacted. A victim key queries sequentially
through a quiet baseline and then through each load, every phase `--duration` seconds; the table
puts its p50/p95/p99 beside the baseline, with the statuses both sides got.

The `after` waiters wait on a position that exists but is not indexed: a document appended to
the log by another process (as `orgmem connect --no-index` does), which the server's indexer
only reads at its next poll (set to an hour here); an ingest over the API at the end of the
phase wakes it, and the waiters are answered.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from bench import server
from bench.load import WORDS, document, free_port, percentiles

OUT = Path(__file__).resolve().parent / "out" / "abuse"
WAITERS, WAITER_KEYS, HEAVY_CLIENTS, FLOOD_CLIENTS = 50, 5, 8, 8


class Tally:
    def __init__(self, budget: int):
        self.lock = threading.Lock()
        self.statuses: Counter = Counter()
        self.latency: list[float] = []
        self.budget = budget
        self.in_flight = 0

    def take(self) -> bool:
        with self.lock:
            self.budget -= 1
            return self.budget >= 0

    def record(self, status, seconds: float | None = None) -> None:
        with self.lock:
            self.statuses[str(status)] += 1
            if seconds is not None and status == 200:
                self.latency.append(seconds)


def call(http: httpx.Client, tally: Tally, body: dict, headers: dict | None = None) -> int | str:
    started = time.perf_counter()
    with tally.lock:
        tally.in_flight += 1
    try:
        status: int | str = http.post("/v1/query", json=body, headers=headers).status_code
    except httpx.HTTPError as exc:
        status = type(exc).__name__
    with tally.lock:
        tally.in_flight -= 1
    tally.record(status, time.perf_counter() - started)
    return status


def victim_loop(url: str, token: str, stop: threading.Event, tally: Tally) -> None:
    rng = random.Random(7)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        while not stop.is_set() and tally.take():
            started = time.monotonic()
            call(http, tally, {"q": " ".join(rng.sample(WORDS, 2)), "k": 10})
            time.sleep(max(0.0, 0.1 - (time.monotonic() - started)))  # 10 a second: under its own rate limit


def waiter_loop(url: str, token: str, position: int, stop: threading.Event, tally: Tally) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        while not stop.is_set() and tally.take():
            if call(http, tally, {"q": "budget", "after": position}) == 429:
                time.sleep(0.2)  # over the key's in-flight cap: try again, as a client would


def heavy_loop(url: str, token: str, seed: int, stop: threading.Event, tally: Tally, limits: dict) -> None:
    rng = random.Random(seed)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        while not stop.is_set() and tally.take():
            words = " ".join(rng.choice(WORDS) for _ in range(600))[:4096]  # the longest question accepted
            call(http, tally, {"q": words, "k": limits["max_k"], "candidates": limits["max_candidates"],
                               "selector": rng.choice(["pursuit", "coverage", "rrf"])})


def flood_loop(url: str, seed: int, stop: threading.Event, tally: Tally) -> None:
    rng = random.Random(seed)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
    with httpx.Client(base_url=url, timeout=60) as http:
        while not stop.is_set() and tally.take():
            forged = f"om_{rng.getrandbits(48):012x}_" + "".join(rng.choice(alphabet) for _ in range(43))
            token = rng.choice([forged, "not-a-key", "a.b.c"])
            call(http, tally, {"q": "budget"}, {"Authorization": f"Bearer {token}"})


def phase(name: str, url: str, victim: str, duration: float, max_requests: int, attack=None) -> dict:
    """Run the victim (and the attack, started first and given a second to bite) for `duration`."""
    stop, mine, theirs = threading.Event(), Tally(max_requests), Tally(max_requests)
    attackers = attack(stop, theirs) if attack else []
    for t in attackers:
        t.start()
    if attackers:
        time.sleep(1.0)
    v = threading.Thread(target=victim_loop, args=(url, victim, stop, mine))
    v.start()
    v.join(timeout=duration)
    stop.set()
    v.join()
    return {"load": name, "victim": percentiles(mine.latency), "victim_statuses": dict(mine.statuses),
            "attacker_waiting_at_end": theirs.in_flight, "_tally": theirs, "_threads": attackers}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per phase (5 phases)")
    parser.add_argument("--documents", type=int, default=400)
    parser.add_argument("--max-requests", type=int, default=20_000, help="per side and phase")
    args = parser.parse_args(argv)

    from schemas.documents import DocumentIn
    from services.adapters.event_log.sqlite import SqliteEventLog
    from services.adapters.key_store.sqlite import SqliteKeyStore
    from services.app.memory import append_documents
    from services.core.caller import Caller
    from services.settings import LimitSettings

    limits = LimitSettings().model_dump()
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="orgmem-abuse-") as tmp:
        data = Path(tmp) / "data"
        store = SqliteKeyStore(data / "keys.sqlite")
        admin = store.create("default", "abuse-admin", "admin", "bench", unrestricted=True)[1]
        victim = store.create("default", "victim", "reader", "bench")[1]
        waiters = [store.create("default", f"waiter{i}", "reader", "bench")[1] for i in range(WAITER_KEYS)]
        heavy = store.create("default", "heavy", "reader", "bench")[1]
        store.close()
        admin_http = httpx.Client(headers={"Authorization": f"Bearer {admin}"}, timeout=120)
        proc, url = server.start_server(data, free_port(), env={
            "ORGMEM_AUTH__BOOTSTRAP_ADMIN_KEY": "false", "ORGMEM_INDEXER_POLL_S": "3600"})
        try:
            rng = random.Random(1)
            for start in range(0, args.documents, 100):
                docs = [document(rng, 0, i) for i in range(start, min(start + 100, args.documents))]
                position = admin_http.post(url + "/v1/documents", json={"documents": docs}).json()["position"]
            ready = admin_http.post(url + "/v1/query", json={"q": "budget", "after": position})
            assert ready.status_code == 200, ready.text
            for _ in range(20):  # warm the encoder and the caches before measuring anything
                admin_http.post(url + "/v1/query", json={"q": " ".join(rng.sample(WORDS, 2)), "k": 10})

            d, n = args.duration, args.max_requests
            rows.append(phase("quiet baseline", url, victim, d, n))

            # A position in the log that the server has not indexed: appended by another process.
            log = SqliteEventLog(data / "log.sqlite")
            pending = append_documents(log, [DocumentIn(text="appended by another process")],
                                       Caller(tenant="default")).position
            log.close()
            rows.append(phase(f"{WAITERS} `after` waiters ({WAITER_KEYS} keys)", url, victim, d, n,
                              lambda stop, t: [threading.Thread(target=waiter_loop, args=(
                                  url, waiters[i % WAITER_KEYS], pending, stop, t)) for i in range(WAITERS)]))
            admin_http.post(url + "/v1/documents", json={"documents": [document(rng, 0, 10**6)]})  # wakes the indexer
            rows.append(phase(f"expensive queries ({HEAVY_CLIENTS} clients, 1 key)", url, victim, d, n,
                              lambda stop, t: [threading.Thread(target=heavy_loop, args=(
                                  url, heavy, i, stop, t, limits)) for i in range(HEAVY_CLIENTS)]))
            rows.append(phase(f"bad-credential flood ({FLOOD_CLIENTS} clients, 1 address)", url, victim, d, n,
                              lambda stop, t: [threading.Thread(target=flood_loop, args=(url, i, stop, t))
                                               for i in range(FLOOD_CLIENTS)]))
            rows.append(phase("quiet again", url, victim, d, n))
            for row in rows:  # every attacker has been told to stop; the waiters were answered
                for t in row.pop("_threads"):
                    t.join(timeout=90)
                tally = row.pop("_tally")
                row["attacker_statuses"], row["attacker"] = dict(tally.statuses), percentiles(tally.latency)
        finally:
            admin_http.close()
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except Exception:
                    proc.kill()
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "report.json").write_text(json.dumps(rows, indent=1))
    print(f"\nvictim: one reader key, sequential queries (k=10, at most 10/s), {args.duration:g} s per phase, "
          f"{args.documents} documents, {os.cpu_count()} CPUs\n")
    base = rows[0]["victim"].get("p50_ms") or 1
    head = (f"{'load':<44} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'x p50':>6}  {'victim':<12} "
            "attacker statuses (in flight at phase end; attacker p50 ms)")
    print(head + "\n" + "-" * len(head))
    for row in rows:
        v, a = row["victim"], row["attacker"]
        extra = f" ({row['attacker_waiting_at_end']} in flight; p50 {a['p50_ms']})" if a else ""
        print(f"{row['load']:<44} {v.get('n', 0):>5} {v.get('p50_ms', '-'):>8} {v.get('p95_ms', '-'):>8} "
              f"{v.get('p99_ms', '-'):>8} {v.get('p50_ms', 0) / base:>6.1f}  {json.dumps(row['victim_statuses']):<12} "
              f"{json.dumps(row['attacker_statuses'])}{extra}")
    refused = sum(c for r in rows for s, c in r["victim_statuses"].items() if s != "200")
    return 0 if refused == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

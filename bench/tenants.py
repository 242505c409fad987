"""Scale-out by tenant: one tenant's bulk import beside another tenant's trickle, on a real
Kafka-protocol broker, with the cluster's real indexer processes, in one run.

    .venv/bin/python -m bench.tenants [--bulk 1500] [--trickle 30] [--every 0.5]

A script, not a timed test (issue 19). Each configuration gets a fresh topic and folder: tansu
(memory storage), the Qdrant REST stand-in (tests/qdrant_rest.py: qdrant-client's local mode
behind Qdrant's REST routes, not a Qdrant server) and `orgmem indexer --profile cluster`
processes over `cluster.stores=shared-folder` (SQLite rows and tantivy in one folder). Once the
indexers have joined the group (a warm-up document per tenant is projected), tenant `sales`
appends --bulk documents at once (batches of 50) and tenant `ops` one document every --every
seconds, --trickle times. Printed per configuration: the time until every document is projected
(and documents/s), and how long each `ops` document waited from its append until the projections'
checkpoint of its lane covered it (p50, max). Then both tenants import --bulk/2 documents each at
once: documents/s until both are projected (one tenant's documents stay in one partition, so a
second indexer process adds throughput only when a second tenant has work). The configurations:

    1 partition,  1 indexer process   the log before partitions: ops waits behind the import
    2 partitions, 1 indexer process   the feed takes the lanes in turn
    2 partitions, 2 indexer processes one partition each: both cores encode

Every indexer runs one encoder thread (ORGMEM_EMBEDDER__THREADS=1), so the last line's extra
throughput is the second process's core; the first line is repeated with two threads as the
one-process baseline that uses both cores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path

from schemas.documents import DocumentIn
from services.core.caller import Caller

WORK = Path(tempfile.gettempdir()) / "orgmem-tenants"
SALES, OPS = "sales", "ops"  # lanes 0 and 1 of a two-partition log
CONFIGS = (("1 partition, 1 process, 2 threads", 1, 1, 2), ("1 partition, 1 process", 1, 1, 1),
           ("2 partitions, 1 process", 2, 1, 1), ("2 partitions, 2 processes", 2, 2, 1))


def documents(tenant: str, n: int, start: int = 0) -> list[DocumentIn]:
    topics = ("the renewal quote", "the discount approval", "the contract start date", "the invoice terms")
    return [DocumentIn(text=f"{tenant} record {i}: {topics[i % 4]} for account {i % 97} changed on review {i}",
                       author=f"{tenant}-{i % 7}@corp.example", kind="ticket") for i in range(start, start + n)]


def indexer_env(folder: Path, bootstrap: str, qdrant_url: str, partitions: int, threads: int) -> dict:
    return {**os.environ, "ORGMEM_PROFILE": "cluster", "ORGMEM_DATA_DIR": str(folder / "data"),
            "ORGMEM_CLUSTER__STORES": "shared-folder", "ORGMEM_CLUSTER__SHARED_DIR": str(folder / "shared"),
            "ORGMEM_CLUSTER__KAFKA_BOOTSTRAP": bootstrap, "ORGMEM_CLUSTER__KAFKA_TOPIC": "orgmem-bench",
            "ORGMEM_CLUSTER__KAFKA_PARTITIONS": str(partitions), "ORGMEM_CLUSTER__QDRANT_URL": qdrant_url,
            "ORGMEM_ERASURE__KEY_STORE": "sqlite", "ORGMEM_EMBEDDER__THREADS": str(threads),
            "ORGMEM_EMBEDDER__ENCODER_PROCESSES": "1", "ORGMEM_INDEXER_POLL_S": "0.05"}


def wait_covered(rows, position: int, timeout_s: float) -> float | None:
    """Seconds until the row store's checkpoint of the position's lane reaches it."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        if rows.applied_positions().covers(position):
            return time.monotonic() - started
        time.sleep(0.02)
    return None


def trickle(log, rows, args, append_documents) -> list[float | None]:
    """Append an ops document every --every seconds while the import runs; each one's wait from
    its append until its lane's checkpoint covers it (None: not within 600 s)."""
    sent: list[tuple[float, int]] = []
    waits: dict[int, float] = {}
    next_at = time.monotonic()
    while len(sent) < args.trickle or len(waits) < len(sent):
        now = time.monotonic()
        if len(sent) < args.trickle and now >= next_at:
            sent.append((now, append_documents(log, documents(OPS, 1, len(sent)), Caller(tenant=OPS)).position))
            next_at += args.every
        applied = rows.applied_positions()
        for i, (at, position) in enumerate(sent):
            if i not in waits and applied.covers(position):
                waits[i] = time.monotonic() - at
        if sent and now - sent[0][0] > 600 + args.trickle * args.every:
            break
        time.sleep(0.02)
    return [waits.get(i) for i in range(len(sent))]


def run_config(name: str, partitions: int, processes: int, threads: int, args) -> dict:
    from services.adapters.event_log.kafka import KafkaEventLog
    from services.adapters.row_store.sqlite import SqliteRowStore
    from services.app.memory import append_documents
    from services.app.sealing import Sealer, sealing
    from services.bootstrap import data_key_store_for
    from services.settings import Settings
    from tests.qdrant_rest import qdrant_rest_url
    from tests.tansu import Tansu, tansu_binary

    folder = WORK / uuid.uuid4().hex[:8]
    (folder / "shared").mkdir(parents=True)
    with ExitStack() as stack:
        broker = Tansu(tansu_binary())
        stack.callback(broker.stop)
        qdrant_url = stack.enter_context(qdrant_rest_url(folder / "qdrant"))
        env = indexer_env(folder, broker.bootstrap, qdrant_url, partitions, threads)
        settings = Settings(profile="cluster", data_dir=folder / "data", erasure={"key_store": "sqlite"})
        log = sealing(KafkaEventLog(broker.bootstrap, "orgmem-bench", partitions=partitions),
                      Sealer(data_key_store_for(settings)))
        stack.callback(log.close)
        procs = []
        for i in range(processes):
            err = open(folder / f"indexer-{i}.log", "w")  # noqa: SIM115 - closed with the stack
            stack.callback(err.close)
            procs.append(subprocess.Popen([sys.executable, "-m", "services.cli.main", "indexer", "--profile",
                                           "cluster", "--group", "bench"], env=env, stdout=err, stderr=err))
        stack.callback(lambda: [p.kill() for p in procs])
        warm = [append_documents(log, documents(t, 1, 10**6), Caller(tenant=t)).position for t in (SALES, OPS)]
        rows = None
        deadline = time.monotonic() + 180
        while rows is None and time.monotonic() < deadline:  # the indexers create the store
            if (folder / "shared" / "rows.sqlite").exists():
                rows = SqliteRowStore(folder / "shared" / "rows.sqlite")
            time.sleep(0.2)
        if rows is None or any(wait_covered(rows, p, 180) is None for p in warm):
            raise SystemExit(f"{name}: the indexers did not project the warm-up documents (logs in {folder})")
        stack.callback(rows.close)

        started = time.monotonic()
        last = [append_documents(log, documents(SALES, 50, i), Caller(tenant=SALES)).position
                for i in range(0, args.bulk, 50)][-1]
        waits = trickle(log, rows, args, append_documents)
        wait_covered(rows, last, 1200)
        seconds = time.monotonic() - started

        # Both tenants import at once: what a second indexer process adds.
        started = time.monotonic()
        lasts = [append_documents(log, documents(tenant, 50, 10**5 + i), Caller(tenant=tenant)).position
                 for i in range(0, args.bulk // 2, 50) for tenant in (SALES, OPS)][-2:]
        for position in lasts:
            wait_covered(rows, position, 1200)
        both_seconds = time.monotonic() - started
    shutil.rmtree(folder, ignore_errors=True)
    done = [w for w in waits if w is not None]
    total = args.bulk + args.trickle
    both = 2 * len(range(0, args.bulk // 2, 50)) * 50
    return {"name": name, "seconds": seconds, "docs_per_s": total / seconds, "both_docs_per_s": both / both_seconds,
            "ops_wait_p50_s": statistics.median(done) if done else None, "ops_wait_max_s": max(done, default=None),
            "ops_lost": len(waits) - len(done)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bulk", type=int, default=1500, help="documents of the bulk import (tenant sales)")
    parser.add_argument("--trickle", type=int, default=30, help="documents of tenant ops, one at a time")
    parser.add_argument("--every", type=float, default=0.5, help="seconds between two ops documents")
    args = parser.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)
    print(f"{args.bulk} sales documents at once, {args.trickle} ops documents every {args.every:g} s; "
          f"{os.cpu_count()} cores", flush=True)
    print(f"{'configuration':36} {'all projected s':>16} {'docs/s':>8} {'ops wait p50 s':>15} {'max s':>7} "
          f"{'both import docs/s':>19}", flush=True)
    results = []
    for name, partitions, processes, threads in CONFIGS:
        r = run_config(name, partitions, processes, threads, args)
        results.append(r)
        p50 = "-" if r["ops_wait_p50_s"] is None else f"{r['ops_wait_p50_s']:.2f}"
        worst = "-" if r["ops_wait_max_s"] is None else f"{r['ops_wait_max_s']:.2f}"
        print(f"{name:36} {r['seconds']:16.1f} {r['docs_per_s']:8.1f} {p50:>15} {worst:>7} "
              f"{r['both_docs_per_s']:19.1f}"
              + (f"  ({r['ops_lost']} not projected within 600 s)" if r["ops_lost"] else ""), flush=True)
    one, two = results[1], results[3]
    print(f"both tenants importing, two indexer processes against one (one thread each): "
          f"{two['both_docs_per_s'] / one['both_docs_per_s']:.2f}x documents/s; against one process with two "
          f"threads: {two['both_docs_per_s'] / results[0]['both_docs_per_s']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What encryption (crypto-shredding, docs/erasure.md) costs: ingest throughput and query latency
with documents sealed in the log against the same run with ORGMEM_ERASURE__ENCRYPT=false.

    .venv/bin/python -m bench.erasure_cost [--docs 400] [--queries 100] [--rounds 2]

Each round builds a fresh data folder per mode, off and on alternating (this host's speed drifts
between passes), ingests the same LoCoMo turns through the whole pipeline (log, key store, row
store, tantivy, Qdrant Edge) and then runs the same questions end to end. The query path reads
only projections, which hold plaintext, so it pays nothing for encryption; ingest pays one key
store transaction per appended batch and one AES-GCM seal per document, and the projector one
key read per batch and one open per document. Target: within 5 % of off.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import time
from pathlib import Path

from bench.corpus import documents, queries
from services.bootstrap import build_memory
from services.core.caller import Caller
from services.settings import Settings

OUT = Path(__file__).resolve().parent / "out" / "erasure_cost"


def one_pass(encrypt: bool, docs, questions) -> tuple[float, float]:
    folder = OUT / ("on" if encrypt else "off")
    shutil.rmtree(folder, ignore_errors=True)
    settings = Settings(data_dir=folder, erasure={"encrypt": encrypt}, embedder={"vector_cache": False})
    memory, lock = build_memory(settings)
    try:
        started = time.perf_counter()
        for start in range(0, len(docs), 100):
            memory.ingest(docs[start : start + 100])
        memory.catch_up()
        rate = len(docs) / (time.perf_counter() - started)
        scope, config = memory.scope_for(Caller()), memory.config_for()
        memory.query(questions[0], scope, config)  # warm-up
        times = []
        for q in questions:
            started = time.perf_counter()
            memory.query(q, scope, config)
            times.append((time.perf_counter() - started) * 1000)
        return rate, statistics.median(times)
    finally:
        memory.close()
        lock.release()


def sealing_alone(docs) -> float:
    """Milliseconds per document that sealing adds, measured alone: the key store transaction per
    batch of 100, the seal, and the projector's key read and open. Less exposed to this shared
    host's drift than the two whole passes."""
    from datetime import UTC, datetime

    from schemas.events import DocumentObserved, LoggedEvent
    from services.bootstrap import data_key_store_for
    from services.app.sealing import Sealer

    folder = OUT / "sealing"
    shutil.rmtree(folder, ignore_errors=True)
    sealer = Sealer(data_key_store_for(Settings(data_dir=folder)))
    try:
        events = [DocumentObserved(row_id=sealer.row_id_for("default", d), document=d) for d in docs]
        started = time.perf_counter()
        for start in range(0, len(events), 100):
            sealed = sealer.seal(events[start : start + 100])
            now = datetime.now(UTC)
            sealer.open([LoggedEvent(position=i + 1, appended_at=now, event=e) for i, e in enumerate(sealed)])
        return (time.perf_counter() - started) * 1000 / len(events)
    finally:
        sealer.keys.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=400)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    docs, questions = documents(args.docs), queries(args.queries)
    results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for round_ in range(args.rounds):
        for encrypt in (False, True) if round_ % 2 == 0 else (True, False):
            rate, p50 = one_pass(encrypt, docs, questions)
            results[encrypt].append((rate, p50))
            print(f"round {round_ + 1}, encryption {'on ' if encrypt else 'off'}: {rate:6.1f} documents/s, "
                  f"query p50 {p50:5.2f} ms")
    off_rate = statistics.mean(r for r, _ in results[False])
    on_rate = statistics.mean(r for r, _ in results[True])
    off_p50 = statistics.mean(p for _, p in results[False])
    on_p50 = statistics.mean(p for _, p in results[True])
    print(f"ingest: off {off_rate:.1f}, on {on_rate:.1f} documents/s (on/off {on_rate / off_rate:.3f}; target >= 0.95)")
    print(f"query p50: off {off_p50:.2f}, on {on_p50:.2f} ms (on/off {on_p50 / off_p50:.3f}; target <= 1.05)")
    per_doc = sealing_alone(docs)
    print(f"sealing alone: {per_doc:.3f} ms per document (keys, seal, open) = {per_doc * off_rate / 10:.2f} % "
          f"of the {1000 / off_rate:.1f} ms a document takes through the pipeline with encryption off")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

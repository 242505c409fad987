"""Where a query's time goes, stage by stage, on a store of the live benchmark's stream, with and
without the row store's thread cache, in one run.

    .venv/bin/python -m bench.stages --documents 10000 --queries 400

Builds (once; kept in --data) an embedded data folder holding the first N documents of
bench/live.py's stream (LoCoMo, QMSum, BEAM, Enron, the synthetic organisation), then asks the
LoCoMo questions in process (`Memory.query`, embedding included, no HTTP, no ingest running),
alternating question by question between the thread cache on and off, so that a drift in the
host's speed reaches both alike. Prints the wall time and each stage's median and p95
(`timings_ms`). In-process and idle: the floor under what bench/live.py measures live.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.live_corpus import document_stream, interleave, load_sources, query_questions
from bench.live_report import percentile
from services.adapters.row_store.sqlite_thread_cache import ThreadFieldsCache
from services.bootstrap import build_memory
from services.core.caller import SYSTEM
from services.settings import Settings

WORK = Path(tempfile.gettempdir()) / "orgmem-stages"


def build(data: Path, documents: int, work: Path) -> None:
    sources = load_sources(work)
    docs = list(itertools.islice(document_stream(interleave(list(sources.values()))), documents))
    memory, lock = build_memory(Settings(data_dir=data))
    try:
        started = time.monotonic()
        for lo in range(0, len(docs), 500):
            memory.ingest(docs[lo:lo + 500])
            memory.catch_up()
            print(f"  {min(lo + 500, len(docs)):,} documents in {time.monotonic() - started:.0f} s", file=sys.stderr)
    finally:
        memory.close()
        lock.release()


def measure(data: Path, queries: int, work: Path) -> dict[str, dict[str, list[float]]]:
    memory, lock = build_memory(Settings(data_dir=data))
    try:
        _, questions = query_questions(work)
        config, scope = memory.config_for(None), memory.scope_for(SYSTEM)
        # The cache is the SQLite row store's (sqlite_thread_cache.py): "off" swaps in one of size
        # 0, which keeps nothing, and "on" gets its own back with what it had kept.
        rows = memory._rows  # noqa: SLF001 - a benchmark switches an adapter detail
        caches = {"cache on": rows._thread_cache, "cache off": ThreadFieldsCache(max_fields=0)}
        out: dict[str, dict[str, list[float]]] = {variant: {} for variant in caches}
        for question in questions[:20]:  # warm: the encoder's first runs, the page cache
            memory.query(question, scope, config)
        for question in questions[:queries]:
            for variant in out:
                rows._thread_cache = caches[variant]
                started = time.perf_counter()
                result = memory.query(question, scope, config)
                out[variant].setdefault("wall", []).append((time.perf_counter() - started) * 1000)
                for stage, ms in result.timings_ms.items():
                    out[variant].setdefault(stage, []).append(ms)
        return out
    finally:
        memory.close()
        lock.release()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--documents", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--data", type=Path, help=f"the store's data folder (default {WORK}/data-N)")
    args = parser.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)
    data = args.data or WORK / f"data-{args.documents}"
    if not (data / "log.sqlite").exists():
        print(f"building {data} from the live stream's first {args.documents:,} documents", file=sys.stderr)
        build(data, args.documents, WORK)
    timings = measure(data, args.queries, WORK)
    stages = list(dict.fromkeys(stage for variant in timings.values() for stage in variant))
    print(f"{'stage':16} " + "  ".join(f"{v + ' p50':>14} {v + ' p95':>14}" for v in timings))
    for stage in stages:
        cells = []
        for variant in timings.values():
            values = variant.get(stage, [])
            cells.append(f"{percentile(values, 50) or 0:14.2f} {percentile(values, 95) or 0:14.2f}")
        print(f"{stage:16} " + "  ".join(cells))
    print(f"queries: {args.queries} per variant, alternating; mean wall "
          + ", ".join(f"{v} {statistics.mean(t['wall']):.1f} ms" for v, t in timings.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

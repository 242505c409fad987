"""The tiered vector index of a live server (services/adapters/vector/qdrant_edge_tiers.py):
query latency with every row searched exactly (a server that never ran `orgmem optimize`), fully
sealed, tiered (a graph plus a live part searched exactly), and while a child process seals the
live part; the longest search during that build; the build's steps; exact-search cost per row.

Random unit vectors with realistic payloads (bench/vector_index_speed.py); the filter is a
caller's scope (tenant + access list + active state), limit 50, as the vector leg of a query.

    python -m bench.live_graph                       # 40k sealed + 10k live, 384 dimensions
    python -m bench.live_graph --sealed 90000 --live 10000
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench.vector_index_speed import GROUPS, TENANTS, UPSERT_CHUNK, make_rows, unit_vectors
from services.adapters.vector.qdrant_edge import QdrantEdgeVectorIndex
from services.adapters.vector.qdrant_edge_tiers import TieredEdgeVectorIndex
from services.core.scope import Scope


def scopes(n: int, rnd: random.Random) -> list[Scope]:
    return [Scope(tenant=rnd.choice(TENANTS), readers=frozenset({f"user{rnd.randint(0, 99)}", rnd.choice(GROUPS)}))
            for _ in range(n)]


def latencies(index, queries: np.ndarray, asked: list[Scope], exact: bool = False) -> np.ndarray:
    times = []
    for query, scope in zip(queries, asked, strict=True):
        start = time.perf_counter()
        index.search(query, scope, 50, exact=exact)
        times.append(time.perf_counter() - start)
    return np.array(times) * 1000


def line(label: str, ms: np.ndarray) -> None:
    p50, p95 = np.percentile(ms, [50, 95])
    print(f"  {label:<44} p50 {p50:7.2f} ms  p95 {p95:7.2f} ms  max {ms.max():7.1f} ms  ({len(ms)} queries)", flush=True)


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min) {five:.1f} (5 min) on {os.cpu_count()} cores"


def recall(index, queries: np.ndarray, asked: list[Scope]) -> float:
    found = []
    for query, scope in zip(queries, asked, strict=True):
        exact = {h.row_id for h in index.search(query, scope, 50, exact=True)}
        graph = {h.row_id for h in index.search(query, scope, 50)}
        found.append(len(exact & graph) / max(len(exact), 1))
    return float(np.mean(found))


def exact_cost(dim: int, folder: Path, queries: np.ndarray, asked: list[Scope]) -> None:
    """Exact search alone at the sizes a live part may reach: what a larger vector_seal_rows costs."""
    for n in (5_000, 10_000, 20_000):
        index = QdrantEdgeVectorIndex(folder / f"exact-{n}", dim)
        try:
            rows, vectors = make_rows(n, random.Random(n)), unit_vectors(n, dim, np.random.default_rng(n))
            for lo in range(0, n, UPSERT_CHUNK):
                index.upsert(rows[lo:lo + UPSERT_CHUNK], vectors[lo:lo + UPSERT_CHUNK])
            ms = latencies(index, queries, asked)
            print(f"  exact search of {n:>6} rows: p50 {np.percentile(ms, 50):6.2f} ms "
                  f"({np.percentile(ms, 50) / n * 1e3:.2f} us per row)", flush=True)
        finally:
            index.close()


def searched_during(label: str, index: TieredEdgeVectorIndex, running, started: float,
                    steps: list[tuple[str, float]], queries: np.ndarray, asked: list[Scope]) -> None:
    """Search in a loop on this thread while the build that has just started runs; the longest
    search, and what each step of the build took. The new sealed shard is opened by its host
    process (built..swapped): a search that waits on this process's interpreter lock shows here."""
    during, at = [], []
    while running():
        i = len(during) % len(queries)
        begin = time.perf_counter()
        index.search(queries[i], asked[i], 50)
        during.append((time.perf_counter() - begin) * 1000)
        at.append(begin)
    print(f"  {label}: {time.perf_counter() - started:.1f} s; {load()}", flush=True)
    if not steps:
        print("    no build ran", flush=True)
        return
    print("    steps: " + ", ".join(f"{name} +{t - started:.2f} s" for name, t in steps), flush=True)
    during_ms, began = np.array(during), np.array(at)
    line("during the build (search loop on the parent)", during_ms)
    print(f"    longest search began at +{at[int(np.argmax(during_ms))] - started:.2f} s of the build", flush=True)
    named = dict(steps)
    child = during_ms[(began >= named["child-started"]) & (began + during_ms / 1000 <= named["built"])]
    if len(child):
        line("  while the child built (child-started..built)", child)
    opening = during_ms[(began + during_ms / 1000 >= named["built"]) & (began <= named["swapped"])]
    if len(opening):
        line("  while the host opened the new shard (built..swapped)", opening)
    print(f"    write stall (frozen..copied, writes wait, searches do not): "
          f"{named['copied'] - named['frozen']:.2f} s; opening the new sealed shard (built..swapped): "
          f"{named['swapped'] - named['built']:.2f} s", flush=True)


def run(sealed_n: int, live_n: int, dim: int, queries_n: int, folder: Path) -> None:
    total = sealed_n + live_n
    rnd, rng = random.Random(total), np.random.default_rng(total)
    rows, vectors = make_rows(total, rnd), unit_vectors(total, dim, rng)
    queries, asked = unit_vectors(queries_n, dim, rng), scopes(queries_n, rnd)
    steps: list[tuple[str, float]] = []
    index = TieredEdgeVectorIndex(folder / "tiers", dim, seal_rows=live_n,
                                  on_step=lambda step: steps.append((step, time.perf_counter())))
    try:
        print(f"{sealed_n} sealed + {live_n} live rows x {dim}; {load()}", flush=True)
        for lo in range(0, sealed_n, UPSERT_CHUNK):
            index.upsert(rows[lo:min(lo + UPSERT_CHUNK, sealed_n)], vectors[lo:min(lo + UPSERT_CHUNK, sealed_n)])
        line(f"all exact, {sealed_n} rows (no graph yet)", latencies(index, queries, asked))
        start = time.perf_counter()
        index.optimize()
        print(f"  first build ({sealed_n} rows, child process): {time.perf_counter() - start:.1f} s; {load()}", flush=True)
        line(f"fully sealed, {sealed_n} rows", latencies(index, queries, asked))
        for lo in range(sealed_n, total, UPSERT_CHUNK):
            index.upsert(rows[lo:min(lo + UPSERT_CHUNK, total)], vectors[lo:min(lo + UPSERT_CHUNK, total)])
        line(f"all exact, {total} rows (same run, exact=True)", latencies(index, queries, asked, exact=True))
        line(f"tiered, {sealed_n} graph + {live_n} exact", latencies(index, queries, asked))
        steps.clear()
        started = time.perf_counter()
        assert index.seal_if_due()
        searched_during(f"second build (+{live_n} rows sealed into a shard of their own beside {sealed_n})",
                        index, lambda: index.graph_status()["builds_running"], started, steps, queries, asked)
        line(f"two sealed shards, {sealed_n} + {live_n} rows", latencies(index, queries, asked))
        steps.clear()
        started = time.perf_counter()
        merging = threading.Thread(target=index.optimize, name="optimize")
        merging.start()
        searched_during(f"merging build (every row into one shard of {total}: the largest open)",
                        index, merging.is_alive, started, steps, queries, asked)
        line(f"fully sealed, {total} rows", latencies(index, queries, asked))
        print(f"  recall@50 of the sealed graph against exact search: {recall(index, queries[:50], asked[:50]):.3f}")
        print(f"  status: {index.graph_status()}", flush=True)
    finally:
        index.close()
    exact_cost(dim, folder, queries[:100], asked[:100])
    print(f"done; {load()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sealed", type=int, default=40_000)
    parser.add_argument("--live", type=int, default=10_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="orgmem-live-graph-") as tmp:
        run(args.sealed, args.live, args.dim, args.queries, Path(tmp))


if __name__ == "__main__":
    main()

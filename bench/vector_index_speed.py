"""Speed of the Qdrant Edge vector index: upsert, optimize (HNSW build), filtered search.

Random unit vectors with realistic payloads (tenants, access lists, states, kinds, dates);
the query filter is what a caller's scope becomes: tenant + access list + active state.

    python -m bench.vector_index_speed                 # 10k and 100k rows, 384 dimensions
    python -m bench.vector_index_speed --sizes 5000 --queries 50
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from schemas.rows import Row
from services.adapters.vector.qdrant_edge import QdrantEdgeVectorIndex
from services.core.scope import Scope

T0 = datetime(2023, 1, 1, tzinfo=UTC)
TENANTS = ["acme", "globex", "initech", "umbrella"]
GROUPS = ["eng", "ops", "sales", "legal", "exec", "hr"]
KINDS = ["email", "ticket", "meeting", "doc", "chat"]
UPSERT_CHUNK = 5000  # what one indexer batch might hand over


def make_rows(n: int, rnd: random.Random) -> list[Row]:
    rows = []
    for i in range(n):
        acl = [] if rnd.random() < 0.5 else rnd.sample(GROUPS, rnd.randint(1, 2))
        rows.append(
            Row(
                row_id=f"row-{i:07d}",
                tenant=rnd.choice(TENANTS),
                text="",
                author=f"person{rnd.randint(0, 300)}@example.com",
                event_time=None if rnd.random() < 0.1 else T0 + timedelta(minutes=rnd.randint(0, 10**6)),
                kind=rnd.choice(KINDS),
                thread=f"thread-{rnd.randint(0, n // 5)}",
                acl=acl,
                ingest_position=i + 1,
                ingested_at=T0 + timedelta(minutes=i),
                state="active" if rnd.random() < 0.9 else "archived",
            )
        )
    return rows


def unit_vectors(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def truth_masks(rows: list[Row]) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Per-row columns to compute the exact answer of a scope with numpy (for recall)."""
    tenant = np.array([r.tenant for r in rows])
    active = np.array([r.state == "active" for r in rows])
    public = np.array([not r.acl for r in rows])
    groups = {g: np.array([g in r.acl for r in rows]) for g in GROUPS}
    return tenant, active, public, groups


def search_latency(
    index: QdrantEdgeVectorIndex, queries: np.ndarray, rnd: random.Random, rows: list[Row], vectors: np.ndarray
) -> tuple[float, float, float]:
    """p50 and p95 latency in ms, and recall@50 against an exact scan of the scope."""
    tenant, active, public, groups = truth_masks(rows)
    times, recalls = [], []
    for query in queries:
        chosen_tenant, group = rnd.choice(TENANTS), rnd.choice(GROUPS)
        scope = Scope(tenant=chosen_tenant, readers=frozenset({f"user{rnd.randint(0, 99)}", group}))
        start = time.perf_counter()
        hits = index.search(query, scope, limit=50)
        times.append(time.perf_counter() - start)
        eligible = np.flatnonzero((tenant == chosen_tenant) & active & (public | groups[group]))
        best = eligible[np.argsort(-(vectors[eligible] @ query))[:50]]
        recalls.append(len({rows[i].row_id for i in best} & {h.row_id for h in hits}) / len(best))
    p50, p95 = np.percentile(np.array(times) * 1000, [50, 95])
    return float(p50), float(p95), float(np.mean(recalls))


def run(n: int, dim: int, queries: int, folder: Path) -> None:
    rnd = random.Random(n)
    rng = np.random.default_rng(n)
    rows = make_rows(n, rnd)
    vectors = unit_vectors(n, dim, rng)
    probes = unit_vectors(queries, dim, rng)
    index = QdrantEdgeVectorIndex(folder / f"edge-{n}", dim)
    try:
        start = time.perf_counter()
        for lo in range(0, n, UPSERT_CHUNK):
            index.upsert(rows[lo : lo + UPSERT_CHUNK], vectors[lo : lo + UPSERT_CHUNK])
        upsert_s = time.perf_counter() - start
        print(f"{n:>7} rows x {dim}: upsert {upsert_s:7.2f} s ({n / upsert_s:,.0f} rows/s)", flush=True)
        report(n, "before optimize", search_latency(index, probes, rnd, rows, vectors))
        start = time.perf_counter()
        index.optimize()
        print(f"{n:>7} rows: optimize {time.perf_counter() - start:7.2f} s", flush=True)
        report(n, "after optimize ", search_latency(index, probes, rnd, rows, vectors))
    finally:
        index.close()


def report(n: int, when: str, figures: tuple[float, float, float]) -> None:
    p50, p95, recall = figures
    print(f"{n:>7} rows: search {when}: p50 {p50:6.2f} ms, p95 {p95:6.2f} ms, recall@50 {recall:.3f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()
    print("filter: tenant + acl (any of caller tokens) + state=active, limit 50", flush=True)
    with tempfile.TemporaryDirectory(prefix="orgmem-bench-") as folder:
        for n in args.sizes:
            run(n, args.dim, args.queries, Path(folder))


if __name__ == "__main__":
    main()

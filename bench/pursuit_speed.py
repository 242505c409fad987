"""Latency of MemPursuit selection (services.core.pursuit.pursuit_select) on random unit vectors.

Times whole calls, so the inner products with the pool (b = E q and the Gram rows of the picks)
are included. Prints p50/p95 wall milliseconds per (P, K) and the p50 of this thread's CPU time,
which is less disturbed when other jobs share the cores. The paper reports 8.67 ms median at
P = 200, K = 20 (its Table 13).

    python -m bench.pursuit_speed [--reps 300] [--dtype float32] [--dim 384]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from services.core.pursuit import pursuit_select

POOLS = (50, 100, 200, 500)
BUDGETS = (10, 20, 50)
DISTINCT_POOLS = 8  # pools are rotated so one pool's rows do not stay hot in cache


def unit_rows(rng: np.random.Generator, n: int, d: int, dtype: str) -> np.ndarray:
    x = rng.standard_normal((n, d))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(dtype)


def measure(P: int, K: int, reps: int, dim: int, dtype: str, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    pools = [unit_rows(rng, P, dim, dtype) for _ in range(DISTINCT_POOLS)]
    queries = unit_rows(rng, reps, dim, dtype)
    for i in range(min(reps, 20)):  # warm-up: first calls pay for imports and page faults
        pursuit_select(queries[i], pools[i % DISTINCT_POOLS], K)
    wall = np.empty(reps)
    cpu = np.empty(reps)
    for i in range(reps):
        pool = pools[i % DISTINCT_POOLS]
        c0, t0 = time.thread_time(), time.perf_counter()
        pursuit_select(queries[i], pool, K)
        wall[i] = time.perf_counter() - t0
        cpu[i] = time.thread_time() - c0
    return wall * 1e3, cpu * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=300)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    load_before = os.getloadavg()[0]
    print(f"d={args.dim} dtype={args.dtype} reps={args.reps} cores={os.cpu_count()}")
    print(f"{'P':>5} {'K':>4} {'p50 ms':>8} {'p95 ms':>8} {'cpu p50':>8}")
    for P in POOLS:
        for K in BUDGETS:
            if K > P:
                continue
            wall, cpu = measure(P, K, args.reps, args.dim, args.dtype, rng)
            p50, p95 = np.percentile(wall, [50, 95])
            print(f"{P:>5} {K:>4} {p50:>8.3f} {p95:>8.3f} {np.median(cpu):>8.3f}")
    print(f"1-min load average: {load_before:.2f} before, {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()

"""Query latency of retrieval presets on a harness store, measured in one run, interleaved.

    .venv/bin/python -m bench.preset_latency --dataset locomo --presets default paper-orgmembench
    .venv/bin/python -m bench.preset_latency --dataset synthetic-org --presets default default-versions-0 paper-orgmembench

Opens the data folder `orgmem bench retrieval` built for the dataset (bench/out/eval/<dataset>),
then asks each question once per preset, the presets taking turns question by question, so a
drift in this host's speed reaches every preset alike. The time is `Memory.query` wall time,
query embedding included, each question in its own tenant's scope, as the harness asks it.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from bench.retrieval.datasets import load
from bench.retrieval.store import open_store
from bench.retrieval.variants import VARIANTS
from services.core.retrieval_config import PRESETS
from services.core.scope import Scope


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure(dataset: str, presets: list[str], queries: int, work: Path, warmup: int = 20) -> dict[str, list[float]]:
    # The synthetic organisation's store is the one `orgmem bench retrieval` builds for seeds 1-3.
    folder = work / dataset / ("seeds-1-2-3" if dataset == "synthetic-org" else "")
    data = load(dataset, work_dir=folder)
    memory, lock = open_store(data, folder)
    try:
        # A preset by name, or a harness variant (bench.retrieval.variants), e.g. default-versions-0.
        configs = {name: memory.config_for(name) if name in PRESETS else VARIANTS[name].config for name in presets}
        asked = data.questions[:queries]
        for q in asked[:warmup]:
            for config in configs.values():
                memory.query(q.text, Scope(tenant=q.group), config)
        timings: dict[str, list[float]] = {name: [] for name in presets}
        stages: dict[str, dict[str, list[float]]] = {name: {} for name in presets}
        for i, q in enumerate(asked):
            # Alternate which preset goes first, so neither always finds the caches warmed by the other.
            order = presets if i % 2 == 0 else presets[::-1]
            for name in order:
                started = time.perf_counter()
                found = memory.query(q.text, Scope(tenant=q.group), configs[name])
                timings[name].append((time.perf_counter() - started) * 1000)
                for stage, ms in found.timings_ms.items():
                    stages[name].setdefault(stage, []).append(ms)
        rows = memory.counts()["active"]
    finally:
        memory.close()
        lock.release()
    print(f"\n## Query latency, {dataset}: {rows:,} rows in {len(data.groups)} tenants, {len(asked)} questions, "
          "presets interleaved\n")
    names = sorted({stage for per_preset in stages.values() for stage in per_preset})
    print("| preset | p50 ms | p95 ms | mean ms | " + " | ".join(f"{stage} p50" for stage in names) + " |")
    print("|---" * (4 + len(names)) + "|")
    for name, values in timings.items():
        medians = " | ".join(f"{statistics.median(stages[name].get(stage, [0.0])):.2f}" for stage in names)
        print(f"| {name} | {statistics.median(values):.1f} | {percentile(values, 0.95):.1f} | "
              f"{statistics.mean(values):.1f} | {medians} |")
    return timings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="locomo", choices=["locomo", "qmsum", "beam", "enron", "synthetic-org"])
    parser.add_argument("--presets", nargs="+", default=["default", "paper-orgmembench"],
                        choices=sorted({*PRESETS, *VARIANTS}), metavar="PRESET_OR_VARIANT")
    parser.add_argument("--queries", type=int, default=400)
    parser.add_argument("--work", type=Path, default=Path("bench/out/eval"))
    args = parser.parse_args()
    measure(args.dataset, args.presets, args.queries, args.work)
    return 0


if __name__ == "__main__":
    sys.exit(main())

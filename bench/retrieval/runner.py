"""The harness end to end: load a dataset, build or reuse its store, replay variants, write reports."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from bench.retrieval.datasets import load
from bench.retrieval.harness import evaluate_variants
from bench.retrieval.report import write_markdown, write_plot
from bench.retrieval.store import Candidates, cached_candidates
from bench.retrieval.variants import DEFAULT_SET, VARIANTS

COVERAGE_DATASETS = {"locomo"}  # complete gold-session coverage is defined for LoCoMo's sessions


def split_groups(candidates: Candidates, split: str, first: int | None = None) -> set[str] | None:
    """Groups to score: all, or the first ("tune") or second ("held-out") half, in dataset order."""
    keys = list(candidates.groups)[: first or None]
    if split == "all":
        return set(keys) if first else None
    half = len(keys) // 2
    if split == "tune":
        return set(keys[:half])
    if split == "held-out":
        return set(keys[half:])
    raise ValueError(f"split: expected all, tune or held-out, got {split!r}")


def run_benchmark(dataset: str, ks: Sequence[int] = (10, 20), selectors: Sequence[str] | None = None,
                  out: Path = Path("docs"), work: Path = Path("bench/out/eval"), groups: int | None = None,
                  split: str = "all", candidates: int = 200, log=sys.stderr) -> str:
    """Score the named variants on `dataset`, write `<out>/<dataset>[-split].md` and
    `<out>/img/<dataset>[-split].png`, and return the markdown."""
    names = list(selectors or DEFAULT_SET)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"selector: unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    if not ks or min(ks) <= 0:
        raise ValueError(f"k: expected positive budgets, got {list(ks)}")
    folder = Path(work) / dataset
    data = load(dataset, work_dir=folder)
    if groups:
        data = data.slice(groups)
        folder = folder / f"first-{groups}"
    cands = cached_candidates(data, folder, candidates, log=log)
    chosen = split_groups(cands, split)
    results = evaluate_variants(cands, [VARIANTS[n] for n in names], ks, chosen)
    tag = dataset if split == "all" else f"{dataset}-{split}"
    questions = next(iter(results.values())).counts.get("all", 0) if results else 0
    notes = [f"{questions} questions; groups: {split}" + (f" (first {groups})" if groups else "") + ".",
             "Dropped: " + ("; ".join(f"{reason}: {n}" for reason, n in sorted(cands.dropped.items())) or "none") + "."]
    coverage = dataset in COVERAGE_DATASETS
    text = write_markdown(Path(out) / f"{tag}.md", f"{dataset} ({split})", results, ks, coverage, notes)
    write_plot(Path(out) / "img" / f"{tag}.png", f"{dataset} ({split})", results, ks, coverage)
    return text

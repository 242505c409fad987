"""The harness end to end: load a dataset, build or reuse its store, replay variants, write reports."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from bench.retrieval.datasets import Dataset, load
from bench.retrieval.harness import evaluate_variants
from bench.retrieval.lexical_legs import attach_lexical_legs
from bench.retrieval.report import write_markdown, write_plot
from bench.retrieval.store import Candidates, cached_candidates, rules_tag
from bench.retrieval.variants import DEFAULT_SET, VARIANTS

COVERAGE_DATASETS = {"locomo"}  # complete gold-session coverage is defined for LoCoMo's sessions
# Datasets of dated, versioned records: every gold artefact found, and the version that holds ranked first.
ORGANISATIONAL_DATASETS = {"synthetic-org", "jsonl"}


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


def split_questions(data: Dataset, split: str) -> set[str] | None:
    """Question ids of the split, for a dataset that splits its own questions (None: it does not)."""
    if split == "all" or not any(q.half for q in data.questions):
        return None
    return {q.qid for q in data.questions if q.half == split}


def _work_folder(work: Path, dataset: str, seeds: Sequence[int], documents: Path | None) -> Path:
    if dataset == "synthetic-org":
        return Path(work) / dataset / ("seeds-" + "-".join(map(str, seeds)))
    if dataset == "jsonl" and documents is not None:
        return Path(work) / dataset / Path(documents).stem
    return Path(work) / dataset


def run_benchmark(dataset: str, ks: Sequence[int] = (10, 20), selectors: Sequence[str] | None = None,
                  out: Path = Path("docs"), work: Path = Path("bench/out/eval"), groups: int | None = None,
                  split: str = "all", candidates: int = 200, log=sys.stderr, seeds: Sequence[int] = (1, 2, 3),
                  documents: Path | None = None, questions: Path | None = None, mrr: bool = False,
                  rules: str = "") -> str:
    """Score the named variants on `dataset`, write `<out>/<dataset>[-split].md` and
    `<out>/img/<dataset>[-split].png`, and return the markdown. `mrr`: also MRR@k, the order
    inside the k rows."""
    names = list(selectors or DEFAULT_SET)
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"selector: unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    if not ks or min(ks) <= 0:
        raise ValueError(f"k: expected positive budgets, got {list(ks)}")
    folder = _work_folder(work, dataset, seeds, documents)
    data = load(dataset, work_dir=folder, seeds=seeds, documents=documents, questions=questions, log=log)
    if groups:
        data = data.slice(groups)
        folder = folder / f"first-{groups}"
    cands = cached_candidates(data, folder, candidates, log=log, rules=rules)
    attach_lexical_legs(cands, data, folder, [VARIANTS[n].config for n in names], log=log)
    own_split = split_questions(data, split)
    chosen = None if own_split is not None else split_groups(cands, split)
    results = evaluate_variants(cands, [VARIANTS[n] for n in names], ks, chosen, own_split)
    tag = (dataset if split == "all" else f"{dataset}-{split}") + rules_tag(rules)
    asked = next(iter(results.values())).counts.get("all", 0) if results else 0
    scope = f"seeds {', '.join(map(str, seeds))}; " if dataset == "synthetic-org" else ""
    notes = [f"{asked} questions; {scope}{'questions' if own_split is not None else 'groups'}: {split}"
             + (f" (first {groups})" if groups else "") + ".",
             "Dropped: " + ("; ".join(f"{reason}: {n}" for reason, n in sorted(cands.dropped.items())) or "none") + "."]
    coverage = dataset in COVERAGE_DATASETS
    families = None
    if dataset in ORGANISATIONAL_DATASETS:
        families = ["recall", "complete"] + (["version"] if any(q.version for q in cands.questions) else [])
    if mrr:
        families = [*(families or (["recall", "coverage"] if coverage else ["recall"])), "mrr"]
    title = f"{dataset} ({split}{f', rules on: {rules}' if rules else ''})"
    text = write_markdown(Path(out) / f"{tag}.md", title, results, ks, coverage, notes, families)
    write_plot(Path(out) / "img" / f"{tag}.png", title, results, ks, coverage, families)
    return text

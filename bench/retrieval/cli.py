"""`python -m bench.retrieval ...` (also `orgmem bench retrieval ...` from a source checkout): the
retrieval-quality harness on the public benchmarks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_retrieval(args) -> int:
    from bench.retrieval.runner import run_benchmark

    try:
        text = run_benchmark(
            args.dataset, ks=args.k, selectors=args.selector, out=Path(args.out), work=Path(args.work),
            groups=args.groups, split=args.split, candidates=args.candidates, seeds=args.seeds,
            documents=args.documents, questions=args.questions, mrr=args.mrr, rules=args.rules,
        )
    except (FileNotFoundError, ValueError) as exc:
        print(f"orgmem bench: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0


def add_retrieval_arguments(p: argparse.ArgumentParser) -> None:
    from bench.retrieval.datasets import DATASETS
    from bench.retrieval.variants import VARIANTS

    p.add_argument("--dataset", required=True, choices=DATASETS)
    p.add_argument("--k", type=int, nargs="+", default=[10, 20], help="budgets to score (default 10 20)")
    p.add_argument("--selector", nargs="+", default=None, choices=sorted(VARIANTS), metavar="VARIANT",
                   help=f"variants to compare (default: the reference set and the default); known: {', '.join(VARIANTS)}")
    p.add_argument("--split", choices=["all", "tune", "held-out"], default="all",
                   help="questions to score: all, the tuning half or the held-out half (first or second half of the "
                        "groups; synthetic-org: of each seed's decision threads; jsonl: of the question lines)")
    p.add_argument("--groups", type=int, default=None, help="only the first N conversations/meetings/chats")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3],
                   help="synthetic-org: the organisations to generate, one tenant each (default 1 2 3)")
    p.add_argument("--documents", type=Path, default=None, help="jsonl: documents in the ingest JSONL format")
    p.add_argument("--questions", type=Path, default=None,
                   help='jsonl: one question a line, {"q": ..., "gold": [source_id, ...], "as_of": ..., '
                        '"version_source_id": ...}')
    p.add_argument("--candidates", type=int, default=200, help="C: rows fetched per leg and cached (default 200)")
    p.add_argument("--mrr", action="store_true",
                   help="also MRR@k: 1 / the rank of the first gold row within k (the order inside the k rows)")
    p.add_argument("--rules", nargs="?", const="both", default="", choices=["people", "time", "both"],
                   help="ask every question with the people rule, the time rule or both (the default) on, as the "
                        "query route applies them (people_rules, time_rules); written to <dataset>[-split]-rules-*.md")
    p.add_argument("--out", default="docs", help="folder for <dataset>.md and img/<dataset>.png (default docs)")
    p.add_argument("--work", default="bench/out/eval", help="cache of built data folders and candidates")
    p.set_defaults(handler=cmd_retrieval)


def main(argv: list[str] | None = None, prog: str = "python -m bench.retrieval") -> int:
    parser = argparse.ArgumentParser(prog=prog, description="retrieval quality on a public dataset from "
                                     "../shared/data, the synthetic organisation or your own JSONL files "
                                     "(no language model)")
    add_retrieval_arguments(parser)
    args = parser.parse_args(argv)
    return args.handler(args)

"""What a cross-encoder reranker would cost per query on this host, measured with the network we have.

    .venv/bin/python -m bench.rerank_cost [--dataset locomo|beam] [--questions 40] [--rows 10 20 50]

No cross-encoder can be fetched here (model weights come only from package registries, and
none packages one), so its cost is measured with a stand-in of the same size: a MiniLM-L6
cross-encoder (6 layers, 384 wide) is the network of the all-MiniLM-L6-v2 encoder the server
already runs, so scoring (question, row) pairs costs what encoding each pair as one text costs
("question [SEP] row": the same word pieces a cross-encoder reads). Each question is scored
against rows of its own conversation, as a reranker would score the fused top rows; what the
rows say does not change the time, their length does.

Printed beside it, from the same run: one question encoded alone, which every query does today,
through the int8 encoder the server uses for queries. fp32 scores all pairs in one batch; int8
runs one text at a time (the adapter's rule: its activations are scaled per run).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from bench.retrieval.datasets import Dataset, DatasetMissing, load
from services.adapters.embedder.onnx_runtime import OnnxEmbedder

MODEL = "all-MiniLM-L6-v2"


def pairs_per_question(data: Dataset, questions: int, rows: int, seed: int) -> list[tuple[str, list[str]]]:
    texts = {group.key: [d.text for d in group.documents] for group in data.groups}
    picked = random.Random(seed).sample(data.questions, min(questions, len(data.questions)))
    out = []
    for q in picked:
        own = texts[q.group]
        out.append((q.text, random.Random(q.qid).sample(own, min(rows, len(own)))))
    return out


def timed(encoder: OnnxEmbedder, texts: list[str]) -> float:
    started = time.perf_counter()
    encoder.encode(texts)
    return (time.perf_counter() - started) * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", choices=("locomo", "beam"), default="locomo")
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--rows", type=int, nargs="+", default=[10, 20, 50])
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    if args.questions < 1 or any(n < 1 for n in args.rows):
        parser.error("--questions and --rows must be at least 1")
    try:
        data = load(args.dataset)
    except DatasetMissing as missing:
        raise SystemExit(f"rerank_cost: {missing}") from None
    work = {n: pairs_per_question(data, args.questions, n, args.seed) for n in args.rows}
    encoders = {p: OnnxEmbedder(MODEL, precision=p) for p in ("fp32", "int8")}
    for encoder in encoders.values():
        encoder.encode(["warm up"])
    query_ms = [timed(encoders["int8"], [q]) for q, _ in work[args.rows[0]]]
    print(f"{args.dataset}, {len(query_ms)} questions, one thread per encoder (as the server runs them)")
    print(f"  the question alone, int8 (every query today): p50 {statistics.median(query_ms):.1f} ms")
    for n in args.rows:
        for precision, encoder in encoders.items():
            ms = [timed(encoder, [f"{q} [SEP] {row}" for row in rows]) for q, rows in work[n]]
            print(f"  {n} (question, row) pairs, {precision}: p50 {statistics.median(ms):.1f} ms, "
                  f"p95 {sorted(ms)[int(0.95 * (len(ms) - 1))]:.1f} ms")


if __name__ == "__main__":
    main()

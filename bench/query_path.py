"""A query's time on a kept store, stage by stage, for one or more source trees in the same run.

    git worktree add /tmp/parent HEAD~1
    .venv/bin/python -m bench.query_path --data DATA --tree /tmp/parent --tree . --rounds 4 --queries 300

DATA is a data folder kept by a benchmark (`bench.live --keep`, or the store of `bench.live
--scale 1m`). Each round starts `orgmem serve` from each tree in turn on that folder (one server
at a time: the folder is locked), asks WARMUP questions, then --queries LoCoMo questions over HTTP
one after the other (the server embeds each; nothing is ingested), and stops it. The trees take
turns round by round, so that a drift of the machine reaches them alike. Prints, per tree, the
client's p50 / p95 over all rounds, and the median of each stage the server reports
(`timings_ms`), with "outside retrieval": the client's time less the stages on the query's own
thread (HTTP, authentication, the response's rendering, the client itself).
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

from bench.live import WORK
from bench.live_corpus import query_questions
from bench.live_server import Server, client, create_keys, stage_medians

WARMUP = 20
summary = stage_medians  # the figures printed per tree


def one_round(tree: Path, data: Path, token: str, questions: list[str]) -> list[tuple[float, dict[str, float]]]:
    server = Server(data, cwd=tree)
    try:
        with client(server.url, token) as http:
            for q in questions[:WARMUP]:
                http.post("/v1/query", json={"q": q}).raise_for_status()
            out = []
            for q in questions[WARMUP:]:
                started = time.perf_counter()
                answer = http.post("/v1/query", json={"q": q})
                elapsed = (time.perf_counter() - started) * 1000
                answer.raise_for_status()
                out.append((elapsed, answer.json()["timings_ms"]))
            return out
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a kept data folder")
    parser.add_argument("--tree", action="append", type=Path, help="a source tree to start the server from (repeat)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=300, help="questions per round and tree")
    parser.add_argument("--work", type=Path, default=WORK, help="where bench.live keeps its corpus")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.queries < 1:
        parser.error("--rounds and --queries: at least 1")
    trees = [t.resolve() for t in (args.tree or [Path(".")])]
    for tree in trees:
        if not (tree / "services" / "cli" / "__main__.py").is_file():
            parser.error(f"--tree {tree}: not an orgmem source tree")
    if not (args.data / "projections").is_dir():
        parser.error(f"--data {args.data}: not a data folder")
    _, questions = query_questions(args.work)
    token = create_keys(args.data)["reader"]
    runs: dict[Path, list] = {tree: [] for tree in trees}
    asked = itertools.cycle(questions)
    for r in range(args.rounds):
        block = list(itertools.islice(asked, WARMUP + args.queries))  # every tree gets the same questions
        for tree in trees:
            runs[tree] += one_round(tree, args.data, token, block)
            print(f"round {r + 1}: {tree} p50 {statistics.median(t for t, _ in runs[tree][-args.queries:]):.2f} ms",
                  file=sys.stderr)
    figures = {tree: summary(samples) for tree, samples in runs.items()}
    names = list(dict.fromkeys(name for f in figures.values() for name in f))
    print("| ms, median | " + " | ".join(str(t) for t in trees) + " |")
    print("|---|" + "---|" * len(trees))
    for name in names:
        cells = [f"{f[name]:.2f}" if name in f else "—" for f in figures.values()]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A server's start-up time and memory, for one or more source trees, measured in the same run.

Each start is `orgmem serve` on a fresh data folder: the seconds until /healthz answers, then
DOCS documents ingested over HTTP, one query answered once they are indexed, and the server's RSS (its
own, and with its children: the encoder workers). Trees take turns start by start, so that a
drift of the machine reaches them all alike. Compare a change with its parent:

    git worktree add /tmp/parent HEAD~1
    .venv/bin/python -m bench.footprint --tree /tmp/parent --tree . --starts 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench import live_report as lr
from bench.live_server import Server, client, create_keys

MiB = 2**20


def documents(n: int) -> list[dict]:
    base = datetime(2025, 3, 1, tzinfo=UTC)
    return [{"text": f"report {i}: the sensor rig in building {i % 7} shipped to site {i % 11}",
             "author": f"p{i % 5}@corp.example", "date": (base + timedelta(hours=i)).isoformat(), "kind": "doc",
             "source": "notes", "source_id": f"footprint-{i}"} for i in range(n)]


def one_start(tree: Path, docs: int, timeout_s: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="orgmem-footprint-") as work:
        data = Path(work) / "data"
        keys = create_keys(data)
        started = time.monotonic()
        server = Server(data, timeout_s=timeout_s, cwd=tree)
        try:
            ready_s = time.monotonic() - started
            with client(server.url, keys["admin"]) as http:
                ingested = http.post("/v1/documents", json={"documents": documents(docs)})
                ingested.raise_for_status()
                # `after`: the server answers once its projections hold the documents (read your writes).
                http.post("/v1/query", json={"q": "sensor rig in building 3",
                                             "after": ingested.json()["position"]}).raise_for_status()
            return {"ready_s": ready_s, "rss": lr.rss_bytes(server.proc.pid), "tree_rss": lr.tree_rss_bytes(server.proc.pid)}
        finally:
            server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", type=Path, help="a source tree to start the server from (repeat)")
    parser.add_argument("--starts", type=int, default=3, help="starts per tree")
    parser.add_argument("--docs", type=int, default=200, help="documents ingested before RSS is read")
    parser.add_argument("--timeout-s", type=float, default=300.0)
    args = parser.parse_args(argv)
    trees = [t.resolve() for t in (args.tree or [Path(".")])]
    for tree in trees:
        if not (tree / "services" / "cli" / "__main__.py").is_file():
            parser.error(f"--tree {tree}: not an orgmem source tree")
    if args.starts < 1 or args.docs < 1:
        parser.error("--starts and --docs must be at least 1")
    runs: dict[Path, list[dict]] = {tree: [] for tree in trees}
    for _ in range(args.starts):
        for tree in trees:
            runs[tree].append(one_start(tree, args.docs, args.timeout_s))
            print(f"{tree}: {runs[tree][-1]}", file=sys.stderr)
    print("| tree | ready (s), median | server RSS (MiB), median | with children (MiB), median |")
    print("|---|---|---|---|")
    for tree, figures in runs.items():
        median = lambda key, scale=1.0: statistics.median(f[key] for f in figures) / scale  # noqa: E731
        print(f"| {tree} | {median('ready_s'):.2f} | {median('rss', MiB):.0f} | {median('tree_rss', MiB):.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

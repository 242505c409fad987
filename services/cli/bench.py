"""`orgmem bench retrieval ...`: the retrieval harness, which ships with the source (`bench/`),
not with the package. From a source checkout this delegates to `python -m bench.retrieval`; the
import is by name at run time, so the installed package never depends on the benchmarks."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path


def _harness():
    try:
        return importlib.import_module("bench.retrieval.cli")
    except ModuleNotFoundError:
        if (Path.cwd() / "bench" / "retrieval" / "cli.py").is_file():  # a checkout, run from its root
            sys.path.insert(0, str(Path.cwd()))
            return importlib.import_module("bench.retrieval.cli")
        raise


def cmd_retrieval(args) -> int:
    try:
        harness = _harness()
    except ModuleNotFoundError:
        print("orgmem bench: the benchmark harness ships with the source, not the package; run "
              "`python -m bench.retrieval ...` from the root of a checkout of the repository", file=sys.stderr)
        return 2
    return harness.main(args.passthrough, prog="orgmem bench retrieval")


def register(command, sub) -> None:
    bench = sub.add_parser("bench", help="benchmarks of orgmem itself (from a source checkout)")
    kinds = bench.add_subparsers(dest="bench", required=True)
    p = kinds.add_parser("retrieval", add_help=False,
                         help="retrieval quality on a public dataset from ../shared/data (no language model); "
                              "`orgmem bench retrieval --help` lists its options")
    # Its options are the harness's own: main() hands them over unparsed (args.passthrough).
    p.set_defaults(handler=cmd_retrieval, passthrough=[])

"""The `orgmem` command line."""

from __future__ import annotations

import argparse
import getpass
import importlib
import json
import logging
import sys
from pathlib import Path

from services.cli.common import (
    index_log,
    print_progress,
    read_jsonl,
    settings_from,
)
from services.errors import OrgmemError

log = logging.getLogger("orgmem")

# Modules with a `register(command, subparsers)` function that add their own sub-commands.
COMMAND_GROUPS = ["services.cli.query", "services.cli.connect", "services.cli.demo", "services.cli.maintenance", "services.cli.cluster", "services.cli.bench", "services.cli.keys", "services.cli.backup", "services.cli.mcp", "services.cli.erase", "services.cli.ask"]


def cmd_ingest(args: argparse.Namespace) -> int:
    from services.app.memory import append_documents
    from services.bootstrap import open_event_log
    from services.core.caller import Caller

    settings = settings_from(args)
    documents, errors = read_jsonl(Path(args.jsonl))
    for error in errors:
        print(error, file=sys.stderr)
    event_log = open_event_log(settings)
    position = 0
    for start in range(0, len(documents), args.batch):  # each batch is appended whole or not at all
        position = append_documents(event_log, documents[start : start + args.batch], Caller()).position
    event_log.close()
    print(f"appended {len(documents)} documents up to log position {position}; {len(errors)} bad lines")
    if not args.no_index:
        index_log(settings)
    return 1 if errors and not documents else 0


def cmd_rebuild(args: argparse.Namespace) -> int:
    from services.app.audit import record_admin_action
    from services.bootstrap import open_memory, rebuild_aside, rebuild_cluster_beside

    settings = settings_from(args)
    if settings.profile == "cluster":  # built beside the live projections, which serve meanwhile
        from services.bootstrap.cluster_rebuild import check_rebuild_beside

        check_rebuild_beside(settings)  # before the audit event: a refused rebuild records nothing
        with open_memory(settings) as memory:
            record_admin_action(memory.event_log, "*", "rebuild", actor=f"cli:{getpass.getuser()}")
        stats, counts = rebuild_cluster_beside(settings, progress=print_progress)
        print(f"rebuilt from {stats.events} events: {counts}")
        return 0
    # Embedded: from the log alone, whatever state the projections are in (built aside, swapped in).
    stats, counts = rebuild_aside(settings, progress=print_progress, audit=lambda event_log: record_admin_action(
        event_log, "*", "rebuild", actor=f"cli:{getpass.getuser()}"))
    print(f"rebuilt from {stats.events} events: {counts}")
    return 0


def cmd_optimize(args: argparse.Namespace) -> int:
    from services.bootstrap import open_memory

    with open_memory(settings_from(args)) as memory:
        memory.catch_up(progress=print_progress)
        built = memory.optimize_vectors()
        print("vector index graph built" if built else "this vector index has no offline build step")
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from services.bootstrap import open_memory

    with open_memory(settings_from(args)) as memory:
        stats = memory.stats()
        if (graph := memory.vector_status()) is not None:  # rows in the vector graph, searched exactly
            stats["vector_graph"] = graph
        print(json.dumps(stats, indent=1))
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from services.api.app import create_app
    from services.api.middleware import server_options
    from services.bootstrap import build_memory

    settings = settings_from(args)
    if args.port:
        settings.port = args.port
    if args.host:
        settings.host = args.host
    memory, lock = build_memory(settings)

    def close() -> None:
        memory.close()
        lock.release()

    app = create_app(settings, memory, on_close=close)
    print(f"orgmem serving {settings.data_dir} on http://{settings.host}:{settings.port} (docs at /docs)", file=sys.stderr)
    uvicorn.run(app, **server_options(settings))  # timeouts, limits, no proxy headers (services/api/middleware.py)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="orgmem", description="Event-sourced organizational memory server")
    # A level logging does not know would surface as a TypeError from configure_logging.
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
                        help="of orgmem's own logs; libraries log at WARNING unless DEBUG")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name: str, handler, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_)
        p.add_argument("--data", default=None, help="data folder (default ./orgmem-data or ORGMEM_DATA_DIR)")
        p.set_defaults(handler=handler)
        return p

    p = command("serve", cmd_serve, "run the HTTP API with its indexer")
    p.add_argument("--host")
    p.add_argument("--port", type=int)
    p.add_argument("--profile", choices=["embedded", "cluster"])
    p = command("ingest", cmd_ingest, "append documents from a JSONL file, then index them")
    p.add_argument("--jsonl", required=True)
    p.add_argument("--batch", type=int, default=500)
    p.add_argument("--no-index", action="store_true", help="append only; a running server indexes them")
    command("rebuild", cmd_rebuild, "replay the log into fresh projections, built aside and swapped in")
    command("stats", cmd_stats, "counts of the log and the projections")
    command("optimize", cmd_optimize, "build the vector index graph (offline: blocks for minutes on large stores)")
    # Command groups that live in their own modules register themselves here.
    for module in COMMAND_GROUPS:
        importlib.import_module(module).register(command, sub)
    return parser


def configure_logging(level: str) -> None:
    """orgmem's own loggers at `level`; libraries' at WARNING unless DEBUG is asked for: their INFO
    lines (onnxruntime's quantiser alone prints about a hundred on a first run) are noise on a
    user's terminal."""
    level = level.upper()
    logging.basicConfig(level=level if level == "DEBUG" else max(logging.getLevelName(level), logging.WARNING),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for ours in ("services", "workers", "schemas", "bench"):
        logging.getLogger(ours).setLevel(level)
    # kafka-python's network loop warns whenever one of its own steps ran past 100 ms, which an
    # indexer sharing its cores with the encoder does every few seconds: nothing to act on.
    logging.getLogger("kafka.net.selector").setLevel(logging.NOTSET if level == "DEBUG" else logging.ERROR)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unparsed = parser.parse_known_args(argv)
    if unparsed and getattr(args, "passthrough", None) is None:
        parser.error(f"unrecognized arguments: {' '.join(unparsed)}")
    if unparsed:
        args.passthrough = unparsed
    configure_logging(args.log_level)
    try:
        return args.handler(args)
    except OrgmemError as exc:
        print(f"orgmem: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

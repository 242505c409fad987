"""What the command groups share: settings from the arguments, times, progress lines, the JSONL
reader, and indexing after an append."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime
from pathlib import Path

from pydantic import ValidationError

from schemas.documents import MAX_TEXT_CHARS, DocumentIn
from services.errors import OrgmemError
from services.settings import Settings


def settings_from(args: argparse.Namespace) -> Settings:
    """The settings of a command: ORGMEM_ environment, with --data and --profile on top."""
    overrides = {"data_dir": Path(args.data)} if getattr(args, "data", None) else {}
    if getattr(args, "profile", None):
        overrides["profile"] = args.profile
    return Settings(**overrides)


def parse_time(value: str) -> datetime:
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an ISO date or time: {value!r}") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def print_progress(position, stats) -> None:
    """A replay's progress line on stderr (catch-up, rebuild)."""
    print(f"  indexed up to position {position}: {stats.rows_added} rows, {stats.skipped} skipped "
          f"({stats.events / max(stats.seconds, 1e-9):.0f} events/s)", file=sys.stderr)


# One JSONL line: a document at the text limit, with room for JSON escapes; a longer line is an
# error, read past in pieces rather than held.
MAX_LINE_CHARS = 8 * MAX_TEXT_CHARS


def read_jsonl(path: Path) -> tuple[list[DocumentIn], list[str]]:
    """Valid documents, and one message per bad line naming its line number and the problem. The
    file is read line by line, and a line over MAX_LINE_CHARS is refused without being held."""
    documents, errors = [], []
    with open(path, encoding="utf-8", errors="replace") as handle:
        number = 0
        while line := handle.readline(MAX_LINE_CHARS + 1):
            number += 1
            if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
                while (rest := handle.readline(MAX_LINE_CHARS)) and not rest.endswith("\n"):
                    pass
                errors.append(f"{path}:{number}: line: over {MAX_LINE_CHARS} characters, not read")
                continue
            if not line.strip():
                continue
            try:
                documents.append(DocumentIn.model_validate_json(line))
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'line'}: {e['msg']}" for e in exc.errors()[:5])
                errors.append(f"{path}:{number}: {problems}")
    return documents, errors


def index_log(settings: Settings) -> None:
    """Project the log here when no other process holds the data folder (after an append)."""
    from services.bootstrap import open_memory

    try:
        with open_memory(settings) as memory:
            memory.catch_up(progress=print_progress)
            print(f"indexed; {memory.stats()}")
    except OrgmemError as exc:
        print(f"not indexing here: {exc}; the process that holds the data folder indexes the log", file=sys.stderr)

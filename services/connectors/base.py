"""What every connector shares: the sink it writes to, its cursor, dead letters and its report."""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from schemas.documents import DocumentIn

# The sink takes a batch of documents and returns once they are durable in the event log.
Sink = Callable[[Sequence[DocumentIn]], None]


@dataclass(frozen=True)
class DeadLetter:
    """An input that could not be parsed: where it was and why. The rest of the batch goes on."""

    connector: str
    path: str
    reason: str
    at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())


@dataclass
class ConnectorReport:
    connector: str
    documents: int = 0  # documents handed to the sink in this run
    items_seen: int = 0  # source items read (files, messages, tickets)
    unchanged: int = 0  # items skipped because the cursor says they were done before
    dead_letters: list[DeadLetter] = field(default_factory=list)
    # Documents handed on whose (source, source_id) the tenant already holds: the write path skips
    # them as `duplicate_source`, so they add nothing. The count is complete; the list (source,
    # source_id, row_id of the row that holds it) stops at KNOWN_LISTED entries.
    already_known: int = 0
    known_items: list[dict] = field(default_factory=list)
    # Why the run stopped before the end (the sink refused a batch, a bug), or None when it finished.
    stopped: str | None = None

    def to_dict(self) -> dict:
        return {**asdict(self), "dead_letters": [asdict(d) for d in self.dead_letters]}


KNOWN_LISTED = 1000


class RunStopped(Exception):
    """A run that started and could not finish, with the report of what it did; the runner
    answers with that report (and the cause, `__cause__`) instead of nothing."""

    def __init__(self, report: ConnectorReport):
        super().__init__("connector run stopped")
        self.report = report


@contextmanager
def reporting(report: ConnectorReport) -> Iterator[ConnectorReport]:
    """Around the loop of a run: an exception that stops it becomes RunStopped with the report."""
    try:
        yield report
    except Exception as exc:
        raise RunStopped(report) from exc


class ConnectorState:
    """A connector's cursor: a JSON object kept in the data folder, written atomically.

    File-based connectors keep a fingerprint per input file; IMAP keeps UIDVALIDITY and the last
    UID per mailbox. Dead letters go to one JSONL file per data folder, for `orgmem connect
    dead-letters` to show.
    """

    def __init__(self, data_dir: Path, connector: str):
        self.root = Path(data_dir) / "connectors"
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = self.root / f"{_file_name(connector)}.cursor.json"
        self.connector = connector
        self.values: dict = json.loads(self.path.read_text()) if self.path.exists() else {}

    def save(self) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".cursor-")
        with os.fdopen(fd, "w") as handle:
            json.dump(self.values, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.path)

    def record_dead_letters(self, letters: Sequence[DeadLetter]) -> None:
        if not letters:
            return
        with open(self.root / "dead_letters.jsonl", "a", encoding="utf-8") as handle:
            for letter in letters:
                handle.write(json.dumps(asdict(letter)) + "\n")


def _file_name(name: str) -> str:
    """`name` as one safe file name: a tenant called `../x` must not write outside the folder."""
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,150}", name) and ".." not in name:
        return name
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100].lstrip(".") + "-" + hashlib.sha256(name.encode()).hexdigest()[:16]


def read_dead_letters(data_dir: Path) -> list[DeadLetter]:
    path = Path(data_dir) / "connectors" / "dead_letters.jsonl"
    if not path.exists():
        return []
    return [DeadLetter(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]

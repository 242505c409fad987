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
    # Files not read for their format, type or place, by why and how to include them: never silent.
    skipped: dict[str, int] = field(default_factory=dict)
    # Contract sources (services/connectors/runner.py): versions that replaced an earlier one
    # ({source, source_id, by}), versions removed in the source ({source, source_id, reason}) for
    # the caller's deletion policy, source ids the access map did not know, and what else to say.
    superseded: list[dict] = field(default_factory=list)
    removed: list[dict] = field(default_factory=list)
    unmapped: int = 0
    notes: list[str] = field(default_factory=list)

    def skip(self, why: str, count: int = 1) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + count

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
    UID per mailbox. Dead letters (their reasons may quote a document) go to the tenant's own JSONL
    file, `connectors/dead_letters/<tenant>.jsonl`, for `orgmem connect dead-letters` to show; a
    state made without a tenant (library use) writes the shared legacy file, which only an
    unrestricted reader sees.
    """

    def __init__(self, data_dir: Path, connector: str, tenant: str | None = None):
        self.root = Path(data_dir) / "connectors"
        self.root.mkdir(parents=True, exist_ok=True)
        self.path = self.root / f"{_file_name(connector)}.cursor.json"
        self.connector, self.tenant = connector, tenant
        self.dead_letters_path = dead_letters_file(data_dir, tenant)
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
        self.dead_letters_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Each line names its tenant too: a reader filters on it, whatever file it finds it in.
        tag = {} if self.tenant is None else {"tenant": self.tenant}
        fd = os.open(self.dead_letters_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            for letter in letters:
                handle.write(json.dumps(asdict(letter) | tag) + "\n")


def _file_name(name: str) -> str:
    """`name` as one safe file name: a tenant called `../x` must not write outside the folder."""
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,150}", name) and ".." not in name:
        return name
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)[:100].lstrip(".") + "-" + hashlib.sha256(name.encode()).hexdigest()[:16]


LEGACY_DEAD_LETTERS = "dead_letters.jsonl"  # <data>/connectors/: every tenant's, before they were apart


def dead_letters_file(data_dir: Path, tenant: str | None) -> Path:
    """Where a tenant's dead letters go (the shared legacy file for none)."""
    root = Path(data_dir) / "connectors"
    return root / LEGACY_DEAD_LETTERS if tenant is None else root / "dead_letters" / f"{_file_name(tenant)}.jsonl"


def _lines(path: Path) -> Iterator[dict]:
    # Line by line: a dead-letter file grows for as long as a connector keeps failing.
    if path.is_file():
        with path.open(encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    yield json.loads(line)


_LETTER_FIELDS = frozenset(DeadLetter.__dataclass_fields__)


def dead_letter_records(data_dir: Path, tenant: str | None = None) -> list[tuple[str | None, DeadLetter]]:
    """(tenant, letter) of the dead letters one reader may see, oldest first.

    With `tenant`: the lines of that tenant's file and the lines of the legacy shared file that
    name that tenant. A legacy line that names no tenant (written before tenants were apart) is
    nobody's for sure (its path and reason may be another tenant's document), so only an
    unrestricted reader (`tenant=None`, the operator's CLI) sees it, with every tenant's file."""
    root = Path(data_dir) / "connectors"
    files = [root / LEGACY_DEAD_LETTERS]
    if tenant is not None:
        files.append(dead_letters_file(data_dir, tenant))
    elif (root / "dead_letters").is_dir():
        files += sorted((root / "dead_letters").glob("*.jsonl"))
    found = []
    for path in files:
        for record in _lines(path):
            owner = record.get("tenant")
            if tenant is None or owner == tenant:
                found.append((owner, DeadLetter(**{k: v for k, v in record.items() if k in _LETTER_FIELDS})))
    return sorted(found, key=lambda pair: pair[1].at)


def read_dead_letters(data_dir: Path, tenant: str | None = None) -> list[DeadLetter]:
    """The dead letters of `tenant` (every one for None); see `dead_letter_records`."""
    return [letter for _, letter in dead_letter_records(data_dir, tenant)]

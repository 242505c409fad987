"""Ticket CSV exports (Jira's included), read through a column mapping; source = "csv:<file stem>"."""

from __future__ import annotations

# Absolute imports: this `csv` is the standard library's, not this module.
import csv
import io
from dataclasses import asdict, dataclass
from pathlib import Path

from pydantic import ValidationError

from schemas.documents import DocumentIn
from services.connectors.base import ConnectorReport, ConnectorState, DeadLetter, Sink
from services.connectors.files import Paths, run_files
from services.connectors.paths import PathGuard
from services.connectors.tickets.common import (
    CONNECTOR,
    UNKNOWN,
    Comment,
    Ticket,
    parse_when,
    ticket_documents,
)
from services.errors import TicketError


@dataclass(frozen=True)
class CsvMapping:
    """Which header names hold each field. A name may repeat in the header (Jira's CSV export repeats
    `Labels` and `Comment`): every column of that name is read. A comment cell of the form
    `date;author;body` (Jira's export) gives its own date and author; any other cell is a body
    dated by its row and authored by "unknown"."""

    id: str
    title: str
    text: str
    author: str
    date: str
    status: str | None = None
    priority: str | None = None
    assignee: str | None = None
    labels: str | None = None
    comments: str | None = None
    date_format: str | None = None  # strptime format when dates are neither ISO 8601 nor RFC 2822
    label_separator: str = ","


def parse_csv(data: bytes, path: Path, mapping: CsvMapping, *,
              acl_from_participants: bool = False) -> tuple[list[DocumentIn], list[DeadLetter], int]:
    """Rows are numbered from 1 after the header; a bad row is dead-lettered as `path#row-N`."""
    try:
        rows = csv.reader(io.StringIO(data.decode("utf-8-sig"), newline=""))
        header = [h.strip() for h in next(rows, [])]
    except (UnicodeDecodeError, csv.Error) as exc:
        return [], [DeadLetter(CONNECTOR, str(path), f"cannot read the CSV header: {exc}")], 0
    columns = {name: [i for i, h in enumerate(header) if h == col]
               for name, col in asdict(mapping).items()
               if col and name not in ("date_format", "label_separator")}
    missing = [f"{name}={getattr(mapping, name)!r}" for name, idx in columns.items() if not idx]
    if missing:
        return [], [DeadLetter(CONNECTOR, str(path), f"mapped column not in the header: {', '.join(missing)}")], 0
    docs: list[DocumentIn] = []
    letters: list[DeadLetter] = []
    n = 0
    try:
        for n, row in enumerate(rows, start=1):
            if not any(cell.strip() for cell in row):
                continue
            cells = {name: [row[i].strip() for i in idx if i < len(row)] for name, idx in columns.items()}
            first = {name: (values[0] if values else "") for name, values in cells.items()}
            try:
                docs.extend(_csv_row(first, cells, mapping, path, acl_from_participants))
            except (TicketError, ValidationError) as exc:
                letters.append(DeadLetter(CONNECTOR, f"{path}#row-{n}", str(exc)))
            except Exception as exc:  # a reader bug costs this row only
                letters.append(DeadLetter(CONNECTOR, f"{path}#row-{n}", f"cannot parse: {type(exc).__name__}: {exc}"))
    except csv.Error as exc:
        letters.append(DeadLetter(CONNECTOR, f"{path}#row-{n + 1}", f"CSV syntax: {exc}; later rows not read"))
    return docs, letters, n


def _csv_row(first: dict[str, str], cells: dict[str, list[str]], mapping: CsvMapping, path: Path,
             acl: bool) -> list[DocumentIn]:
    if not first["id"]:
        raise TicketError(f"column {mapping.id!r} (id) is empty")
    when = parse_when(first["date"], f"column {mapping.date!r}", mapping.date_format)
    comments = []
    for cell in cells.get("comments", []):
        if not cell:
            continue
        parts = cell.split(";", 2)
        try:
            stamp = parse_when(parts[0], "comment", mapping.date_format) if len(parts) == 3 else None
        except TicketError:
            stamp = None
        comments.append(Comment(parts[2].strip(), parts[1].strip() or UNKNOWN, stamp) if stamp
                        else Comment(cell, UNKNOWN, when))
    split = (x.strip() for cell in cells.get("labels", []) for x in cell.split(mapping.label_separator))
    labels = [x for x in split if x]
    ticket = Ticket(f"csv:{path.stem}", first["id"], first["title"], first["text"], first["author"] or UNKNOWN,
                    first["author"] or None, when, first.get("status") or None, first.get("priority") or None,
                    first.get("assignee") or None, None, labels, comments)
    return ticket_documents(ticket, acl_from_participants=acl)


def run_csv(paths: Paths, mapping: CsvMapping, sink: Sink, state: ConnectorState, *,
            acl_from_participants: bool = False, guard: PathGuard | None = None) -> ConnectorReport:
    """CSV files, or folders searched recursively for .csv."""
    return run_files(CONNECTOR, paths, (".csv",),
                     lambda data, path: parse_csv(data, path, mapping,
                                                  acl_from_participants=acl_from_participants),
                     sink, state, {"mapping": asdict(mapping), "acl": acl_from_participants}, guard)

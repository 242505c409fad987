"""Export: every stored row of a tenant, with its state and its history, page by page.

Rows are read from the row store (through `Memory.export_page`), so a row that an erasure purged
is not there to export. Memory stays bounded: one page of rows at a time goes to the sink (a JSONL
file, a Parquet file, an HTTP response). The export covers the rows projected when it began (the
checkpoint then); each row is written with its state and history as they are when its page is
read, so a row that maintenance changes while the export runs may show the newer state.

Every export is an audited act (docs/audit.md): who, the tenant, the format, the file, the rows.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from schemas.rows import Row, RowChange
from services.app.audit import record_admin_action
from services.app.memory import Memory
from services.core.positions import Checkpoints, lane_of
from services.core.scope import PUBLIC_ACL, acl_tokens

log = logging.getLogger(__name__)

PAGE_ROWS = 1000
FORMATS = ("jsonl", "parquet")


class RowSink(Protocol):
    """Where exported records go, a page at a time."""

    def write(self, records: Sequence[dict]) -> None: ...

    def close(self, complete: bool = True) -> None:
        """complete=False: the export failed; leave nothing that looks whole."""


@dataclass
class ExportSummary:
    rows: int
    checkpoint: int
    seconds: float


def export_record(row: Row, history: Sequence[RowChange]) -> dict:
    """One exported row: its fields (Python values: datetimes stay datetimes) and its history."""
    record = row.model_dump()
    record["history"] = [change.model_dump() for change in history]
    return record


def _json_default(value):
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def jsonl_line(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False, default=_json_default) + "\n"


def record_from_json(line: str | bytes) -> dict:
    """An export record read back from its JSONL line (validated as the row and history it names)."""
    data = json.loads(line)
    history = data.pop("history", [])
    return export_record(Row.model_validate(data), [RowChange.model_validate(h) for h in history])


def _readable(row: Row, readers: frozenset[str] | None) -> bool:
    if readers is None:
        return True
    return bool(set(acl_tokens(row.acl)) & ({PUBLIC_ACL} | set(readers)))


def record_pages(memory: Memory, tenant: str | None, readers: frozenset[str] | None = None,
                 page_rows: int = PAGE_ROWS, bound: Checkpoints | None = None) -> Iterator[list[dict]]:
    """Pages of export records of `tenant` (None: every tenant), in ingest order, that `readers`
    may read (None: every row), up to the checkpoints `bound` (default: when the first page is read)."""
    bound = memory.checkpoints() if bound is None else bound
    last_lane = max(bound, default=0)
    after: tuple[int, str] | None = None
    while True:
        page = memory.export_page(tenant, after, page_rows)
        if not page:
            return
        last = page[-1][0]
        after = (last.ingest_position, last.row_id)
        records = [export_record(row, history) for row, history in page
                   if bound.covers(row.ingest_position) and _readable(row, readers)]
        if records:
            yield records
        if not bound.covers(last.ingest_position) and lane_of(last.ingest_position) >= last_lane:
            return  # the rest was projected after the export began (ingest order runs lane by lane)


def export_rows(memory: Memory, sink: RowSink, tenant: str | None, readers: frozenset[str] | None = None,
                progress: Callable[[int], None] | None = None, page_rows: int = PAGE_ROWS) -> ExportSummary:
    """Write every record into `sink`, then close it; `progress(rows so far)` after each page."""
    started, count, checkpoint = time.monotonic(), 0, memory.checkpoints()
    try:
        for records in record_pages(memory, tenant, readers, page_rows, checkpoint):
            sink.write(records)
            count += len(records)
            if progress is not None:
                progress(count)
    except BaseException:
        sink.close(complete=False)  # a file cut short is never left under its name
        raise
    sink.close()
    return ExportSummary(count, checkpoint.summary(), time.monotonic() - started)


def audited_jsonl_chunks(memory: Memory, tenant: str, readers: frozenset[str] | None, actor: str,
                         file: str) -> Iterator[bytes]:
    """The JSONL export of a tenant as one chunk per page (a streamed HTTP response): the API's
    export, in the audit trail twice: `export.started` before the first byte can go
    out (an append that fails sends nothing; a stream cut short, or a server that dies half way,
    is still on record), then `export` when the stream ends, with the rows handed to the response
    and whether it ran to the end."""
    bound = memory.checkpoints()
    details = {"format": "jsonl", "file": file, "via": "api", "restricted": readers is not None,
               "checkpoint": bound.summary()}
    record_admin_action(memory.event_log, tenant, "export.started", actor, details)
    return _audited_stream(memory, tenant, readers, bound, actor, details)


def _audited_stream(memory: Memory, tenant: str, readers: frozenset[str] | None, bound: Checkpoints, actor: str,
                    details: dict) -> Iterator[bytes]:
    rows, complete = 0, False
    try:
        for records in record_pages(memory, tenant, readers, bound=bound):
            rows += len(records)  # counted before it is sent: the record errs on the side of more
            yield "".join(jsonl_line(r) for r in records).encode("utf-8")
        complete = True
    finally:  # also when the client went away (the generator is closed)
        try:
            record_admin_action(memory.event_log, tenant, "export", actor, {**details, "rows": rows, "complete": complete})
        except Exception:  # the bytes are sent; `export.started` stays as the record
            log.warning("the end of export %s of tenant %s could not be recorded", details["file"], tenant, exc_info=True)

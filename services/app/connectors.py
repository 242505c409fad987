"""Running a connector: one entry point for the CLI, the API and scheduled jobs.

The sink appends documents to the event log (the write path up to durability); the process that
owns the projections indexes them. A connector never writes a projection.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from schemas.documents import DocumentIn
from services.app.memory import append_documents
from services.connectors.base import ConnectorReport, ConnectorState
from services.core.caller import SYSTEM, Caller
from services.errors import OrgmemError
from services.ports import EventLog

ConnectorKind = Literal["email", "imap", "tickets", "csv", "meetings"]


def log_sink(event_log: EventLog, caller: Caller):
    counter = {"documents": 0, "position": 0}

    def sink(documents: Sequence[DocumentIn]) -> None:
        if documents:
            result = append_documents(event_log, documents, caller)
            counter["documents"] += len(documents)
            counter["position"] = result.position

    return sink, counter


def run_connector(
    kind: ConnectorKind,
    inputs: Sequence[str | Path],
    event_log: EventLog,
    data_dir: Path,
    caller: Caller = SYSTEM,
    **options,
) -> tuple[ConnectorReport, int]:
    """Run one connector over its inputs; return its report and the last log position it wrote."""
    sink, counter = log_sink(event_log, caller)
    state = ConnectorState(data_dir, f"{caller.tenant}.{kind}")
    paths = [Path(p) for p in inputs]
    if kind == "email":
        from services.connectors.mail_files import run_email

        report = run_email(paths, sink, state, **options)
    elif kind == "imap":
        from services.connectors.imap import run_imap

        report = run_imap(options.pop("imap"), sink, state, **options)
    elif kind == "tickets":
        from services.connectors.tickets import run_tickets

        report = run_tickets(paths, sink, state, **options)
    elif kind == "csv":
        from services.connectors.tickets.csv import CsvMapping, run_csv

        mapping = options.pop("mapping")
        report = run_csv(paths, mapping if isinstance(mapping, CsvMapping) else CsvMapping(**mapping), sink, state, **options)
    elif kind == "meetings":
        from services.connectors.meetings import run_meetings

        report = run_meetings(paths, sink, state, **options)
    else:
        raise OrgmemError(f"connector: unknown connector {kind!r}")
    return report, counter["position"]


def check_under_roots(paths: Sequence[str | Path], roots: Sequence[Path]) -> list[Path]:
    """Paths named over the API must lie under a configured connector root (no arbitrary reads)."""
    resolved_roots = [Path(r).resolve() for r in roots]
    out = []
    for index, raw in enumerate(paths):
        path = Path(raw).resolve()
        if not any(path == root or root in path.parents for root in resolved_roots):
            raise OrgmemError(f"paths.{index}: {raw} is not under a configured connector root")
        out.append(path)
    return out

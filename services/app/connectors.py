"""Running a connector: one entry point for the CLI, the API and scheduled jobs.

The sink appends documents to the event log (the write path up to durability); the process that
owns the projections indexes them. A connector never writes a projection.

A run reads only under its roots (`PathGuard`: the tenant's connector roots over the API, the
inputs named on the command line), never orgmem's data folder. It always answers with its report:
an item that cannot be read is a dead letter, and a run that stops early (the log refused a
batch) returns what it did with `stopped` set. The report also names every document the write
path will skip because the tenant already holds its (source, source_id), so that an item taken
by someone else first is seen, not silently dropped.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Literal

from schemas.documents import DocumentIn
from schemas.events import DocumentObserved, RowArchived, RowSuperseded
from services.app.log_lanes import lane_spans
from services.app.memory import append_documents
from services.connectors.base import (
    KNOWN_LISTED,
    ConnectorReport,
    ConnectorState,
    RunStopped,
)
from services.connectors.paths import PathGuard
from services.connectors.sources import DELETION_POLICIES, SOURCES, default_policy, source_named
from services.core.caller import SYSTEM, Caller
from services.core.write_rules import row_id_for
from services.errors import Invalid, NotFound
from services.ports import EventLog
from services.settings import Settings

log = logging.getLogger(__name__)

# The file and IMAP connectors; every contract source (services/connectors/sources) is a kind too.
ConnectorKind = Literal["email", "imap", "tickets", "csv", "meetings"] | str
_SAFE_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class KnownSources:
    """Which documents the write path will skip as `duplicate_source`. A document's row id is a
    hash of (tenant, source, source_id), so it is known when a stored row has that id (`stored`,
    the row store up to its checkpoint `after`) or a document of the tenant with that id is in the
    log after `after` (the projection may lag; this run's own earlier batches are there too).
    Without a row store (the CLI, which does not hold the data folder) the log is read from the
    start, once per run."""

    PAGE = 2000

    def __init__(self, event_log: EventLog, tenant: str,
                 stored: Callable[[Sequence[str]], set[str]] | None = None, after: int | None = None):
        self._log, self._tenant, self._stored = event_log, tenant, stored
        [(start, _)] = lane_spans(event_log, tenant)  # the tenant's lane of the log
        self._scanned = start if after is None else after
        self._logged: set[str] = set()

    def _catch_up(self) -> None:
        [(_, head)] = lane_spans(self._log, self._tenant)
        while self._scanned < head:
            events = self._log.read(self._scanned, self.PAGE)
            if not events:
                break
            for logged in events:
                event = logged.event
                if isinstance(event, DocumentObserved) and event.tenant == self._tenant and event.document.text.strip():
                    self._logged.add(event.row_id)
            self._scanned = events[-1].position

    def known(self, row_ids: Sequence[str]) -> set[str]:
        self._catch_up()
        hits = {r for r in row_ids if r in self._logged}
        rest = [r for r in row_ids if r not in hits]
        if self._stored is not None and rest:
            hits |= self._stored(rest)
        return hits

    def appended(self, row_ids: Sequence[str], first: int, last: int) -> None:
        """The run's own batch landed at first..last: nothing to read back when nobody wrote between."""
        if first == self._scanned + 1:
            self._logged.update(row_ids)
            self._scanned = last


def log_sink(event_log: EventLog, caller: Caller, known: KnownSources | None = None):
    """The sink of a run and its tally: documents appended, the last position, and the documents
    already known (count and the first KNOWN_LISTED as source, source_id, row_id)."""
    counter: dict = {"documents": 0, "position": 0, "already_known": 0, "known_items": []}

    def sink(documents: Sequence[DocumentIn]) -> None:
        if not documents:
            return
        ids = [row_id_for(caller.tenant, d) for d in documents]
        if known is not None:
            hits, batch = known.known(ids), set()
            for doc, row_id in zip(documents, ids, strict=True):
                if doc.source_id and (row_id in hits or row_id in batch):
                    counter["already_known"] += 1
                    if len(counter["known_items"]) < KNOWN_LISTED:
                        counter["known_items"].append({"source": doc.source, "source_id": doc.source_id,
                                                       "row_id": row_id})
                batch.add(row_id)
        result = append_documents(event_log, documents, caller)
        counter["documents"] += len(documents)
        counter["position"] = result.position
        if known is not None:
            known.appended(ids, result.position - len(documents) + 1, result.position)

    return sink, counter


def run_connector(
    kind: ConnectorKind,
    inputs: Sequence[str | Path],
    event_log: EventLog,
    data_dir: Path,
    caller: Caller = SYSTEM,
    *,
    guard: PathGuard | None = None,
    known: KnownSources | None = None,
    **options,
) -> tuple[ConnectorReport, int]:
    """Run one connector over its inputs; return its report and the last log position it wrote.

    `guard` says where the run may read (default: under the inputs, never `data_dir`); `known`
    how it tells documents the tenant already holds (default: by reading the log). Arguments that
    cannot be served raise before anything is read; once the run has started it always returns
    its report, with `stopped` set if it could not finish."""
    paths = [Path(p) for p in inputs]
    guard = guard or PathGuard.around(paths, [data_dir])
    sink, counter = log_sink(event_log, caller, known or KnownSources(event_log, caller.tenant))
    state = ConnectorState(data_dir, f"{caller.tenant}.{kind}", tenant=caller.tenant)
    deletions = options.pop("deletions", None)
    try:
        report = _dispatch(kind, paths, sink, state, guard, options)
    except RunStopped as stopped:  # anything else was refused before the run started (bad arguments)
        cause = stopped.__cause__
        log.error("connector %s stopped after %d documents", kind, counter["documents"], exc_info=cause)
        report = stopped.report
        report.stopped = f"{type(cause).__name__}: {cause}"[:1000]
    report.already_known = counter["already_known"]
    report.known_items = counter["known_items"]
    position = _record_changes(event_log, caller, report, deletions or default_policy(kind)) or counter["position"]
    return report, position


def _dispatch(kind: str, paths: list[Path], sink, state: ConnectorState, guard: PathGuard,
              options: dict) -> ConnectorReport:
    if kind == "email":
        from services.connectors.mail_files import run_email

        return run_email(paths, sink, state, guard=guard, **options)
    if kind == "imap":
        from services.connectors.imap import run_imap

        return run_imap(options.pop("imap"), sink, state, **options)
    if kind == "tickets":
        from services.connectors.tickets import run_tickets

        return run_tickets(paths, sink, state, guard=guard, **options)
    if kind == "csv":
        from services.connectors.tickets.csv import CsvMapping, run_csv

        mapping = options.pop("mapping")
        mapping = mapping if isinstance(mapping, CsvMapping) else CsvMapping(**mapping)
        return run_csv(paths, mapping, sink, state, guard=guard, **options)
    if kind == "meetings":
        from services.connectors.meetings import run_meetings

        return run_meetings(paths, sink, state, guard=guard, **options)
    if kind in SOURCES:
        from services.connectors.runner import run_source

        access = options.pop("access", None)
        return run_source(source_named(kind), paths, sink, state, guard=guard, access=access, options=options)
    raise Invalid(f"connector: unknown connector {kind!r}")


# --- what a source's run changed: supersessions and deletions --------------------------------------


def _record_changes(event_log: EventLog, caller: Caller, report: ConnectorReport, policy: str) -> int:
    """Append what the run found: each replaced version superseded by its successor, and each
    removed version archived when the policy is "mark". Under "erase" the removals stay in the
    report for `erase_removed`, which needs the projections (the caller holds them). Returns the
    last position written, 0 for none."""
    if policy not in DELETION_POLICIES:
        raise Invalid(f"deletions: {policy!r} is not one of {', '.join(DELETION_POLICIES)}")
    events: list = [RowSuperseded(tenant=caller.tenant, row_id=_row_of(caller.tenant, s["source"], s["source_id"]),
                                  superseded_by=_row_of(caller.tenant, s["source"], s["by"]),
                                  reason=f"edited in {s['source']}") for s in report.superseded]
    for removal in report.removed:
        removal["policy"] = policy
        if policy == "mark":
            events.append(RowArchived(tenant=caller.tenant, row_id=_row_of(caller.tenant, removal["source"],
                                                                         removal["source_id"]),
                                      reason=removal["reason"]))
            removal["applied"] = "archived"
        else:
            removal["applied"] = "pending"  # erase_removed applies it
    if not events:
        return 0
    logged = event_log.append(events)
    return logged[-1].position if logged else 0


def _row_of(tenant: str, source: str, source_id: str) -> str:
    return row_id_for(tenant, DocumentIn(text="-", source=source, source_id=source_id))


def erase_removed(memory, tenant: str, report: ConnectorReport, actor: str, data_dir: Path | None = None) -> int:
    """Erase (crypto-shred) each version the run found removed under the "erase" policy, as
    `POST /v1/admin/erasures` would, one erasure per version, each audited. Returns how many."""
    from services.app.erasure import erase

    erased = 0
    for removal in report.removed:
        if removal.get("applied") != "pending":
            continue
        try:
            erase(memory, tenant, actor=actor, reason=removal["reason"], source=removal["source"],
                  source_id=removal["source_id"], data_dir=data_dir)
            removal["applied"] = "erased"
            erased += 1
        except NotFound:
            removal["applied"] = "nothing stored"  # never ingested (refused, a duplicate text)
        except Exception as exc:  # the next removals still go; this one is reported, not lost
            log.exception("connector %s: erasing %s failed", report.connector, removal["source_id"])
            removal["applied"] = f"failed: {type(exc).__name__}: {exc}"[:300]
    return erased


# --- where a tenant's runs may read ---------------------------------------------------------------


def connector_roots_for(settings: Settings, tenant: str) -> list[Path]:
    """The tenant's own roots (`connector_tenant_roots`), else the roots every other tenant shares
    (`connector_roots`), else `<data_dir>/inbox/<tenant>`: by default no tenant reads another's."""
    if tenant in settings.connector_tenant_roots:
        return list(settings.connector_tenant_roots[tenant])
    if settings.connector_roots:
        return list(settings.connector_roots)
    if _SAFE_TENANT.fullmatch(tenant) and ".." not in tenant:
        return [Path(settings.data_dir) / "inbox" / tenant]
    return []  # a tenant name that is not a safe folder name gets no default inbox


def protected_paths(settings: Settings) -> list[Path]:
    """What no connector may read: the data folder (keys, log, row store, cursors) and the key file."""
    return [Path(settings.data_dir), *([settings.auth.keys_file] if settings.auth.keys_file else [])]


def guard_for(settings: Settings, tenant: str) -> PathGuard:
    return PathGuard(connector_roots_for(settings, tenant), protected_paths(settings))


def check_under_roots(paths: Iterable[str | Path], guard: PathGuard) -> list[Path]:
    """Paths named over the API must lie under the caller's connector roots, by their real path
    (a link named in the request is judged by where it leads), and outside the data folder."""
    out = []
    for index, raw in enumerate(paths):
        why = guard.refusal(Path(raw))
        if why:
            raise Invalid(f"paths.{index}: {raw} is {why}")
        out.append(Path(raw).resolve())
    return out

"""The runner every contract source shares: exports in, documents to the sink, and what changed.

For each input (a folder or a .zip, `open_tree`) it reads what the source finds and keeps, in the
source's cursor, each item's versions (their source ids and parts), the current one and its date.
From that it tells:

- a version seen before: unchanged, nothing handed on (a rerun adds nothing);
- a new version of a known item (an edited message, a page's next revision): its document goes
  in and the current one is *superseded* by it (the caller appends `RowSuperseded`, so the
  version note says which is current);
- a removal: a `Removed` from the source, a new version that lacks parts an earlier one held (a
  message deleted from a thread: every version still holding it is removed), or an item the
  export no longer holds (below). The caller applies the source's deletion policy (erase or mark).
  For `dated_exports`, a lost part the source dated (`Version.part_dates`) outside the days this
  run saw in its container is not deleted, only outside the export (a Slack export of last week
  lacks a thread's earlier replies): the new version supersedes the old, and the notes count them.

An item is judged gone by absence only inside what this run could see: its container (the part
of its id before the first "/": a channel, a space) was read in this run and, for sources whose
exports cover a date range (`dated_exports`), the item's date lies inside the dates this run saw
in that container. A run with any dead letter removes nothing (a malformed day file must never
read as "every thread of that day was deleted"); it says so in its notes, and the next clean run
applies what was deferred.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from schemas.documents import MAX_TAGS, DocumentIn
from services.connectors.access import AccessMap
from services.connectors.base import ConnectorReport, ConnectorState, DeadLetter, Sink, reporting
from services.connectors.contract import Removed, Source, Version, source_id_of
from services.connectors.paths import PathGuard, PathRefused
from services.connectors.trees import TreeRefused, open_tree

log = logging.getLogger(__name__)

BATCH = 500


@dataclass
class _Batch:
    """Documents waiting for the sink, and the supersessions that hold once they are in the log."""

    documents: list[DocumentIn] = field(default_factory=list)
    supersessions: list[tuple[str, str]] = field(default_factory=list)


class _Run:
    def __init__(self, source: Source, sink: Sink, state: ConnectorState, access: AccessMap,
                 report: ConnectorReport, absence: bool = True):
        self.source, self.sink, self.state, self.access, self.report = source, sink, state, access, report
        self.absence = absence  # False (--partial): what the export lacks is not deleted
        self.kept_parts = 0  # versions that lost parts in a partial run, superseded and not removed
        self.items: dict[str, dict] = state.values.setdefault("items", {})
        self.batch = _Batch()
        self.seen: set[str] = set()
        self.windows: dict[str, tuple[str, str]] = {}  # container -> (first, last) date seen this run
        # container -> (first, last) UTC day of any item or part this run saw: the days a dated
        # export covers, against which a lost part is judged deleted (inside) or not in it (outside).
        self.days: dict[str, tuple[str, str]] = {}
        self.dated = bool(getattr(source, "dated_exports", False))
        self.lost: list[_Lost] = []  # versions that lack parts, judged once every day is seen
        self.outside_parts = self.outside_items = 0
        # Removals found (item, version, reason), applied at the end of a clean run; and the
        # supersession each deleted-part version stands for when they are not.
        self.removals: list[tuple[str, str, str]] = []
        self.instead: list[tuple[str, str]] = []

    # --- what the source found ------------------------------------------------------------------
    def version(self, found: Version) -> None:
        self.report.items_seen += 1
        record = self.items.setdefault(found.item, {"versions": {}, "current": None})
        self.seen.add(found.item)
        date = found.document.date.isoformat() if found.document.date else None
        container = _container(found.item)
        _widen(self.windows, container, date)
        for day in (date, *found.part_dates.values()):
            _widen(self.days, container, day[:10] if day else None)
        if found.version in record["versions"]:
            self.report.unchanged += 1
            return
        sid = source_id_of(found)
        acl = self.access.acl(self.source.name, found.readers, found.private, found.document.acl, found.group)
        if len(acl) > MAX_TAGS:
            why = (f"{len(acl)} readers, over the access list's {MAX_TAGS}: map the group they form"
                   f"{f' ({found.group})' if found.group else ''} to an orgmem group in the access map")
            self.dead_letter(DeadLetter(self.source.name, f"{self.source.name}:{sid}", why))
            return
        try:
            document = DocumentIn.model_validate(found.document.model_dump() | {
                "source": self.source.name, "source_id": sid, "acl": acl})
        except ValidationError as exc:
            self.dead_letter(DeadLetter(self.source.name, f"{self.source.name}:{sid}", f"not a valid document: {exc}"[:1000]))
            return
        self.batch.documents.append(document)
        current = record["versions"].get(record["current"] or "")
        if current is not None and not current.get("gone"):
            # Every live version counts, not only the current one: after a partial run the current
            # version may lack a part that earlier ones still hold.
            held_parts = {p for v in record["versions"].values() if not v.get("gone") for p in v.get("parts", [])}
            lost = held_parts - set(found.parts)
            if lost and not self.absence:
                # A partial export may simply not hold the rest of a thread: nothing it lacks is
                # deleted, so the new version supersedes the old one, which stays in the record.
                self.kept_parts += 1
                self.batch.supersessions.append((current["sid"], sid))
            elif lost:
                # Judged at the end of the run, once the days this run saw are known.
                holders = {version: set(held.get("parts", [])) & lost for version, held in record["versions"].items()
                           if not held.get("gone") and set(held.get("parts", [])) & lost}
                dates = record.get("part_dates", {})
                self.lost.append(_Lost(found.item, current["sid"], sid, holders, {p: dates.get(p) for p in lost}))
            else:
                self.batch.supersessions.append((current["sid"], sid))
        if found.part_dates:
            record.setdefault("part_dates", {}).update(found.part_dates)
        record["versions"][found.version] = {"sid": sid, "parts": sorted(found.parts)}
        record["current"], record["date"] = found.version, date
        record.pop("gone", None)
        if len(self.batch.documents) >= BATCH:
            self.flush()

    def removed(self, found: Removed) -> None:
        self.report.items_seen += 1
        self.seen.add(found.item)
        record = self.items.get(found.item)
        for version, held in (record or {}).get("versions", {}).items():
            if not held.get("gone"):
                self.removals.append((found.item, version, found.reason))

    def dead_letter(self, letter: DeadLetter) -> None:
        self.report.dead_letters.append(letter)
        self.state.record_dead_letters([letter])

    # --- the end of a run -----------------------------------------------------------------------
    def judge_lost(self) -> None:
        """Each lost part inside the days this run saw (or undated, or of an undated source) was
        deleted: every version still holding one goes. A version that lost only parts dated
        outside them is superseded: they are outside this export, not deleted."""
        for lost in self.lost:
            first, last = self.days.get(_container(lost.item), ("", ""))
            deleted = {part for part, date in lost.dates.items()
                       if not self.dated or not date or first <= date[:10] <= last}
            outside = len(lost.dates) - len(deleted)
            self.outside_parts += outside
            self.outside_items += bool(outside)
            if not deleted:
                self.report.superseded.append({"source": self.source.name, "source_id": lost.current, "by": lost.sid})
                continue
            for version, held in lost.holders.items():
                if held & deleted:
                    self.removals.append((lost.item, version, f"a part was deleted in {self.source.name}"))
            self.instead.append((lost.current, lost.sid))
        if self.outside_parts:
            self.report.notes.append(
                f"{self.outside_parts} messages or parts that {self.outside_items} items held before are not in this "
                "export but dated outside the days it holds for their channel: not deleted, so the versions holding "
                "them are kept (superseded), unless they also hold a part deleted inside those days")

    def absent(self, dated: bool) -> None:
        """Items of a container this run read, inside its dates, that the run did not see."""
        for item, record in self.items.items():
            if item in self.seen or record.get("gone"):
                continue
            window = self.windows.get(_container(item))
            if window is None:
                continue
            date = record.get("date")
            if dated and (date is None or not window[0] <= date <= window[1]):
                continue
            for version, held in record["versions"].items():
                if not held.get("gone"):
                    self.removals.append((item, version, f"no longer in the {self.source.name} export"))

    def settle(self) -> None:
        """Apply the removals (a clean run), or defer them and keep the versions superseded."""
        if self.removals and self.report.dead_letters:
            self.report.notes.append(
                f"{len(self.removals)} removals not applied: this run had dead letters, and a malformed file "
                "must never read as a deletion; the removed versions are superseded instead (erase one by hand "
                "with `orgmem erase --source ... --source-id ...`), and a clean rerun applies the rest")
            self.report.superseded.extend({"source": self.source.name, "source_id": old, "by": new}
                                          for old, new in self.instead)
        else:
            for item, version, reason in self.removals:
                held = self.items[item]["versions"][version]
                if held.get("gone"):
                    continue
                held["gone"] = True
                self.report.removed.append({"source": self.source.name, "source_id": held["sid"], "reason": reason})
            for item in {item for item, _, _ in self.removals}:
                record = self.items[item]
                if all(h.get("gone") for h in record["versions"].values()):
                    record["gone"] = True
        self.state.save()

    def flush(self) -> None:
        batch, self.batch = self.batch, _Batch()
        if batch.documents:
            self.sink(batch.documents)
            self.report.documents += len(batch.documents)
        self.report.superseded.extend({"source": self.source.name, "source_id": old, "by": new}
                                      for old, new in batch.supersessions)
        self.state.save()


def _widen(spans: dict[str, tuple[str, str]], container: str, value: str | None) -> None:
    """Stretch a container's (first, last) span to hold `value`; an undated value still marks the
    container as read this run, with an empty span until a dated one comes."""
    first, last = spans.get(container, (value or "", value or ""))
    if value:
        first, last = min(first or value, value), max(last, value)
    spans[container] = (first, last)


@dataclass
class _Lost:
    """A new version lacking parts earlier ones held: the item, the current and new source ids,
    each live version with the lost parts it holds, and each lost part's date (None: undated)."""

    item: str
    current: str
    sid: str
    holders: dict[str, set[str]]
    dates: dict[str, str | None]


def _container(item: str) -> str:
    return item.split("/", 1)[0] if "/" in item else ""


def run_source(source: Source, inputs: Iterable[str | Path], sink: Sink, state: ConnectorState, *,
               guard: PathGuard, access: AccessMap | None = None,
               options: Mapping[str, object] | None = None) -> ConnectorReport:
    """Read every input with `source`; hand its new versions to the sink; return the report with
    `superseded` and `removed` filled for the caller to apply (see the module doc)."""
    report = ConnectorReport(source.name)
    options = dict(options or {})
    run = _Run(source, sink, state, access or AccessMap(), report, absence=bool(options.get("absence", True)))
    with reporting(report):
        for raw in inputs:
            path = Path(raw)
            try:
                tree = open_tree(path, guard)
            except (PathRefused, TreeRefused) as exc:
                run.dead_letter(DeadLetter(source.name, str(path), getattr(exc, "reason", None) or str(exc)))
                continue
            except OSError as exc:
                run.dead_letter(DeadLetter(source.name, str(path), f"cannot read: {exc.strerror or exc}"))
                continue
            try:
                for refused in tree.refused:
                    run.dead_letter(DeadLetter(source.name, refused.path, refused.reason))
                _read(run, source, tree, options)
            finally:
                tree.close()
        run.flush()
        run.judge_lost()
        if run.absence and not report.dead_letters:
            run.absent(run.dated)
        if run.kept_parts:
            report.notes.append(f"{run.kept_parts} items lack messages or parts an earlier export held; a partial "
                                "run removes nothing, so their earlier versions stay (superseded): run over a "
                                "full export to apply deletions")
        run.settle()
    report.unmapped = len(run.access.unmapped)
    return report


def _read(run: _Run, source: Source, tree, options: Mapping[str, object]) -> None:
    try:
        for found in source.read(tree, options):
            if isinstance(found, Version):
                run.version(found)
            elif isinstance(found, Removed):
                run.removed(found)
            elif isinstance(found, DeadLetter):
                run.dead_letter(found)
        # What the source passed over in this export (a .doc, an image), with its hint, for the report.
        for why, count in getattr(source, "skipped", {}).items():
            run.report.skip(why, count)
    except Exception as exc:
        # A source bug or a pathological export costs the rest of this export only.
        log.exception("%s: stopped reading %s", source.name, tree.label)
        run.dead_letter(DeadLetter(source.name, tree.label, f"the source stopped reading this export: "
                                                            f"{type(exc).__name__}: {exc}"[:1000]))

"""Erasure by crypto-shredding (docs/erasure.md): destroy the data keys a document is sealed
under, record the erasure, and purge every projection.

The log keeps every event: what was erased stays there as ciphertext nobody can open, and the
`ErasureRecorded` event says who erased how many rows, when and why. Finding what to erase reads
the log as stored — the key ids in each sealed envelope — so nothing is decrypted to find a
subject's documents. Then:

- erasing a row destroys its own key and its text's key, so every repeat of that text (skipped
  as a duplicate, or re-ingested later) is erased with it;
- erasing a source item does the same for the row that item became;
- erasing a subject destroys the person's key (every document naming them no longer opens) and
  the own and text keys of each of those documents, so re-importing one adds nothing;
- a row that maintenance derived from an erased row is erased too (its own key), and the other
  rows it had archived are restored, each with a `RowRestored` naming the erasure.

The projections purge the rows when they apply the `ErasureRecorded` event (services/app/
projection.py), so every indexer of the cluster does it too; `erase` waits for it here.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from schemas.documents import DocumentIn
from schemas.events import (
    AdminActionRecorded,
    DocumentObserved,
    ErasureRecorded,
    RowDerived,
    RowRestored,
)
from services.app.log_lanes import scan
from services.app.memory import Memory
from services.app.sealing import SealingEventLog, name_forms
from services.core.write_rules import row_id_for
from services.errors import Invalid, NotFound, NotReady

log = logging.getLogger(__name__)

_PAGE = 2000


@dataclass(frozen=True)
class Envelope:
    """What the log says in clear of one sealed document: its row, its key ids, its sources."""

    tenant: str
    row_id: str
    derived: bool
    keys: tuple[str, ...]
    sources: tuple[str, ...] = ()


@dataclass
class ErasureResult:
    erasure_id: str
    by: str
    row_ids: list[str]
    derived_row_ids: list[str] = field(default_factory=list)
    restored_row_ids: list[str] = field(default_factory=list)
    keys_destroyed: int = 0
    dead_letters_dropped: int = 0
    position: int = 0
    purged: bool = False  # the projections have applied the erasure (False: still running, they will)


def _sealing_log(memory: Memory) -> SealingEventLog:
    event_log = memory.event_log  # a SealingEventLog, maybe behind the disk guard (which forwards)
    if getattr(event_log, "sealer", None) is None:
        raise Invalid("erasure: this memory stores documents unencrypted (ORGMEM_ERASURE__ENCRYPT=false), so the "
                      "log would keep the text; erasure needs encryption on")
    return event_log


def envelopes(event_log: SealingEventLog, tenant: str | None = None) -> Iterator[Envelope]:
    """Every sealed document of the log (of one tenant), as stored: nothing is opened."""
    for logged in scan(event_log, event_log.read_sealed, tenant, _PAGE):
        event = logged.event
        if isinstance(event, (DocumentObserved, RowDerived)) and event.sealed is not None:
            if tenant is None or event.tenant == tenant:
                yield Envelope(event.tenant, event.row_id, isinstance(event, RowDerived), tuple(event.sealed.keys),
                               tuple(event.sources) if isinstance(event, RowDerived) else ())


def _rows_of_source(event_log: SealingEventLog, tenant: str, source_id: str) -> set[str]:
    """Rows whose document came with `source_id` (from any source): the one search that opens
    documents, since a source id is sealed with the rest."""
    return {logged.event.row_id for logged in scan(event_log, event_log.read, tenant, _PAGE)
            if isinstance(logged.event, DocumentObserved) and logged.event.tenant == tenant
            and logged.event.document is not None and logged.event.document.source_id == source_id}


def erase(memory: Memory, tenant: str, *, actor: str, reason: str, row_id: str | None = None,
          source_id: str | None = None, source: str | None = None, subject: str | None = None,
          data_dir: Path | None = None, wait_s: float = 300.0) -> ErasureResult:
    """Erase one row, one source item or one subject's documents of `tenant` (see the module doc)."""
    event_log = _sealing_log(memory)
    sealer = event_log.sealer
    reason = (reason or "").strip()
    if not reason:
        raise Invalid("reason: an erasure needs a reason (it is kept in the audit log)")
    if sum(x is not None and x != "" for x in (row_id, source_id, subject)) != 1:
        raise Invalid("name exactly one of row_id, source_id or subject")
    known = list(envelopes(event_log, tenant))
    subject_keys: set[str] = set()
    if row_id:
        by, target, matched = "row", row_id, {row_id}
    elif source_id:
        by, target = "source", sealer.target_hash(tenant, "source", source or "", source_id)
        if source is not None:
            matched = {row_id_for(tenant, DocumentIn(text="-", source=source, source_id=source_id))}
        else:
            matched = _rows_of_source(event_log, tenant, source_id)
    else:
        forms = name_forms(subject or "")
        if not forms:
            raise Invalid("subject: empty name")
        by, target = "subject", sealer.subject_hash(tenant, " ".join(sorted(forms)))
        subject_keys = set(sealer.subject_key_ids(tenant, sorted(forms)).values())
        matched = {e.row_id for e in known if subject_keys & set(e.keys)}
    matched &= {e.row_id for e in known}
    if not matched:
        raise NotFound(f"erasure: no stored document of tenant {tenant!r} matches that {by}")

    destroy = set(subject_keys) | {k for e in known if e.row_id in matched for k in e.keys[:2]}
    erased = {e.row_id for e in known if destroy & set(e.keys)}
    derived: set[str] = set()
    grew = True
    while grew:  # a row derived from an erased row, transitively
        grew = False
        for e in known:
            if e.derived and e.row_id not in erased and erased & set(e.sources):
                erased.add(e.row_id)
                derived.add(e.row_id)
                destroy.add(e.keys[0])
                grew = True
    # Rows erased before (their own key is gone already) are not erased again.
    before = sealer.keys.destroyed(sorted({e.keys[0] for e in known if e.row_id in erased}))
    erased -= {e.row_id for e in known if e.keys[0] in before}
    if not erased:
        raise NotFound(f"erasure: every document of tenant {tenant!r} matching that {by} is erased already")
    restored = _to_restore(memory, {s for e in known if e.row_id in derived for s in e.sources} - erased)
    needles = _needles(memory, erased, subject)

    erasure_id = uuid.uuid4().hex
    destroyed = sealer.keys.destroy(sorted(destroy), erasure_id)
    events = [ErasureRecorded(tenant=tenant, erasure_id=erasure_id, actor=actor, reason=reason, by=by, target=target,
                              row_ids=sorted(erased), derived_row_ids=sorted(derived), restored_row_ids=restored,
                              rows=len(erased), keys_destroyed=destroyed)]
    events += [RowRestored(tenant=tenant, row_id=rid, reason=f"erasure {erasure_id}: the row merged from it was erased")
               for rid in restored]
    logged = memory.append(events)
    dropped = _drop_letters(sealer, data_dir, tenant, needles, erasure_id) if data_dir is not None else 0
    position = logged[-1].position
    log.info("erasure %s by %s: %d rows, %d keys destroyed", erasure_id, actor, len(erased), destroyed)
    return ErasureResult(erasure_id, by, sorted(erased), sorted(derived), restored, destroyed, dropped, position,
                         purged=_projected(memory, position, wait_s))


def _projected(memory: Memory, position: int, wait_s: float) -> bool:
    """Apply the log up to the erasure here where this process projects (a projector's runs are
    serialised, so an indexer thread may be at it too), or wait for the indexers."""
    try:
        memory.catch_up()
    except NotReady:
        return False
    return memory.wait_for(position, wait_s)


def _to_restore(memory: Memory, sources: set[str]) -> list[str]:
    """The sources of erased derived rows that the derivation left archived."""
    return sorted(rid for rid in sources if (row := memory.stored_row(rid)) is not None and row.state == "archived")


def _needles(memory: Memory, erased: set[str], subject: str | None) -> set[str]:
    """What identifies the erased documents in a dead letter: the subject's names, and the row
    ids and source ids of the erased rows (read before the purge)."""
    needles = set(name_forms(subject or ""))
    for rid in erased:
        needles.add(rid)
        row = memory.stored_row(rid)
        if row is not None and row.source_id:
            needles.add(row.source_id.lower())
    return {n for n in needles if len(n) >= 3}


def drop_dead_letters(data_dir: Path, drop: Callable[[str | None, str, str], bool]) -> int:
    """Rewrite the dead-letter files without the letters `drop(tenant, line, text)` names (their
    path or reason may quote the document). Each file is replaced whole, so no old copy stays."""
    root = Path(data_dir) / "connectors"
    files = [root / "dead_letters.jsonl", *sorted((root / "dead_letters").glob("*.jsonl"))] if root.is_dir() else []
    dropped = 0
    for path in files:
        if not path.is_file():
            continue
        lines = [x for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
        kept = []
        for line in lines:
            record = json.loads(line)
            text = f"{record.get('path', '')}\n{record.get('reason', '')}".lower()
            if drop(record.get("tenant"), line, text):
                dropped += 1
            else:
                kept.append(line)
        if len(kept) != len(lines):
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".dead-letters-")
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write("".join(f"{x}\n" for x in kept))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
    return dropped


def _letter_id(sealer, tenant: str | None, line: str) -> str:
    """A dropped dead letter's tombstone id: a restore of an older backup brings the line back,
    and `purge_erased` recognises it by this id (tombstones outlive restores; names are not kept)."""
    return "l." + sealer.target_hash(tenant or "", "dead-letter", line)


def _drop_letters(sealer, data_dir: Path, tenant: str, needles: set[str], erasure_id: str) -> int:
    if not needles:
        return 0
    lines: list[tuple[str | None, str]] = []

    def drop(owner, line, text):
        if owner in (tenant, None) and any(n in text for n in needles):
            lines.append((owner, line))
            return True
        return False

    dropped = drop_dead_letters(data_dir, drop)
    if lines:
        sealer.keys.destroy([_letter_id(sealer, owner, line) for owner, line in lines], erasure_id)
    return dropped


def purge_erased(memory: Memory, data_dir: Path | None = None) -> int:
    """Purge from every projection each row whose data keys are destroyed; idempotent. After a
    restore of a backup older than an erasure, the restored rows and indexes still hold what the
    erasure purged (their keys are gone); this removes them. Returns how many rows it purged."""
    event_log = memory.event_log
    if getattr(event_log, "sealer", None) is None:
        return 0
    known = list(envelopes(event_log))
    dead = event_log.sealer.keys.destroyed(sorted({k for e in known for k in e.keys}))
    by_tenant: dict[str, set[str]] = {}
    for e in known:
        if dead & set(e.keys):
            by_tenant.setdefault(e.tenant, set()).add(e.row_id)
    purged = 0
    if data_dir is not None:
        sealer = event_log.sealer
        found: list[str] = []
        drop_dead_letters(data_dir, lambda owner, line, _: found.append(_letter_id(sealer, owner, line)) and False)
        gone = sealer.keys.destroyed(found)
        if gone:
            drop_dead_letters(data_dir, lambda owner, line, _: _letter_id(sealer, owner, line) in gone)
    for tenant, row_ids in sorted(by_tenant.items()):
        present = [rid for rid in sorted(row_ids) if memory.stored_row(rid) is not None]
        if present:
            count = len(memory.purge_rows(tenant, present))
            purged += count
            # A restored log may predate the erasure: the audit trail says it was applied again.
            memory.append([AdminActionRecorded(tenant=tenant, action="erasure_reapplied", actor="purge_erased",
                                               details={"rows": count, "row_ids": present})])
    return purged

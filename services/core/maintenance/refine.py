"""MemRefine: keep a tenant's active rows within a storage budget, and revert any run.

Similarity only proposes pairs; the judge decides delete, merge or preserve. The planner is
pure: the job hands it the tenant's active rows and a neighbour function backed by the vector
index, then loops `next_pair` -> judge -> `apply`, appending the events `apply` returns.
It stops when the budget holds, when no unjudged pair is left (facts take precedence over the
budget), or when the judge-call cap is reached. Only rows of one access list are ever paired
(see `access`): a pair of different lists is counted, never judged.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from schemas.events import Event, RowArchived, RowDerived, RowRestored, RowSuperseded
from schemas.rows import Row
from services.core.maintenance.access import row_access, same_access
from services.core.maintenance.consolidation import (
    Neighbours,
    ingest_order,
    is_candidate,
    merge_events,
)
from services.core.maintenance.judging import PairDecision
from services.errors import IncompatibleAccess

StopReason = Literal["budget_reached", "no_candidates", "call_cap", "stopped"]

# The paper measures a store as its entries serialised to JSON (ensure_ascii=False) over the
# fields its implementation keeps. Ours: what a row says and where it came from. State,
# positions and timestamps of ingestion are bookkeeping of equal size for every row, and the
# embedding is a fixed 384 floats, so neither changes which budget a merge or delete meets.
SIZE_FIELDS = (
    "row_id", "text", "author", "event_time", "kind", "thread", "title",
    "tags", "participants", "acl", "source", "source_id",
)  # fmt: skip


def row_size_bytes(row: Row) -> int:
    """UTF-8 bytes of the row's SIZE_FIELDS as JSON (sorted keys, non-ASCII kept as is)."""
    payload = {name: getattr(row, name) for name in SIZE_FIELDS}
    if row.event_time is not None:
        payload["event_time"] = row.event_time.isoformat()
    return len(json.dumps(payload, ensure_ascii=False, sort_keys=True).encode("utf-8"))


@dataclass(frozen=True)
class Budget:
    """A storage budget: a fraction of the active size when the run starts, or absolute bytes."""

    fraction: float | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        if (self.fraction is None) == (self.max_bytes is None):
            raise ValueError("budget: give exactly one of fraction or max_bytes")
        if self.fraction is not None and not 0.0 < self.fraction <= 1.0:
            raise ValueError(f"budget.fraction: must be in (0, 1], got {self.fraction}")
        if self.max_bytes is not None and self.max_bytes < 0:
            raise ValueError(f"budget.max_bytes: must be >= 0, got {self.max_bytes}")

    def target_bytes(self, active_size: int) -> int:
        if self.max_bytes is not None:
            return self.max_bytes
        return int(active_size * (self.fraction or 1.0))


@dataclass(frozen=True)
class Candidate:
    """A proposed pair: `a` is the earlier ingested row."""

    a: Row
    b: Row
    similarity: float

    @property
    def key(self) -> tuple[str, str]:
        return pair_key(self.a.row_id, self.b.row_id)


@dataclass(frozen=True)
class RefineReport:
    run_id: str
    start_bytes: int
    target_bytes: int
    realised_bytes: int
    pairs_judged: int
    decisions: dict[str, int] = field(default_factory=dict)  # delete|merge|preserve|refused|failed
    stop_reason: StopReason | None = None
    pairs_skipped_access: int = 0  # neighbour pairs never proposed: their access lists differ

    def as_dict(self) -> dict:
        return {
            "run_id": self.run_id, "start_bytes": self.start_bytes, "target_bytes": self.target_bytes,
            "realised_bytes": self.realised_bytes, "pairs_judged": self.pairs_judged,
            "decisions": dict(self.decisions), "stop_reason": self.stop_reason,
            "pairs_skipped_access": self.pairs_skipped_access,
        }  # fmt: skip


def pair_key(a: str, b: str) -> tuple[str, str]:
    """The preserve cache's key: the unordered pair."""
    return (a, b) if a <= b else (b, a)


def readers_cover(keep: Row, gone: Row) -> bool:
    """Whether everyone who could read `gone` can read `keep` (an empty acl = the whole tenant).
    Archiving `gone` in favour of `keep` must not take a fact away from any of its readers.
    A guard behind the access rule: pairs of different lists are not proposed at all."""
    if not keep.acl:
        return True
    if not gone.acl:
        return False
    return {e.lower() for e in gone.acl} <= {e.lower() for e in keep.acl}


class RefinePlanner:
    """One MemRefine run over one tenant's active rows.

    rows: every active row of the tenant (all count towards the size; only current,
    unprotected rows are proposed; see consolidation.is_candidate), and only in pairs of one
    access list. Superseded rows are versions Mem++ keeps on purpose, and leaving them out
    also keeps a revert exact.
    neighbours: row id -> [(row id, cosine)], the row's top-m from the vector index.
    preserved: pairs judged preserve by earlier runs; they are never proposed again.
    """

    def __init__(
        self,
        rows: Sequence[Row],
        neighbours: Neighbours,
        budget: Budget,
        run_id: str,
        *,
        judge: str = "",
        max_calls: int | None = None,
        min_similarity: float = 0.0,
        preserved: Iterable[tuple[str, str]] = (),
    ):
        active = [row for row in rows if row.state == "active"]
        tenants = sorted({row.tenant for row in active})
        if len(tenants) > 1:
            raise ValueError(f"rows: one tenant per refine run, got {tenants}")
        if max_calls is not None and max_calls < 0:
            raise ValueError(f"max_calls: must be >= 0, got {max_calls}")
        self.run_id = run_id
        self.judge = judge
        self.max_calls = max_calls
        self.min_similarity = min_similarity
        self._active: dict[str, Row] = {row.row_id: row for row in active}
        self._sizes = {rid: row_size_bytes(row) for rid, row in self._active.items()}
        self.start_bytes = sum(self._sizes.values())
        self.active_bytes = self.start_bytes
        self.target_bytes = budget.target_bytes(self.start_bytes)
        self._preserved: set[tuple[str, str]] = {pair_key(*p) for p in preserved}
        self._judged: set[tuple[str, str]] = set(self._preserved)
        self._heap: list[tuple[float, str, str]] = []
        self._queued: set[tuple[str, str]] = set()
        self._kept_apart: set[tuple[str, str]] = set()  # pairs of different access lists
        self._pending: Candidate | None = None
        self._next_position = max((r.ingest_position for r in active), default=0) + 1
        self.calls = 0
        self.decisions: Counter[str] = Counter()
        self.stop_reason: StopReason | None = None
        for row in sorted(active, key=ingest_order):
            if is_candidate(row):
                self.offer(row.row_id, neighbours(row.row_id))

    def offer(self, row_id: str, neighbours: Iterable[tuple[str, float]]) -> None:
        """Queue pairs of an active row, e.g. a merged row once the job has embedded it."""
        if row_id not in self._active:
            return
        for other, cosine in neighbours:
            key = pair_key(row_id, other)
            if other == row_id or key in self._queued or cosine < self.min_similarity:
                continue
            row, other_row = self._active[row_id], self._active.get(other)
            if other_row is None or not is_candidate(other_row) or other_row.tenant != row.tenant:
                continue
            if row_access(other_row) != row_access(row):
                self._kept_apart.add(key)  # never judged: no judge call, no decision, no reason
                continue
            self._queued.add(key)
            heapq.heappush(self._heap, (-float(cosine), *key))

    @property
    def pairs_skipped_access(self) -> int:
        """Neighbour pairs not proposed because their access lists differ."""
        return len(self._kept_apart)

    @property
    def preserved_pairs(self) -> frozenset[tuple[str, str]]:
        """Every pair judged preserve, earlier runs included: persist it for the next run."""
        return frozenset(self._preserved)

    def stop(self, reason: StopReason = "stopped") -> None:
        self.stop_reason = self.stop_reason or reason
        self._pending = None

    def next_pair(self) -> Candidate | None:
        """The most similar pair not judged yet whose rows are both still active, or None."""
        if self.stop_reason is not None:
            return None
        if self._pending is not None:
            raise RuntimeError("next_pair: apply() or fail() the previous pair first")
        while True:
            if self.active_bytes <= self.target_bytes:
                self.stop("budget_reached")
                return None
            if self.max_calls is not None and self.calls >= self.max_calls:
                self.stop("call_cap")
                return None
            if not self._heap:
                self.stop("no_candidates")
                return None
            negative, first, second = heapq.heappop(self._heap)
            key = (first, second)
            a, b = self._active.get(first), self._active.get(second)
            if key in self._judged or a is None or b is None:
                continue
            a, b = sorted((a, b), key=ingest_order)
            self.calls += 1
            self._pending = Candidate(a, b, -negative)
            return self._pending

    def _take(self, candidate: Candidate) -> None:
        if candidate != self._pending:
            raise ValueError("candidate: not the pair last returned by next_pair()")
        self._pending = None
        self._judged.add(candidate.key)

    def fail(self, candidate: Candidate, reason: str = "") -> None:
        """The judge failed on this pair: nothing changes, and this run does not ask again."""
        self._take(candidate)
        self.decisions["failed"] += 1

    def apply(self, candidate: Candidate, decision: PairDecision) -> list[Event]:
        """Record the judge's decision; return the events to append (none for preserve)."""
        decision.check_pair(candidate.a, candidate.b)
        self._take(candidate)
        by = f" [{self.judge}]" if self.judge else ""
        if not same_access([candidate.a, candidate.b]):  # not proposed by offer(); a guard
            self.decisions["refused"] += 1
            return []
        if decision.action == "preserve":
            self._preserved.add(candidate.key)
            self.decisions["preserve"] += 1
            return []
        if decision.action == "delete":
            keep, gone = (
                (candidate.a, candidate.b) if decision.archive == candidate.b.row_id else (candidate.b, candidate.a)
            )
            if not readers_cover(keep, gone):
                self.decisions["refused"] += 1
                return []
            self._drop(gone.row_id)
            self.decisions["delete"] += 1
            reason = f"refine delete{by}: less informative than {keep.row_id}; {decision.reason}".rstrip("; ")
            return [RowArchived(tenant=gone.tenant, row_id=gone.row_id, run_id=self.run_id, reason=reason)]
        reason = f"refine merge{by}: {decision.reason}".rstrip(": ")
        pair = [candidate.a, candidate.b]
        try:
            events = merge_events(pair, decision.merged_text or "", self.run_id, reason, source="maintenance:refine")
        except IncompatibleAccess:
            self.decisions["refused"] += 1
            return []
        derived = events[0]
        assert isinstance(derived, RowDerived)
        for row in pair:
            self._drop(row.row_id)
        self._add_derived(derived, pair)
        self.decisions["merge"] += 1
        return events

    def _drop(self, row_id: str) -> None:
        del self._active[row_id]
        self.active_bytes -= self._sizes.pop(row_id)

    def _add_derived(self, event: RowDerived, sources: list[Row]) -> None:
        # A provisional row, so the size counts what the projection will store and a later
        # offer() can pair it; the indexer assigns its real log position.
        doc = event.document
        row = Row(
            row_id=event.row_id, tenant=event.tenant, text=doc.text, author=doc.author,
            event_time=doc.date, kind=doc.kind, thread=doc.thread, title=doc.title, tags=doc.tags,
            participants=doc.participants, acl=doc.acl, source=doc.source, source_id=doc.source_id,
            ingest_position=self._next_position, ingested_at=max(r.ingested_at for r in sources),
            derived_from=list(event.sources),
        )  # fmt: skip
        self._next_position += 1
        self._active[row.row_id] = row
        self._sizes[row.row_id] = row_size_bytes(row)
        self.active_bytes += self._sizes[row.row_id]

    def report(self) -> RefineReport:
        return RefineReport(
            run_id=self.run_id,
            start_bytes=self.start_bytes,
            target_bytes=self.target_bytes,
            realised_bytes=self.active_bytes,
            pairs_judged=self.calls,
            decisions=dict(self.decisions),
            stop_reason=self.stop_reason,
            pairs_skipped_access=self.pairs_skipped_access,
        )


def inverse_events(run_events: Sequence[Event], run_id: str) -> list[Event]:
    """Events that undo a maintenance run, newest first, stamped with the reverting run's id.

    RowSuperseded and RowArchived -> RowRestored; RowDerived -> RowArchived of the derived row.
    Other events (run markers, documents) have no inverse here and are skipped.
    """
    inverse: list[Event] = []
    for event in reversed(run_events):
        undo = f"revert of run {getattr(event, 'run_id', None)}: undo {event.type} of {getattr(event, 'row_id', '')}"
        if isinstance(event, (RowSuperseded, RowArchived)):
            inverse.append(RowRestored(tenant=event.tenant, row_id=event.row_id, run_id=run_id, reason=undo))
        elif isinstance(event, RowDerived):
            inverse.append(RowArchived(tenant=event.tenant, row_id=event.row_id, run_id=run_id, reason=undo))
    return inverse

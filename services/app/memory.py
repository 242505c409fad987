"""Use cases of orgmem over the ports: ingest, query, read a row or a thread, stats, rebuild,
and the reads maintenance makes.

The API, the CLI, the connectors and the maintenance jobs all go through this one object; it
keeps its ports to itself. `bootstrap.py` builds it, with the projection (the projector in the
process that projects, a follower elsewhere) already chosen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from schemas.documents import DocumentIn
from schemas.events import DocumentObserved, Event, LoggedEvent
from schemas.rows import Row, RowChange
from services.app.retrieval import Retrieval, Retriever, versions_in_view
from services.core.caller import SYSTEM, Caller
from services.core.positions import Checkpoints
from services.core.retrieval_config import PRESETS, RetrievalConfig
from services.core.scope import PUBLIC_ACL, Scope, acl_tokens, admits
from services.core.term_match import TermMatch
from services.core.versions import Version
from services.core.write_path import SkippedDocument
from services.core.write_rules import is_connector_source, row_id_for
from services.errors import Gone, Invalid, NotFound, NotReady, OrgmemError
from services.ports import (
    Embedder,
    EventLog,
    LexicalIndex,
    Projection,
    RowStore,
    VectorIndex,
)

log = logging.getLogger(__name__)


EVERY_TERM = TermMatch("all")


@dataclass(frozen=True)
class IngestResult:
    row_ids: list[str]
    position: int


def append_documents(event_log: EventLog, documents: Sequence[DocumentIn], caller: Caller) -> IngestResult:
    """The write path up to durability: one DocumentObserved per document, appended as one atomic
    batch. Needs only the log, so it runs in processes that do not own the projections."""
    # A sealing log keys the ids of texts (services/app/sealing.py); a plain one hashes them.
    id_for = getattr(event_log, "row_id_for", row_id_for)
    events = [DocumentObserved(tenant=caller.tenant, row_id=id_for(caller.tenant, d), document=d) for d in documents]
    logged = event_log.append(events)
    # Nothing logged (every document erased before): the position is the head of the tenant's lane.
    position = logged[-1].position if logged else event_log.heads().of(event_log.lane_for(caller.tenant))
    return IngestResult([e.row_id for e in events], position)


class Memory:
    def __init__(self, log_: EventLog, rows: RowStore, lexical: LexicalIndex, vectors: VectorIndex,
                 embedder: Embedder, projection: Projection, retriever: Retriever, config: RetrievalConfig):
        self._log, self._rows, self._lexical, self._vectors = log_, rows, lexical, vectors
        self._embedder, self._retriever = embedder, retriever
        self.projection = projection
        self.config = config
        self.closed = False  # background work that fails after close() is not reported as a fault
        # Projections found missing or far behind the row store at start (name -> state).
        self.problems: dict[str, str] = {}

    # --- write path -------------------------------------------------------------------------
    def ingest(self, documents: Sequence[DocumentIn], caller: Caller = SYSTEM) -> IngestResult:
        return append_documents(self._log, documents, caller)

    def accept(self, documents: Sequence[DocumentIn], caller: Caller) -> IngestResult:
        """Documents submitted by an API caller: as `ingest`, but a source that a connector
        writes is refused, so that nobody can claim an item a connector will import later."""
        claimed = [f"documents.{i}.source: {d.source!r} is reserved for orgmem's connectors; "
                   "name the source of API documents otherwise" for i, d in enumerate(documents)
                   if is_connector_source(d.source)]
        if claimed:
            raise Invalid("; ".join(claimed[:10]))
        return self.ingest(documents, caller)

    def append(self, events: Sequence[Event]) -> list[LoggedEvent]:
        return self._log.append(events)

    @property
    def event_log(self) -> EventLog:
        """The log alone, for writers that need nothing else (connectors, the audit trail)."""
        return self._log

    # --- read path --------------------------------------------------------------------------
    def config_for(self, preset: str | None = None, **overrides) -> RetrievalConfig:
        base = self.config
        if preset is not None:
            if preset not in PRESETS:
                raise OrgmemError(f"preset: unknown preset {preset!r}; known: {', '.join(sorted(PRESETS))}")
            base = PRESETS[preset]
        weights = overrides.pop("weights", None)
        if weights:
            overrides["weights"] = {**base.weights, **weights}
        return base.with_overrides(**overrides)

    def query(self, q: str, scope: Scope, config: RetrievalConfig, after: int | None = None, wait_s: float = 30.0,
              people=None) -> Retrieval:
        if after is not None and not self.projection.wait_for(after, wait_s):
            raise NotReady(f"after: position {after} not indexed within {wait_s:g} s (indexed: {self.projection.applied})")
        return self._retriever.retrieve(q, scope, config, people)

    def scope_for(self, caller: Caller, **bounds) -> Scope:
        sets = {key: frozenset(v) if v is not None else None for key, v in bounds.items() if key in ("kinds", "authors", "threads")}
        return Scope(
            tenant=caller.tenant, readers=caller.readers,
            as_of=bounds.get("as_of"), since=bounds.get("since"), known_at=bounds.get("known_at"), **sets,
        )

    def row(self, row_id: str, caller: Caller = SYSTEM) -> tuple[Row, list[RowChange]]:
        row = self._rows.get(row_id)
        if row is None or not self._may_read(row, caller):
            skipped = self._rows.skipped(row_id)
            if skipped is not None and skipped.reason == "erased" and skipped.tenant == caller.tenant:
                raise Gone(f"row {row_id} was erased")
            original = self._rows.get(skipped.duplicate_of) if skipped and skipped.duplicate_of else None
            # Name the row a skipped document repeats only when the caller may read that row.
            if original is not None and original.row_id != row_id and self._may_read(original, caller):
                raise NotFound(f"row {row_id} was not stored: {skipped.reason} of {original.row_id}")
            raise NotFound(f"row {row_id} not found")
        return row, self._rows.history(row_id)

    def thread(self, thread: str, caller: Caller = SYSTEM, limit: int | None = None) -> list[Row]:
        """The thread's rows the caller may read, in date order; with `limit`, its last `limit`
        (the store filters by access list, so a limit never counts a row the caller may not read)."""
        rows = [r for r in self._rows.thread(caller.tenant, thread, caller.readers, limit) if self._may_read(r, caller)]
        if not rows:
            raise NotFound(f"thread {thread} not found")
        return rows

    def versions(self, rows: Sequence[Row], caller: Caller = SYSTEM) -> dict[str, Version]:
        """The version of each row that the caller's current view holds (an archived row has none)."""
        return versions_in_view(self._rows, list(rows), Scope(tenant=caller.tenant, readers=caller.readers))

    @staticmethod
    def _may_read(row: Row, caller: Caller) -> bool:
        if row.tenant != caller.tenant:
            return False
        if caller.readers is None:
            return True
        return bool(set(acl_tokens(row.acl)) & ({PUBLIC_ACL} | set(caller.readers)))

    def head(self, tenant: str | None = None) -> int:
        """The last position of the tenant's lane of the log (None: lane 0, the whole log where
        it is not split by tenant)."""
        return self._log.heads().of(self._log.lane_for(tenant)) if tenant is not None else self._log.head()

    def heads(self) -> Checkpoints:
        """Every lane's last position (services.core.positions)."""
        return self._log.heads()

    def lag(self, heads: Mapping[int, int]) -> int:
        """What the projections have still to apply up to `heads`, in the log's unit
        (EventLog.backlog), over every lane."""
        applied = self.projection.checkpoints
        return sum(self._log.backlog(applied.of(lane), head) for lane, head in heads.items())

    def checkpoint(self, lane: int = 0) -> int:
        """The position of `lane` the row store reflects, read from the store (where indexer
        processes share it, the authoritative value; `applied` is this process's view)."""
        return self._rows.applied_position(lane)

    def checkpoints(self) -> Checkpoints:
        """Every lane's checkpoint, read from the row store."""
        return self._rows.applied_positions()

    def lane_for(self, tenant: str) -> int:
        return self._log.lane_for(tenant)

    def covers(self, position: int) -> bool:
        """Whether this process's view of the projections has applied `position` (in its lane)."""
        return self.projection.checkpoints.covers(position)

    def applied_for(self, tenant: str) -> int:
        """How far the projections have applied the tenant's lane of the log."""
        return self.projection.checkpoints.of(self._log.lane_for(tenant))

    @property
    def applied(self) -> int:
        """How far the projections have applied the log, as one number (Checkpoints.summary)."""
        return self.projection.applied

    def counts(self, tenant: str | None = None) -> dict[str, int]:
        return self._rows.count(tenant)

    def stats(self, tenant: str | None = None) -> dict:
        return {"log_head": self._log.heads().summary(), "applied_position": self.projection.applied,
                "rows": self._rows.count(tenant)}

    # --- what maintenance and operators read (no access list applies) -------------------------
    def stored_row(self, row_id: str) -> Row | None:
        return self._rows.get(row_id)

    def row_history(self, row_id: str) -> list[RowChange]:
        return self._rows.history(row_id)

    def skipped(self, row_id: str) -> SkippedDocument | None:
        """Why a document was not stored as a row (empty, a repeat), if it was not."""
        return self._rows.skipped(row_id)

    def read_log(self, after: int, limit: int) -> list[LoggedEvent]:
        return self._log.read(after, limit)

    def rows_in_scope(self, scope: Scope, limit: int = 1_000_000, with_text: bool = True) -> list[Row]:
        """Every row of the scope at once (maintenance's candidates, the people directory; no
        access list applies); without `with_text` each row's text reads ""."""
        return self._rows.in_scope(scope, limit, with_text)

    def export_page(self, tenant: str | None, after: tuple[int, str] | None, limit: int
                    ) -> list[tuple[Row, list[RowChange]]]:
        """One page of stored rows with their histories, in (ingest position, row id) order after
        `after` (an export; no access list applies here: the export use case applies the caller's)."""
        rows = self._rows.page(tenant, after, limit)
        histories = self._rows.histories([r.row_id for r in rows])
        return [(row, histories.get(row.row_id, [])) for row in rows]

    def stored_vectors(self, row_ids: Sequence[str]) -> dict:
        return self._vectors.vectors(row_ids)

    def rows_with_terms(self, scope: Scope, terms: Sequence[str], limit: int) -> list[Row]:
        """Rows of the scope holding every one of `terms` (the lexical index), best first, without
        their texts (the time anchor reads titles and dates; 50 whole documents could be 50 MB)."""
        hits = self._lexical.search_text(list(terms), scope, limit, EVERY_TERM)
        found = self._rows.get_many([h.row_id for h in hits], with_text=False)
        return [found[h.row_id] for h in hits if h.row_id in found and admits(found[h.row_id], scope)]

    def nearest(self, vector, scope: Scope, limit: int) -> list[tuple[str, float]]:
        """(row id, cosine) of the rows of the scope nearest to `vector`."""
        return [(h.row_id, h.score) for h in self._vectors.search(vector, scope, limit)]

    def embed(self, texts: Sequence[str]):
        """Embed texts with the write path's encoder (as the projector will)."""
        return self._embedder.encode(texts)

    # --- projections ------------------------------------------------------------------------
    def wait_for(self, position: int, timeout: float) -> bool:
        return self.projection.wait_for(position, timeout)

    def catch_up(self, progress: Callable | None = None):
        return self.projection.catch_up(progress=progress)

    def optimize_vectors(self) -> bool:
        """Build the vector index's graph where it has an offline build step (Qdrant Edge); it
        blocks this process for as long as the build takes, so only `orgmem optimize` calls it."""
        optimize = getattr(self._vectors, "optimize", None)
        return bool(optimize and optimize())

    def seal_vectors_if_due(self, space_for: Callable[[int], bool] | None = None) -> bool:
        """Start a background graph build where the vector index maintains its graph live
        (SelfSealing); it runs in a child process, so this returns at once. `space_for(bytes)`
        may refuse a build the disk has no room for."""
        seal = getattr(self._vectors, "seal_if_due", None)
        return bool(seal and seal(space_for))

    def vector_builds_held(self) -> AbstractContextManager[None]:
        """While inside, the vector index changes no file by itself (no graph build, SelfSealing)."""
        held = getattr(self._vectors, "builds_held", None)
        return held() if held else nullcontext()

    def vector_status(self) -> dict | None:
        """The vector graph's figures (rows in the graph, searched exactly, builds), if it has any."""
        status = getattr(self._vectors, "graph_status", None)
        return status() if status else None

    def rebuild(self, progress: Callable | None = None):
        """Drop every projection and replay the log from the start."""
        log.info("rebuild: dropping projections")
        self._rows.reset()
        self._lexical.reset()
        self._vectors.reset()
        return self.projection.catch_up(progress=progress)

    def purge_rows(self, tenant: str, row_ids: Sequence[str]) -> list[str]:
        """Erase rows from every projection now (services/app/erasure.py); only the process that
        projects can. Returns the ids that were stored rows."""
        purge = getattr(self.projection, "purge", None)
        if purge is None:
            raise OrgmemError("this process does not project the log; the `orgmem indexer` processes purge erased rows")
        return purge(tenant, row_ids)

    def forget_vectors(self, texts: Sequence[str]) -> int:
        """Drop the cached document vectors of these texts (as encoded: `embedding_text`)."""
        forget = getattr(self._embedder, "forget", None)
        return forget(texts) if forget else 0

    def close(self) -> None:
        self.closed = True
        self._retriever.close()
        closable_embedder = [self._embedder] if hasattr(self._embedder, "close") else []  # its vector cache
        for part in (self._lexical, self._vectors, self._rows, self._log, *closable_embedder):
            try:
                part.close()
            except Exception:  # closing is best effort at shutdown
                log.exception("closing %s failed", type(part).__name__)

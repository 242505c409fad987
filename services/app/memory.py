"""Use cases of orgmem over the ports: ingest, query, read a row or a thread, stats, rebuild.

The API, the CLI, the connectors and the maintenance jobs all go through this one object.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from schemas.documents import DocumentIn
from schemas.events import DocumentObserved, Event, LoggedEvent
from schemas.rows import Row, RowChange
from services.app.projection import Projector
from services.app.retrieval import Retrieval, Retriever
from services.core.caller import Caller
from services.core.retrieval_config import PRESETS, RetrievalConfig
from services.core.scope import PUBLIC_ACL, Scope, acl_tokens
from services.core.write_rules import row_id_for
from services.errors import NotFound, NotReady, OrgmemError
from services.ports import Embedder, EventLog, LexicalIndex, RowStore, VectorIndex

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestResult:
    row_ids: list[str]
    position: int


def append_documents(event_log: EventLog, documents: Sequence[DocumentIn], caller: Caller) -> IngestResult:
    """The write path up to durability: one DocumentObserved per document, appended as one atomic
    batch. Needs only the log, so it runs in processes that do not own the projections."""
    events = [DocumentObserved(tenant=caller.tenant, row_id=row_id_for(caller.tenant, d), document=d) for d in documents]
    logged = event_log.append(events)
    return IngestResult([e.row_id for e in events], logged[-1].position if logged else event_log.head())


class Memory:
    def __init__(
        self,
        log_: EventLog,
        rows: RowStore,
        lexical: LexicalIndex,
        vectors: VectorIndex,
        embedder: Embedder,
        config: RetrievalConfig,
        indexer_batch: int = 256,
        query_embedder: Embedder | None = None,
    ):
        self.log, self.rows, self.lexical, self.vectors, self.embedder = log_, rows, lexical, vectors, embedder
        self.config = config
        self.projector = Projector(log_, rows, lexical, vectors, embedder, batch_size=indexer_batch)
        self.retriever = Retriever(rows, lexical, vectors, query_embedder or embedder)

    # --- write path -------------------------------------------------------------------------
    def ingest(self, documents: Sequence[DocumentIn], caller: Caller = Caller()) -> IngestResult:
        return append_documents(self.log, documents, caller)

    def append(self, events: Sequence[Event]) -> list[LoggedEvent]:
        return self.log.append(events)

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

    def query(self, q: str, scope: Scope, config: RetrievalConfig, after: int | None = None, wait_s: float = 30.0) -> Retrieval:
        if after is not None and not self.projector.wait_for(after, wait_s):
            raise NotReady(f"after: position {after} not indexed within {wait_s:g} s (indexed: {self.projector.applied})")
        return self.retriever.retrieve(q, scope, config)

    def scope_for(self, caller: Caller, **bounds) -> Scope:
        sets = {key: frozenset(v) if v is not None else None for key, v in bounds.items() if key in ("kinds", "authors", "threads")}
        return Scope(
            tenant=caller.tenant, readers=caller.readers,
            as_of=bounds.get("as_of"), known_at=bounds.get("known_at"), **sets,
        )

    def row(self, row_id: str, caller: Caller = Caller()) -> tuple[Row, list[RowChange]]:
        row = self.rows.get(row_id)
        if row is None or not self._may_read(row, caller):
            skipped = self.rows.skipped(row_id)
            original = self.rows.get(skipped.duplicate_of) if skipped and skipped.duplicate_of else None
            # Name the row a skipped document repeats only when the caller may read that row.
            if original is not None and original.row_id != row_id and self._may_read(original, caller):
                raise NotFound(f"row {row_id} was not stored: {skipped.reason} of {original.row_id}")
            raise NotFound(f"row {row_id} not found")
        return row, self.rows.history(row_id)

    def thread(self, thread: str, caller: Caller = Caller()) -> list[Row]:
        rows = [r for r in self.rows.thread(caller.tenant, thread) if self._may_read(r, caller)]
        if not rows:
            raise NotFound(f"thread {thread} not found")
        return rows

    @staticmethod
    def _may_read(row: Row, caller: Caller) -> bool:
        if row.tenant != caller.tenant:
            return False
        if caller.readers is None:
            return True
        return bool(set(acl_tokens(row.acl)) & ({PUBLIC_ACL} | set(caller.readers)))

    def stats(self, tenant: str | None = None) -> dict:
        return {"log_head": self.log.head(), "applied_position": self.projector.applied, "rows": self.rows.count(tenant)}

    # --- projections ------------------------------------------------------------------------
    def catch_up(self, progress=None):
        return self.projector.catch_up(progress=progress)

    def rebuild(self, progress=None):
        """Drop every projection and replay the log from the start."""
        log.info("rebuild: dropping projections")
        self.rows.reset()
        self.lexical.reset()
        self.vectors.reset()
        return self.projector.catch_up(progress=progress)

    def close(self) -> None:
        self.retriever.close()
        for part in (self.lexical, self.vectors, self.rows, self.log):
            try:
                part.close()
            except Exception:  # closing is best effort at shutdown
                log.exception("closing %s failed", type(part).__name__)

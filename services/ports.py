"""Ports: one small Protocol per capability. The core and the use cases know only these;
`bootstrap.py` is the only place that picks the adapters behind them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, Protocol

import numpy as np

from schemas.events import Event, LoggedEvent
from schemas.rows import Row, RowChange
from services.core.scope import Scope


@dataclass(frozen=True)
class Hit:
    row_id: str
    score: float


class RowHead(NamedTuple):
    """What ranking needs of a row, without its text: fusion breaks ties by ingest position,
    selectors group by thread, the recency reserve orders by date. Whole rows are read only
    for the rows a query returns."""

    row_id: str
    thread: str | None
    ingest_position: int
    event_time: datetime | None
    ingested_at: datetime

    @property
    def recency(self) -> tuple[datetime, int]:
        return (self.event_time or self.ingested_at, self.ingest_position)


class EventLog(Protocol):
    def append(self, events: Sequence[Event]) -> list[LoggedEvent]:
        """Append a batch whole or not at all; return the events with their positions."""

    def read(self, after: int, limit: int) -> list[LoggedEvent]:
        """Events with position > after, in log order, at most `limit`."""

    def head(self) -> int:
        """Position of the last appended event (0 for an empty log)."""

    def close(self) -> None: ...


@dataclass(frozen=True)
class RowMutation:
    """What a projected event does to the row store: a new row, or a state step of one."""

    row: Row
    change: RowChange


@dataclass(frozen=True)
class SkippedDocument:
    row_id: str
    position: int
    reason: str  # "empty" | "duplicate_text" | "duplicate_source"
    duplicate_of: str | None = None


class RowStore(Protocol):
    def get(self, row_id: str) -> Row | None: ...

    def get_many(self, row_ids: Sequence[str]) -> dict[str, Row]: ...

    def heads(self, row_ids: Sequence[str]) -> dict[str, RowHead]:
        """The ranking fields of the stored rows among `row_ids` (absent ids are left out)."""

    def history(self, row_id: str) -> list[RowChange]: ...

    def thread(self, tenant: str, thread: str) -> list[Row]: ...

    def skipped(self, row_id: str) -> SkippedDocument | None: ...

    def find_source(self, tenant: str, source: str, source_id: str) -> str | None: ...

    def find_active_text(self, tenant: str, author_scope: str, content_hash: str) -> str | None: ...

    def recent(self, scope: Scope, exclude: Sequence[str], limit: int) -> list[RowHead]:
        """Rows in scope, most recently ingested first (fills the recency reserve)."""

    def inactive_at(self, tenant: str, known_at: datetime) -> frozenset[str]:
        """Rows ingested by known_at whose state at known_at was not active."""

    def apply(
        self, mutations: Sequence[RowMutation], skipped: Sequence[SkippedDocument], position: int
    ) -> None:
        """Write one projected batch and the position it reaches, atomically."""

    def applied_position(self) -> int: ...

    def count(self, tenant: str | None = None) -> dict[str, int]: ...

    def reset(self) -> None: ...

    def close(self) -> None: ...


class LexicalIndex(Protocol):
    def upsert(self, rows: Sequence[Row]) -> None:
        """Index (or re-index) rows with their current state; durable on return."""

    def search_text(self, terms: Sequence[str], scope: Scope, limit: int, conjunctive: bool) -> list[Hit]:
        """BM25 over the text of rows in scope."""

    def search_tags(self, candidates: Sequence[str], scope: Scope, limit: int) -> list[Hit]:
        """Rows in scope with a tag (author, thread, participants, tags) equal to a candidate."""

    def reset(self) -> None: ...

    def close(self) -> None: ...


class VectorIndex(Protocol):
    def upsert(self, rows: Sequence[Row], vectors: np.ndarray) -> None: ...

    def update_state(self, rows: Sequence[Row]) -> None:
        """Refresh the filterable payload (state) of rows already indexed."""

    def search(self, vector: np.ndarray, scope: Scope, limit: int) -> list[Hit]: ...

    def vectors(self, row_ids: Sequence[str]) -> dict[str, np.ndarray]: ...

    def reset(self) -> None: ...

    def close(self) -> None: ...


class Optimizable(Protocol):
    """An index with an offline build step (Qdrant Edge's HNSW graph). It may block its process
    for minutes, so it runs from the CLI (`orgmem optimize`), never inside the API process."""

    def optimize(self) -> bool: ...


class Embedder(Protocol):
    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm float32 embeddings, one row per text."""


class EventFeed(Protocol):
    def poll(self, max_records: int, timeout_s: float) -> list[LoggedEvent]: ...

    def seek(self, position: int) -> None:
        """Continue with the first event after `position`."""

    def commit(self, position: int) -> None:
        """Every event up to `position` is applied."""

    def close(self) -> None: ...

"""Ports: small Protocols split by caller. The use cases in `services/app` know only these;
`bootstrap.py` is the only place that picks the adapters behind them.

The row store is one adapter with four callers, so it has four ports: `RowReader` (the read
path and the use cases), `ProjectionTarget` (the projector writes batches with a checkpoint),
`RowScan` (maintenance reads a tenant's active rows), and the write path's lookups
(`services.core.write_path`). `RowStore` is their union, what an adapter implements. The judge's
port is defined by the policies that call it (`services.core.maintenance.judging.Judge`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np

from schemas.events import Event, LoggedEvent
from schemas.rows import Row, RowChange
from services.core.keys import ApiKey
from services.core.positions import Checkpoints
from services.core.scope import Scope
from services.core.term_match import TermMatch
from services.core.versions import VersionFields
from services.core.write_path import RowMutation, SkippedDocument


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
        """Position of the last appended event (0 for an empty log); lane 0's in a log split
        into lanes (services.core.positions)."""

    def heads(self) -> Checkpoints:
        """The last position of every lane of the log ({0: head()} where there is one)."""

    def lane_for(self, tenant: str) -> int:
        """The lane that holds the tenant's events (0 where there is one)."""

    def backlog(self, after: int, head: int) -> int:
        """How much of one lane lies past position `after` up to `head`, in the log's own unit:
        events where positions are dense (SQLite), appended batches where they leave gaps (Kafka).
        Negative when the log is behind `after` (it lost events)."""

    def close(self) -> None: ...


class RowReader(Protocol):
    """What the read path and the use cases read of rows."""

    def get(self, row_id: str) -> Row | None: ...

    def get_many(self, row_ids: Sequence[str], with_text: bool = True) -> dict[str, Row]: ...

    def heads(self, row_ids: Sequence[str]) -> dict[str, RowHead]:
        """The ranking fields of the stored rows among `row_ids` (absent ids are left out)."""

    def history(self, row_id: str) -> list[RowChange]: ...

    def thread(self, tenant: str, thread: str, readers: frozenset[str] | None = None,
               limit: int | None = None) -> list[Row]:
        """The thread's rows that `readers` may read (None: every row), in date order (undated
        last); with `limit`, only the last `limit` of that order."""

    def versions_of(self, tenant: str, threads: Sequence[str], row_ids: Sequence[str] = (),
                    known_at: datetime | None = None) -> list[VersionFields]:
        """In one read, every row of the tenant in `threads` and those of `row_ids`, whatever the
        caller may see (`services.core.versions` filters); with `known_at`, each row's state and
        supersession as they were then."""

    def skipped(self, row_id: str) -> SkippedDocument | None: ...

    def recent(self, scope: Scope, exclude: Sequence[str], limit: int) -> list[RowHead]:
        """Rows in scope, most recently ingested first (fills the recency reserve)."""

    def named(self, scope: Scope, source_ids: Sequence[str], limit: int) -> list[RowHead]:
        """Rows in scope whose source id is one of `source_ids` exactly (of any source), most
        recently ingested first, `limit` at most."""

    def inactive_at(self, tenant: str, known_at: datetime) -> frozenset[str]:
        """Rows ingested by known_at whose state at known_at was not active."""

    def applied_position(self, lane: int = 0) -> int:
        """The log position of `lane` the stored rows reflect (the projections' checkpoint there)."""

    def applied_positions(self) -> Checkpoints:
        """The checkpoint of every lane written so far."""

    def count(self, tenant: str | None = None) -> dict[str, int]: ...


class RowScan(Protocol):
    """Maintenance reads every row of a scope at once (its candidates); an export reads every row
    page by page, with its history."""

    def in_scope(self, scope: Scope, limit: int = 1_000_000, with_text: bool = True) -> list[Row]:
        """Every row of the scope in ingest order; without `with_text`, each row's text is ""."""

    def page(self, tenant: str | None, after: tuple[int, str] | None, limit: int) -> list[Row]:
        """Rows of a tenant (None: every tenant) in (ingest position, row id) order after `after`
        (an export's pages)."""

    def histories(self, row_ids: Sequence[str]) -> dict[str, list[RowChange]]: ...


class ProjectionTarget(Protocol):
    """What the projector writes: one batch and the position it reaches, atomically."""

    def apply(
        self, mutations: Sequence[RowMutation], skipped: Sequence[SkippedDocument], position: int
    ) -> None:
        """Every event of one call is in one lane (services.core.positions): `position` moves
        that lane's checkpoint."""

    def applied_position(self, lane: int = 0) -> int: ...

    def applied_positions(self) -> Checkpoints: ...

    def reset(self) -> None: ...


class RowStore(RowReader, RowScan, ProjectionTarget, Protocol):
    """The whole surface of a row-store adapter (with the write path's lookups)."""

    def find_source(self, tenant: str, source: str, source_id: str) -> str | None: ...

    def find_active_text(self, tenant: str, author_scope: str, content_hash: str) -> str | None: ...

    def erase(self, tenant: str, row_ids: Sequence[str], position: int | None) -> list[str]:
        """Delete rows so no file of the store keeps them, leaving an 'erased' skip record per id;
        move the checkpoint to `position` (None: out of band). Returns the ids that were rows."""

    def close(self) -> None: ...


class LexicalIndex(Protocol):
    def upsert(self, rows: Sequence[Row]) -> None:
        """Index (or re-index) rows with their current state; durable on return."""

    def search_text(self, terms: Sequence[str], scope: Scope, limit: int, match: TermMatch) -> list[Hit]:
        """BM25 over the text of rows in scope that contain at least `match.required(n)` of the
        n terms that can match anything and count (`services.core.term_match`: a term in more
        than `match.common_share` of the rows only adds its score)."""

    def search_tags(self, candidates: Sequence[str], scope: Scope, limit: int) -> list[Hit]:
        """Rows in scope with a tag (author, thread, participants, tags) equal to a candidate."""

    def reset(self) -> None: ...

    def delete(self, row_ids: Sequence[str], survivors: Callable[[], Iterable[Row]]) -> None:
        """Erase rows so that no file of the index keeps their terms; `survivors` yields every
        other row, for an index that can only drop terms by rewriting itself (tantivy)."""

    def close(self) -> None: ...


class VectorIndex(Protocol):
    """`positions` names, per row id, the log position of the event that produced the row's state
    as given: an index shared by several indexer processes keeps the state of the highest position
    (a stalled indexer cannot put an older state back); one with a single writer may ignore it."""

    def upsert(self, rows: Sequence[Row], vectors: np.ndarray, positions: Mapping[str, int] | None = None) -> None:
        """Index rows with their vectors (a re-upsert replaces, but with `positions` never a later state)."""

    def update_state(self, rows: Sequence[Row], positions: Mapping[str, int] | None = None) -> None:
        """Refresh the filterable payload (state) of rows already indexed."""

    def search(self, vector: np.ndarray, scope: Scope, limit: int) -> list[Hit]: ...

    def vectors(self, row_ids: Sequence[str]) -> dict[str, np.ndarray]: ...

    def delete(self, row_ids: Sequence[str]) -> None:
        """Erase rows' points so that no file of the index keeps their payload or vector."""

    def reset(self) -> None: ...

    def close(self) -> None: ...


class Optimizable(Protocol):
    """An index with an offline build step (Qdrant Edge's HNSW graph). It may block its process
    for minutes, so it runs from the CLI (`orgmem optimize`), never inside the API process."""

    def optimize(self) -> bool: ...


class SelfSealing(Protocol):
    """A vector index that builds its graph while the server runs (the embedded tiered index):
    the build runs in a child process, so starting one never blocks the caller or a search."""

    def seal_if_due(self, space_for: Callable[[int], bool] | None = None) -> bool:
        """Start a build when enough rows are searched exactly and `space_for(bytes it writes)`
        allows it; True when one started."""

    def graph_status(self) -> dict:
        """rows_in_graph, rows_searched_exactly, builds_running, builds_done/failed/cancelled/deferred,
        last_build_finished_at (unix time), last_build_seconds, seal_rows, sealed_shards,
        shard_hosts_rss_bytes (the graph shards' host processes)."""

    def builds_held(self) -> AbstractContextManager[None]:
        """While inside, no build runs (a running one is cancelled): the index's files stay put."""


class Embedder(Protocol):
    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-norm float32 embeddings, one row per text."""


class VectorCache(Protocol):
    """Document vectors by content: a key names (model, text as encoded), so a rebuild, a re-index
    or a second copy of a text never encodes it again."""

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, np.ndarray]: ...

    def put_many(self, items: Sequence[tuple[bytes, np.ndarray]]) -> None: ...

    def forget(self, keys: Sequence[bytes]) -> int:
        """Drop these entries (erasure); returns how many were there."""

    def close(self) -> None: ...


class EventFeed(Protocol):
    """A cursor over the log that a group of indexer processes shares (a Kafka consumer group)."""

    def poll(self, max_records: int, timeout_s: float) -> list[LoggedEvent]: ...

    def lanes(self) -> list[int]:
        """The lanes this member reads now (a Kafka consumer's assigned partitions)."""

    def seek(self, position: int) -> None:
        """Continue the position's lane with its first event after `position`."""

    def commit(self, position: int) -> None:
        """Every event of the position's lane up to `position` is applied."""

    def close(self) -> None: ...


@runtime_checkable
class Subscribable(Protocol):
    """A log that indexer processes can follow as a group (the Kafka log)."""

    def subscribe(self, group_id: str, checkpoint: Callable[[int], int], max_poll_records: int = 256) -> EventFeed:
        """Join the group; `checkpoint(lane)` says where each assigned lane resumes."""


@dataclass
class BatchStats:
    """What one projection batch (or a whole catch-up) did."""

    events: int = 0
    rows_added: int = 0
    state_changes: int = 0
    skipped: int = 0
    seconds: float = 0.0

    def plus(self, other: BatchStats) -> BatchStats:
        return BatchStats(self.events + other.events, self.rows_added + other.rows_added,
                          self.state_changes + other.state_changes, self.skipped + other.skipped,
                          self.seconds + other.seconds)


class Projection(Protocol):
    """How far the projections have applied the log, and how to move them on. The projector
    implements it in the process that projects; a follower in processes that only read."""

    @property
    def applied(self) -> int:
        """How far the projections are, as one number (`Checkpoints.summary`)."""

    @property
    def checkpoints(self) -> Checkpoints:
        """How far the projections are in each lane of the log."""

    def wait_for(self, position: int, timeout: float) -> bool:
        """True once `position` is applied (in its lane), False when `timeout` seconds pass first."""

    def catch_up(self, progress: Callable | None = None) -> BatchStats:
        """Apply (or wait for the indexers to apply) everything up to the log head now."""

    def apply(self, events: Sequence[LoggedEvent]) -> BatchStats:
        """Project one batch of events (refused where this process does not project)."""


class TaskRunner(Protocol):
    """Where maintenance jobs run: a thread of this process, or Celery workers."""

    def start(self, job: str, tenant: str, params: dict, requested_by: str) -> str:
        """Queue `job` ("consolidate", "refine", "revert") with `params`; return its run id at once."""

    def close(self) -> None: ...


class DataKeyStore(Protocol):
    """Data keys for crypto-shredding (docs/erasure.md), kept outside the log. A destroyed key
    leaves a tombstone and its id is never created again, so nothing sealed under it opens."""

    def obtain(self, key_ids: Sequence[str]) -> dict[str, bytes | None]:
        """The key of each id, created (32 random bytes) where missing; None where destroyed.
        Durable on return: a key is stored before anything is sealed under it."""

    def get(self, key_ids: Sequence[str]) -> dict[str, bytes]:
        """The live keys among `key_ids` (missing and destroyed ids are left out)."""

    def destroy(self, key_ids: Sequence[str], erasure_id: str) -> int:
        """Delete the keys so that no file of the store keeps their bytes; tombstone each id.
        Returns how many live keys were destroyed."""

    def destroyed(self, key_ids: Sequence[str]) -> set[str]:
        """Which of `key_ids` have tombstones."""

    def marker(self, name: str) -> str | None: ...

    def set_marker(self, name: str, value: str) -> None: ...

    def close(self) -> None: ...


class KeyStore(Protocol):
    """API keys: the authenticator verifies them, admins create, list and revoke them."""

    def create(self, tenant: str, principal: str, role: str, actor: str, groups: Sequence[str] = (),
               name: str = "", unrestricted: bool = False, expires_at: datetime | None = None,
               pending: bool = False) -> tuple[ApiKey, str]:
        """A new key and its token; the token is returned here and never again. An expired key does
        not verify; a pending one neither, and is not listed or found, until `activate`."""

    def activate(self, key_id: str) -> None:
        """A pending key starts to verify."""

    def discard(self, key_id: str) -> None:
        """Delete a pending key; an active key is left as it is."""

    def get(self, key_id: str) -> ApiKey | None: ...

    def list(self, tenant: str | None = None, include_revoked: bool = True) -> list[ApiKey]: ...

    def count_active(self) -> int: ...

    def revoke(self, key_id: str, actor: str, tenant: str | None = None) -> ApiKey: ...

    def verify(self, token: str, cached_only: bool = False) -> ApiKey | None: ...

    def close(self) -> None: ...


class ProjectionGenerations(Protocol):
    """One store's projection generations (cluster profile): readers and indexers use a name that
    points at the live one; a rebuild fills the next one beside it and then switches the name."""

    def live(self) -> str | None:
        """The generation the name points at, or None when there is none yet."""

    def next(self) -> str:
        """A free name for the generation after the live one."""

    def switch(self, new: str) -> None:
        """Point the name at `new`, atomically for every reader."""

    def retire(self, old: str) -> None:
        """After the switch: stop writers still on `old`, then delete it."""


class ChatModel(Protocol):
    """One chat completion (the answers' endpoint): the reply's text, or AnswerFailed naming why not."""
    def complete(self, system: str, prompt: str, response_format: dict) -> str: ...

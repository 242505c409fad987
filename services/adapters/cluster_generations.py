"""Generations of the cluster's projections, so that a rebuild builds beside the live ones and
switches when caught up (blue/green).

The configured names (`cluster.es_index`, `cluster.qdrant_collection`) are aliases. Each names
one generation: the Elasticsearch indices `<name>-g<N>` with their `-history`, `-skipped` and
`-meta` companions (four aliases, `<name>`, `<name>-history`, ...), and the Qdrant collection
`<name>-g<N>`. Readers and indexers use the aliases only; a rebuild projects the log into
generation N+1 under its own names, then moves the aliases in one request per server (both
servers apply an alias request atomically), then drops generation N.

A deployment made before generations has concrete indices and a collection under the plain
names: the first switch replaces them (Elasticsearch: `remove_index` inside the same atomic
request; Qdrant: the collection is deleted and the alias created right after, two requests).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager

from qdrant_client import QdrantClient
from qdrant_client import models as qm
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from services.adapters import elasticsearch_common as es
from services.adapters.row_store.elasticsearch_documents import CHECKPOINT_LANES
from services.errors import BackendUnavailable

ES_COMPONENT = "row store (Elasticsearch)"
QDRANT_COMPONENT = "vector index"
ES_SUFFIXES = ("", "-history", "-skipped", "-meta")


def generation_name(name: str, number: int) -> str:
    return f"{name}-g{number}"


def next_generation(name: str, live: str | None) -> str:
    """The name after `live` (`<name>-g<N>` -> `<name>-g<N+1>`; the plain name or none -> g1)."""
    found = re.fullmatch(re.escape(name) + r"-g(\d+)", live or "")
    return generation_name(name, int(found.group(1)) + 1 if found else 1)


class _Generations(ABC):
    """What a rebuild does alike on both servers, through each one's `live`, `switch` and `drop`."""

    name: str

    @abstractmethod
    def live(self) -> str | None: ...

    @abstractmethod
    def switch(self, new: str) -> None: ...

    @abstractmethod
    def drop(self, old: str) -> None: ...

    def ensure(self, create) -> None:
        """Give a new deployment generation 1 under the alias; `create(name)` makes a
        generation (the row store's or the vector index's constructor). On Elasticsearch it is
        safe to race: both steps are idempotent there."""
        if self.live() is not None:
            return
        first = generation_name(self.name, 1)
        create(first)
        self.switch(first)

    def next(self) -> str:
        """The next generation's name, free (a crashed rebuild's leftovers under it are dropped)."""
        new = next_generation(self.name, self.live())
        self.drop(new)
        return new


class EsGenerations(_Generations):
    """The rows index's generations on one Elasticsearch cluster (`client`: elasticsearch-py)."""

    def __init__(self, client, name: str):
        self.client, self.name = client, name

    def live(self) -> str | None:
        """The rows index `name` reads: the generation its alias names, the plain index of a
        deployment made before generations, or None (nothing yet)."""
        from elasticsearch import NotFoundError

        with es.driver_errors(ES_COMPONENT, f"resolve alias {self.name}"):
            try:
                found = self.client.indices.get_alias(name=self.name)
            except NotFoundError:
                return self.name if self.client.indices.exists(index=self.name) else None
        return next(iter(found))

    def switch(self, new: str) -> None:
        """Point the four aliases at generation `new`, in one atomic request."""
        live = self.live()
        actions: list[dict] = []
        for suffix in ES_SUFFIXES:
            alias = self.name + suffix
            if live == self.name:  # concrete indices of an earlier deployment: replaced atomically
                actions.append({"remove_index": {"index": alias}})
            elif live is not None and live != new:
                actions.append({"remove": {"index": live + suffix, "alias": alias}})
            actions.append({"add": {"index": new + suffix, "alias": alias}})
        with es.driver_errors(ES_COMPONENT, f"switch {self.name} to {new}"):
            self.client.indices.update_aliases(actions=actions)

    def retire(self, old: str) -> None:
        """After a switch: fence the writers still on `old`, then drop it."""
        if old != self.name:  # a plain index of an earlier deployment went with the switch
            self.fence(old)
            self.drop(old)

    def fence(self, old: str) -> None:
        """Move each of the old generation's checkpoint documents (one per lane of the log) on
        (same content, a new sequence number): an indexer still writing there fails its next
        conditional checkpoint write (ProjectionFenced) and re-reads the checkpoint through the
        alias, from the new generation."""
        from elasticsearch import NotFoundError

        meta = f"{old}-meta"
        with es.driver_errors(ES_COMPONENT, f"fence {old}"):
            try:
                found = self.client.mget(index=meta, ids=list(CHECKPOINT_LANES))["docs"]
            except NotFoundError:
                return
            for doc in found:
                if doc.get("found"):
                    self.client.index(index=meta, id=doc["_id"], document=doc["_source"], refresh="true")

    def drop(self, old: str) -> None:
        """Delete a generation's indices and its template (never through an alias)."""
        names = ",".join(old + suffix for suffix in ES_SUFFIXES)
        with es.driver_errors(ES_COMPONENT, f"drop {old}"):
            self.client.indices.delete(index=names, ignore_unavailable=True)
            if self.client.indices.exists_index_template(name=f"{old}-template"):
                self.client.indices.delete_index_template(name=f"{old}-template")


class QdrantGenerations(_Generations):
    """The vector collection's generations on one Qdrant server (or qdrant-client's local mode)."""

    def __init__(self, client: QdrantClient, name: str):
        self.client, self.name = client, name

    def _collections(self) -> set[str]:
        with _qdrant("list collections"):
            return {c.name for c in self.client.get_collections().collections}

    def live(self) -> str | None:
        with _qdrant("resolve alias"):
            aliased = {a.alias_name: a.collection_name for a in self.client.get_aliases().aliases}.get(self.name)
        if aliased is not None:
            return aliased
        return self.name if self.name in self._collections() else None

    def switch(self, new: str) -> None:
        """Point the alias at `new`: one request of alias operations, applied atomically."""
        live = self.live()
        operations: list = []
        if live is not None and live != self.name:
            operations.append(qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=self.name)))
        operations.append(qm.CreateAliasOperation(create_alias=qm.CreateAlias(collection_name=new, alias_name=self.name)))
        with _qdrant(f"switch {self.name} to {new}"):
            if live == self.name:  # a collection of an earlier deployment holds the name
                self.client.delete_collection(self.name)
            self.client.update_collection_aliases(change_aliases_operations=operations)

    def retire(self, old: str) -> None:
        """After a switch: drop `old`. Writes still in flight to it through the alias land in the
        new generation, where the vector index keeps the later of two states of a row."""
        self.drop(old)

    def drop(self, old: str) -> None:
        if old != self.name and old in self._collections():
            with _qdrant(f"drop {old}"):
                self.client.delete_collection(old)


@contextmanager
def _qdrant(action: str) -> Iterator[None]:
    """Qdrant out of reach (or failing, 5xx) is BackendUnavailable, as in the vector adapter."""
    try:
        yield
    except UnexpectedResponse as exc:
        if exc.status_code is not None and 400 <= exc.status_code < 500:
            raise
        raise BackendUnavailable(QDRANT_COMPONENT, f"{action}: HTTP {exc.status_code}") from exc
    except (ResponseHandlingException, OSError) as exc:
        raise BackendUnavailable(QDRANT_COMPONENT, f"{action}: {exc}") from exc

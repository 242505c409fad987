"""The people directory of a caller: built from the rows that caller may read, cached.

Built at read time, not by the projector: the directory of a reader is a function of the rows
that reader may read, so building it from `rows_in_scope(scope_for(caller))` keeps names met
only in unreadable rows out by construction. The cache is keyed by (tenant, applied position
of the tenant's lane, reader tokens): any applied write moves the position, so a cached
directory is never older than the rows it was built from.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime

from schemas.rows import Row
from services.core.people import ROLES, Person, best_role, build, named_by_row
from services.core.people_mentions import NameIndex, name_index
from services.core.scope import Scope, admits

# Per memory; one entry per (tenant, position, readers) seen lately. Under steady ingest every
# write makes a new key, so the bound is what the cache can hold at once.
CACHED_DIRECTORIES = 16


@dataclass(frozen=True, slots=True)
class Listed:
    """What a person's row list shows of a row: never its text, so a cached directory of 100k rows
    holds ids and titles, not 100k documents (16 of them would have been gigabytes)."""

    row_id: str
    event_time: datetime | None
    kind: str
    title: str | None
    thread: str | None
    author: str | None
    people: tuple[tuple[str, str], ...]  # (role, string as written) of the others it names


class Directory:
    def __init__(self, rows: list[Row], mapping: dict[str, str] | None = None) -> None:
        self.built = time.monotonic()
        named = named_by_row(rows)
        self.persons = build(rows, mapping, named)
        self._names: NameIndex | None = None
        self.rows = [Listed(r.row_id, r.event_time, r.kind, r.title, r.thread, r.author, tuple(others))
                     for r, others in zip(rows, named, strict=True)]

    @property
    def names(self) -> NameIndex:
        """The names the query's people rule looks up, built on first use (a race builds it twice)."""
        if self._names is None:
            self._names = name_index(self.persons)
        return self._names


_caches: "weakref.WeakKeyDictionary[object, OrderedDict]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_refreshing: set = set()  # (memory, reader) with a background rebuild running
# A directory older than the people rule's max age, up to this, is still used while a fresh one
# is built; past it the query builds one itself (a rebuild that keeps failing is not hidden long).
STALE_LIMIT_S = 300.0
log = logging.getLogger(__name__)


def directory_for(memory, caller, mapping: dict[str, str] | None = None, max_age_s: float | None = None) -> Directory:
    """The persons met in the caller's readable rows (author and participants). With max_age_s,
    a directory of the same reader built at most that long ago will do, even if rows were written
    since (the query's people rule: under steady ingest every write would rebuild it otherwise);
    one older, up to STALE_LIMIT_S, is returned at once while a fresh one is built in the
    background, so that a query never waits for a cold build it can do without."""
    readers = None if caller.readers is None else tuple(sorted(caller.readers))
    settings = tuple(sorted((mapping or {}).items()))
    key = (caller.tenant, memory.applied_for(caller.tenant), readers, settings)
    with _lock:
        cache = _caches.setdefault(memory, OrderedDict())
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        if max_age_s is not None:
            reader = (caller.tenant, readers, settings)
            newest = next((d for (tenant, _position, r, m), d in reversed(cache.items())
                           if (tenant, r, m) == reader), None)
            age = time.monotonic() - newest.built if newest is not None else None
            if age is not None and age <= max_age_s:
                return newest
            if age is not None and age <= STALE_LIMIT_S:
                if (memory, reader) not in _refreshing:
                    _refreshing.add((memory, reader))
                    threading.Thread(target=_refresh, args=(memory, caller, mapping, key, reader),
                                     name="orgmem-people-directory", daemon=True).start()
                return newest
    return _build(memory, caller, mapping, key)


def _build(memory, caller, mapping, key) -> Directory:
    scope: Scope = memory.scope_for(caller)
    # The store filters by scope; admits is checked again per row so the directory holds by
    # the same reference semantics every leg is tested against.
    # Without their texts: a directory keeps none, and at 100k rows the texts were most of the read.
    rows = [row for row in memory.rows_in_scope(scope, with_text=False) if admits(row, scope)]
    directory = Directory(rows, mapping)
    with _lock:
        cache = _caches.setdefault(memory, OrderedDict())
        cache[key] = directory
        while len(cache) > CACHED_DIRECTORIES:
            cache.popitem(last=False)
    return directory


def _refresh(memory, caller, mapping, key, reader) -> None:
    try:
        _build(memory, caller, mapping, key)
    except Exception:  # a full disk, a broken store: the next query builds it itself, and says why
        if getattr(memory, "closed", False):  # the server stopped during the build: not a fault
            log.debug("people directory: a background rebuild stopped, the store closed")
        else:
            log.warning("people directory: a background rebuild failed", exc_info=True)
    finally:
        with _lock:
            _refreshing.discard((memory, reader))


def rows_of(directory: Directory, person: Person) -> dict[str, list[Listed]]:
    """The person's rows by role (author always, the others where they have rows), newest first
    (undated last). A row counts once: as authored, else under the most specific role of the
    forms it names this person by."""
    aliases = person.aliases
    by_role: dict[str, list[Listed]] = {"author": []}
    for row in directory.rows:
        if row.author in aliases:
            by_role["author"].append(row)
        elif roles := [role for role, text in row.people if text in aliases and role in ROLES]:
            by_role.setdefault(best_role(roles), []).append(row)
        elif any(text in aliases for _role, text in row.people):
            by_role.setdefault("participant", []).append(row)

    def newest_first(rows: list[Listed]) -> list[Listed]:
        return sorted(rows, key=lambda r: (r.event_time is None, -(r.event_time.timestamp() if r.event_time else 0),
                                           r.row_id))
    return {role: newest_first(by_role[role]) for role in ROLES if role in by_role}

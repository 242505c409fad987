"""The people directory of a caller: built from the rows that caller may read, cached.

Built at read time, not by the projector: the directory of a reader is a function of the rows
that reader may read, so building it from `rows_in_scope(scope_for(caller))` keeps names met
only in unreadable rows out by construction. The cache is keyed by (tenant, applied position
of the tenant's lane, reader tokens): any applied write moves the position, so a cached
directory is never older than the rows it was built from.

Builds of one reader are coalesced (`_Flight`): at most one runs at a time, and a caller that
arrives while one runs waits for it and takes its directory when that build started at or after
the position the caller saw; else it waits for the next, which one of the waiters runs for all.
Under steady ingest every write moves the position, and twenty callers at once (a console page
refreshed, agents listing people) were twenty full builds of the same directory at once.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from schemas.rows import Row
from services.core.people import ROLES, Person, best_role, build, named_by_row
from services.core.people_mentions import NameIndex, name_index
from services.core.scope import Scope, admits

# Per memory: the newest directory of each of the last 16 readers. A newer directory of a reader
# replaces its older ones: under steady ingest every write makes a new key, and keeping 16
# positions of one reader held 16 copies of its row list (server RSS 2.9 GiB at 80k rows live with
# the people rule on every other query, 0.7 GiB in the last run without it; docs/people.md).
CACHED_DIRECTORIES = 16


class Listed(NamedTuple):
    """What a person's row list shows of a row: never its text, so a cached directory of 100k rows
    holds ids and titles, not 100k documents. A directory keeps each as a plain tuple of these
    fields (strings, dates, tuples of strings), which Python's collector stops tracking after its
    first pass; a slotted class or a named tuple stays tracked, and 100k rows were 100k more
    objects walked by every full collection. `rows_of` names the ones it returns."""

    row_id: str
    event_time: datetime | None
    kind: str
    title: str | None
    thread: str | None
    author: str | None
    people: tuple[tuple[str, str], ...]  # (role, string as written) of the others it names


_AUTHOR, _PEOPLE = Listed._fields.index("author"), Listed._fields.index("people")


class Directory:
    def __init__(self, rows: list[Row], mapping: dict[str, str] | None = None) -> None:
        self.built = time.monotonic()
        named = named_by_row(rows)
        self.persons = build(rows, mapping, named)
        self._names: NameIndex | None = None
        self.rows: list[tuple] = [(r.row_id, r.event_time, r.kind, r.title, r.thread, r.author, tuple(others))
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
_flights: "weakref.WeakKeyDictionary[object, dict]" = weakref.WeakKeyDictionary()  # memory -> reader -> _Flight
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
    return _coalesced(memory, caller, mapping, key, reader=(caller.tenant, readers, settings))


@dataclass(eq=False)
class _Flight:
    """One build of a reader's directory, and the position its key was read at."""

    position: int
    done: threading.Event = field(default_factory=threading.Event)
    directory: Directory | None = None
    error: BaseException | None = None


def _coalesced(memory, caller, mapping, key, reader) -> Directory:
    """A directory at least as new as `key`'s position, built once for every caller waiting on it."""
    position = key[1]
    while True:
        with _lock:
            if (cached := _caches.setdefault(memory, OrderedDict()).get(key)) is not None:
                return cached
            flights = _flights.setdefault(memory, {})
            flight, mine = flights.get(reader), False
            if flight is None:
                flight = flights[reader] = _Flight(position)
                mine = True
        if mine:
            try:
                flight.directory = _build(memory, caller, mapping, key)
                return flight.directory
            except BaseException as error:
                flight.error = error
                raise
            finally:
                with _lock:
                    flights.pop(reader, None)
                flight.done.set()
        flight.done.wait()
        if flight.error is not None:  # the same store failed for the build this caller waited on
            raise flight.error
        if flight.position >= position:
            return flight.directory  # type: ignore[return-value]
        # That build started before rows this caller must see: wait for (or run) the next.


def _build(memory, caller, mapping, key) -> Directory:
    scope: Scope = memory.scope_for(caller)
    # The store filters by scope; admits is checked again per row so the directory holds by
    # the same reference semantics every leg is tested against.
    # Without their texts: a directory keeps none, and at 100k rows the texts were most of the read.
    rows = [row for row in memory.rows_in_scope(scope, with_text=False) if admits(row, scope)]
    directory = Directory(rows, mapping)
    tenant, position, readers, settings = key
    with _lock:
        cache = _caches.setdefault(memory, OrderedDict())
        same_reader = [k for k in cache if (k[0], k[2], k[3]) == (tenant, readers, settings)]
        if any(k[1] > position for k in same_reader):
            return directory  # a newer one is cached already (a build that ran longer)
        for older in same_reader:
            del cache[older]
        cache[key] = directory
        while len(cache) > CACHED_DIRECTORIES:
            cache.popitem(last=False)
    return directory


def _refresh(memory, caller, mapping, key, reader) -> None:
    try:
        _coalesced(memory, caller, mapping, key, reader)
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
        author, others = row[_AUTHOR], row[_PEOPLE]
        if author in aliases:
            by_role["author"].append(Listed._make(row))
        elif roles := [role for role, text in others if text in aliases and role in ROLES]:
            by_role.setdefault(best_role(roles), []).append(Listed._make(row))
        elif any(text in aliases for _role, text in others):
            by_role.setdefault("participant", []).append(Listed._make(row))

    def newest_first(rows: list[Listed]) -> list[Listed]:
        return sorted(rows, key=lambda r: (r.event_time is None, -(r.event_time.timestamp() if r.event_time else 0),
                                           r.row_id))
    return {role: newest_first(by_role[role]) for role in ROLES if role in by_role}

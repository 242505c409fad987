"""The version fields of recently read threads, kept beside the SQLite row store.

Every answer names each row's version of its thread, and that needs every row of the row's
thread: a meeting transcript is a thread of hundreds of turns, so an answer of 50 rows read
about a thousand rows' fields from SQLite per query (11 ms of a 35 ms query at 10k rows,
bench/live.py). Threads change far less often than they are read: a live stream appends to a
few threads at a time while queries read many.

Never stale, by construction: the store drops a thread when its own connection writes a row of
it, everything when it erases or resets, and everything when SQLite's `PRAGMA data_version`
says another connection (a second indexer over the same file) has committed. Only the view
without `known_at` is kept: with it the fields are history states at that time.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

from services.core.versions import VersionFields

DEFAULT_MAX_FIELDS = 50_000  # about 10 MB of fields; least recently read threads go first


class ThreadFieldsCache:
    """Not thread-safe: the row store calls it under its own lock."""

    def __init__(self, max_fields: int = DEFAULT_MAX_FIELDS):
        self.max_fields = max_fields
        self._threads: OrderedDict[tuple[str, str], tuple[VersionFields, ...]] = OrderedDict()
        self._fields = 0
        self._data_version: int | None = None

    def seen_data_version(self, data_version: int) -> None:
        """What `PRAGMA data_version` says now: a change means another connection committed."""
        if data_version != self._data_version:
            self.clear()
            self._data_version = data_version

    def get(self, tenant: str, thread: str) -> tuple[VersionFields, ...] | None:
        key = (tenant, thread)
        found = self._threads.get(key)
        if found is not None:
            self._threads.move_to_end(key)
        return found

    def put(self, tenant: str, thread: str, fields: tuple[VersionFields, ...]) -> None:
        if len(fields) > self.max_fields:
            return  # a thread bigger than the whole cache is read each time
        self.drop([(tenant, thread)])
        self._threads[(tenant, thread)] = fields
        self._fields += len(fields)
        while self._fields > self.max_fields:
            _, oldest = self._threads.popitem(last=False)
            self._fields -= len(oldest)

    def drop(self, keys: Iterable[tuple[str, str | None]]) -> None:
        for key in keys:
            gone = self._threads.pop(key, None)  # type: ignore[arg-type]
            if gone is not None:
                self._fields -= len(gone)

    def clear(self) -> None:
        self._threads.clear()
        self._fields = 0

    def __len__(self) -> int:
        return self._fields

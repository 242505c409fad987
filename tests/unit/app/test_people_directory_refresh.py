"""The people rule's directory is rebuilt off the query path: a query past its max age gets the
last directory at once while a fresh one is built in the background (one at a time), and gets a
fresh one after; past STALE_LIMIT_S it waits for its own build."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

from schemas.rows import Row
from services.app import people
from services.core.caller import Caller
from services.core.scope import Scope

AT = datetime(2026, 1, 1, tzinfo=UTC)


class SlowStore:
    """What directory_for reads of a memory, with a build that waits until released."""

    def __init__(self):
        self.position, self.builds, self.release = 1, 0, threading.Event()
        self.release.set()
        self.authors = ["dana@acme.example"]
        self.closed, self.error = False, None

    def close(self):
        self.closed = True

    def applied_for(self, tenant):
        return self.position

    def scope_for(self, caller):
        return Scope(tenant=caller.tenant, readers=caller.readers)

    def rows_in_scope(self, scope, with_text=True):
        self.builds += 1
        assert self.release.wait(10)
        if self.closed:
            raise RuntimeError("Cannot operate on a closed database.")
        if self.error:
            raise self.error
        return [Row(row_id=f"r{n}", tenant="t", text="", author=a, ingest_position=n, ingested_at=AT)
                for n, a in enumerate(self.authors, start=1)]


def names(directory):
    return sorted(p.display_name for p in directory.persons.values())


def test_a_stale_directory_answers_at_once_while_a_fresh_one_is_built():
    memory, caller = SlowStore(), Caller(tenant="t")
    first = people.directory_for(memory, caller, max_age_s=30)
    assert names(first) == ["dana@acme.example"] and memory.builds == 1

    memory.position, memory.authors = 2, ["dana@acme.example", "sam@acme.example"]
    assert people.directory_for(memory, caller, max_age_s=30) is first  # young enough: no build
    first.built -= 60  # past the max age
    memory.release.clear()  # the background build now blocks
    started = time.monotonic()
    for _ in range(3):  # the rebuild is not waited for, and not started twice
        assert people.directory_for(memory, caller, max_age_s=30) is first
    assert time.monotonic() - started < 1
    deadline = time.monotonic() + 5
    while memory.builds < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert memory.builds == 2
    memory.release.set()
    deadline = time.monotonic() + 5
    while (fresh := people.directory_for(memory, caller, max_age_s=30)) is first and time.monotonic() < deadline:
        time.sleep(0.01)
    assert names(fresh) == ["dana@acme.example", "sam@acme.example"] and memory.builds == 2


def test_past_the_stale_limit_the_query_builds_its_own():
    memory, caller = SlowStore(), Caller(tenant="t", readers=frozenset({"user:rita"}))
    first = people.directory_for(memory, caller, max_age_s=30)
    memory.position, memory.authors = 2, ["sam@acme.example"]
    first.built -= people.STALE_LIMIT_S + 1
    own = people.directory_for(memory, caller, max_age_s=30)
    assert own is not first and names(own) == ["sam@acme.example"] and memory.builds == 2


def stale_build_blocked(memory, caller):
    first = people.directory_for(memory, caller, max_age_s=30)
    memory.position = 2
    first.built -= 60
    memory.release.clear()
    assert people.directory_for(memory, caller, max_age_s=30) is first  # the rebuild waits in the background
    deadline = time.monotonic() + 5
    while memory.builds < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert memory.builds == 2


def wait_for_refresh_end(memory):
    deadline = time.monotonic() + 5
    while any(m is memory for m, _ in list(people._refreshing)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(m is memory for m, _ in list(people._refreshing))


def test_a_rebuild_cut_short_by_shutdown_is_no_fault_in_the_log(caplog):
    memory, caller = SlowStore(), Caller(tenant="t", readers=frozenset({"user:shut"}))
    stale_build_blocked(memory, caller)
    with caplog.at_level(logging.DEBUG, logger=people.__name__):
        memory.close()  # the server stops while the build waits
        memory.release.set()
        wait_for_refresh_end(memory)
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert not any(r.exc_info for r in caplog.records)  # no traceback on the operator's terminal


def test_a_rebuild_that_fails_while_open_is_still_a_warning(caplog):
    memory, caller = SlowStore(), Caller(tenant="t", readers=frozenset({"user:open"}))
    stale_build_blocked(memory, caller)
    memory.error = OSError("No space left on device")
    with caplog.at_level(logging.DEBUG, logger=people.__name__):
        memory.release.set()
        wait_for_refresh_end(memory)
    assert [r.levelno for r in caplog.records] == [logging.WARNING] and caplog.records[0].exc_info


def in_threads(count, call):
    results, threads = [None] * count, []
    for n in range(count):
        def one(n=n):
            try:
                results[n] = call()
            except Exception as error:  # noqa: BLE001 - the test looks at what each caller got
                results[n] = error
        threads.append(threading.Thread(target=one))
        threads[-1].start()
    return results, threads


def wait_builds(memory, count):
    deadline = time.monotonic() + 5
    while memory.builds < count and time.monotonic() < deadline:
        time.sleep(0.01)
    assert memory.builds == count


def test_callers_at_once_share_one_build():
    memory, caller = SlowStore(), Caller(tenant="t", readers=frozenset({"user:many"}))
    memory.release.clear()
    results, threads = in_threads(12, lambda: people.directory_for(memory, caller))
    wait_builds(memory, 1)
    time.sleep(0.1)  # every caller has arrived and waits on the one build
    memory.release.set()
    for t in threads:
        t.join(10)
    assert memory.builds == 1 and all(r is results[0] for r in results) and names(results[0]) == ["dana@acme.example"]


def test_a_caller_who_saw_a_later_write_waits_for_a_build_that_holds_it():
    memory, caller = SlowStore(), Caller(tenant="t", readers=frozenset({"user:late"}))
    memory.release.clear()
    early, early_threads = in_threads(1, lambda: people.directory_for(memory, caller))
    wait_builds(memory, 1)  # a build at position 1 is running
    memory.position, memory.authors = 2, ["dana@acme.example", "sam@acme.example"]
    late, late_threads = in_threads(3, lambda: people.directory_for(memory, caller))
    time.sleep(0.1)
    memory.release.set()
    for t in early_threads + late_threads:
        t.join(10)
    # The running build started before the write: the late callers get one more build, shared.
    assert memory.builds == 2
    assert all(names(r) == ["dana@acme.example", "sam@acme.example"] for r in late)
    assert late[0] is late[1] is late[2] and late[0] is not early[0]


def test_a_failed_build_reaches_its_waiters_and_the_next_call_builds_again():
    memory, caller = SlowStore(), Caller(tenant="t", readers=frozenset({"user:fail"}))
    memory.release.clear()
    memory.error = OSError("No space left on device")
    results, threads = in_threads(4, lambda: people.directory_for(memory, caller))
    wait_builds(memory, 1)
    time.sleep(0.1)
    memory.release.set()
    for t in threads:
        t.join(10)
    assert memory.builds == 1 and all(isinstance(r, OSError) for r in results)
    memory.error = None
    assert names(people.directory_for(memory, caller)) == ["dana@acme.example"] and memory.builds == 2


def test_a_newer_directory_of_a_reader_replaces_its_older_ones():
    memory = SlowStore()
    rita, sam = (Caller(tenant="t", readers=frozenset({f"user:{n}"})) for n in ("rita", "sam"))
    kept = people.directory_for(memory, sam)
    for position in range(1, 6):  # steady ingest: every write a new position
        memory.position = position
        newest = people.directory_for(memory, rita)
    cache = people._caches[memory]
    assert list(cache.values()).count(newest) == 1 and kept in cache.values() and len(cache) == 2


def test_the_row_list_is_left_alone_by_the_collector():
    import gc

    directory = people.directory_for(SlowStore(), Caller(tenant="t", readers=frozenset({"user:gc"})))
    gc.collect()
    assert directory.rows and not any(gc.is_tracked(row) for row in directory.rows)

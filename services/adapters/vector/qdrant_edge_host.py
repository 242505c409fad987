"""A sealed shard of the tiered vector index (qdrant_edge_tiers.py), opened and searched in a
process of its own.

Opening a shard with a graph holds the interpreter lock for as long as it reads the shard (at
100k rows 0.5-0.7 s on this 2-core host, and it grows with the rows): in the server's process,
every request waits that long each time a build swaps a new sealed shard in. Here the open runs in
a host process while the server keeps answering from the shards it has; the server only waits,
with the lock released, for the host to say it is ready. Searches are sent to the host as the
caller's scope (a Qdrant Edge filter does not pickle) and answered with the ranked hits, which the
tiered index merges with its exact shards' own; it asks every host before searching its exact
shards, so the graph searches run on the other core meanwhile.

One host per sealed shard, `python -m` this module, speaking services/adapters/child_process.py's
messages. A host that dies (OOM killer, kill -9) is started again on the shard's next call; the
call that found it dead is answered BackendUnavailable. It closes the shard and exits when the
server closes it, and exits at once, touching nothing, when the server dies.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

import numpy as np

from schemas.rows import Row
from services.adapters.child_process import (
    answer_pipe,
    child_env,
    read_message,
    requests_pipe,
    stop_child,
    watch_parent,
    write_message,
)
from services.adapters.vector._payload import Scored
from services.adapters.vector.qdrant_edge import COMPONENT
from services.core.scope import Scope
from services.errors import BackendUnavailable, OrgmemError

log = logging.getLogger(__name__)

# How often a caller waiting on a host checks that it is still alive.
LIVENESS_CHECK_S = 0.5
# How long a host may take to flush and close its shard before it is killed.
CLOSE_WAIT_S = 30


class HostedShard:
    """The calls the tiered index makes of a sealed shard, answered by its host process."""

    def __init__(self, path: Path, dim: int, search_ef: int | None = None):
        self.path, self.dim, self._search_ef = Path(path), dim, search_ef
        self._lock = threading.Lock()  # one exchange at a time on the pipes
        self._process: subprocess.Popen | None = None
        self._closed = False
        self.carrying = False  # whether point ids spell row ids: said by the host when it opens
        with self._lock:
            self._start()

    # --- the host process -----------------------------------------------------------------

    def _start(self) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", __name__, str(os.getpid()), str(self.path), str(self.dim), str(self._search_ef or 0)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env(), close_fds=True)
        try:
            self.carrying = self._answer("open")
        except BaseException:
            self._stop()
            raise

    def _stop(self) -> None:
        """Ask the host to close the shard (it flushes) and wait for it to exit."""
        process = self._process
        if process is None:
            return
        self._process = None
        # A host that died or hangs loses nothing: every write was flushed before it was answered.
        if not stop_child(process, CLOSE_WAIT_S, farewell=("close",)):
            log.warning("vector shard host for %s did not close in %d s; killed", self.path, CLOSE_WAIT_S)

    def _send(self, request: tuple) -> None:
        if self._closed:
            raise BackendUnavailable(COMPONENT, f"Qdrant Edge shard at {self.path} is closed")
        if self._process is None or self._process.poll() is not None:
            if self._process is not None:
                log.warning("vector shard host for %s exited (%s); starting another", self.path, self._process.poll())
                self._stop()
            self._start()
        try:
            write_message(self._process.stdin, request)
        except (BrokenPipeError, OSError, ValueError) as exc:
            raise BackendUnavailable(COMPONENT, f"the process serving {self.path} is gone: {exc}") from exc

    def _answer(self, action: str):
        """Wait for the host's answer with the interpreter lock released; a host that died
        meanwhile is an error of this call (the next call starts another)."""
        process = self._process
        while not select.select([process.stdout], [], [], LIVENESS_CHECK_S)[0]:
            if process.poll() is not None:
                break
        try:
            reply = read_message(process.stdout)
        except (EOFError, OSError, ValueError):
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=1)  # its pipe closes a moment before its exit status is known
            raise BackendUnavailable(
                COMPONENT, f"the process serving {self.path} exited ({process.poll()}) during {action}") from None
        status, value = reply
        if status == "ok":
            return value
        if status == "invalid":
            raise OrgmemError(value)
        raise BackendUnavailable(COMPONENT, value)

    def _call(self, action: str, *args):
        with self._lock:
            self._send((action, *args))
            return self._answer(action)

    # --- what the tiered index asks ---------------------------------------------------------

    @contextmanager
    def asking(self, query: list[float], scope: Scope, fetch: int, exact: bool) -> Iterator[Callable[[], list[Scored]]]:
        """Send a search now and yield the call that reads its hits, so that the host searches
        while the caller does something else. Inside the block the shard answers nothing else;
        an answer left unread is read on the way out, so the pipes stay in step."""
        with self._lock:
            self._send(("nearest", query, scope, fetch, exact))
            unread = True

            def hits() -> list[Scored]:
                nonlocal unread
                if not unread:
                    raise OrgmemError("a search's hits are read once")
                unread = False  # read, or failed to be: either way the pipe holds no answer of it
                return list(map(Scored, *self._answer("search")))

            try:
                yield hits
            finally:
                if unread:
                    with suppress(OrgmemError):
                        hits()

    def count(self) -> int:
        return self.sizes()[0]

    def sizes(self) -> tuple[int, int]:
        """(points, points in a graph segment); (0, 0) once closed."""
        if self._closed:
            return 0, 0
        return tuple(self._call("sizes"))

    def flush(self) -> None:
        self._call("flush")

    def discard(self, row_ids: Sequence[str]) -> list[str]:
        return self._call("discard", list(row_ids))

    def update_state(self, rows: Sequence[Row]) -> None:
        if rows:
            self._call("update_state", list(rows))

    def delete(self, row_ids: Sequence[str]) -> None:
        self._call("delete", list(row_ids))

    def vectors(self, row_ids: Sequence[str]) -> dict[str, np.ndarray]:
        return self._call("vectors", list(row_ids)) if row_ids else {}

    def host_rss_bytes(self) -> int:
        """The host's resident memory (Linux; 0 where /proc cannot tell or no host runs)."""
        process = self._process
        try:
            return int(Path(f"/proc/{process.pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, OSError, ValueError, IndexError):
            return 0

    def payload_schema(self) -> dict[str, bool]:
        """Each payload index's name and whether it is kept on disk (for tests and diagnostics)."""
        return self._call("payload_schema")

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._stop()


# -- inside a host ----------------------------------------------------------------------------

def _serve(parent: int, path: Path, dim: int, search_ef: int | None) -> None:
    from services.adapters.vector.qdrant_edge import QdrantEdgeVectorIndex
    from services.adapters.vector.qdrant_edge_build import SEALED_OPTIMIZERS
    from services.adapters.vector.qdrant_edge_search import edge_filter

    watch_parent(parent)
    answers, requests = answer_pipe(), requests_pipe()
    try:
        shard = QdrantEdgeVectorIndex(path, dim, search_ef, optimizers=SEALED_OPTIMIZERS, wal=None)
    except Exception as exc:  # reported to the server, which raises it where it opened the shard
        write_message(answers, _failure(exc))
        return
    write_message(answers, ("ok", shard.carrying))

    def nearest(query: list[float], scope: Scope, fetch: int, exact: bool) -> tuple[list, list, list]:
        # As columns: a list of named tuples pickles five times slower (about 50 us per search).
        found = shard.nearest(query, edge_filter(scope), fetch, exact)
        return [s.row_id for s in found], [s.score for s in found], [s.ingest_position for s in found]

    handlers: dict[str, Callable] = {
        "nearest": nearest,
        "sizes": shard.sizes, "flush": shard.flush, "discard": shard.discard, "update_state": shard.update_state,
        "delete": shard.delete, "vectors": shard.vectors, "payload_schema": shard.payload_schema,
    }
    while True:
        try:
            action, *args = read_message(requests)
        except EOFError:
            # The server died. Every write was flushed before it was answered, so there is nothing
            # to save, and the next server may be opening this folder already: leave it at once.
            os._exit(0)
        if action == "close":
            shard.close()
            write_message(answers, ("ok", None))
            return
        try:
            reply = ("ok", handlers[action](*args))
        except Exception as exc:
            reply = _failure(exc)
        write_message(answers, reply)


def _failure(exc: Exception) -> tuple[str, str]:
    if isinstance(exc, BackendUnavailable):
        return "unavailable", str(exc).removeprefix(f"{exc.component} unavailable: ")
    if isinstance(exc, OrgmemError):
        return "invalid", str(exc)
    return "unavailable", f"Qdrant Edge shard host: {type(exc).__name__}: {exc}"


if __name__ == "__main__":
    # Ctrl-C in a terminal reaches the whole process group: the server decides when to stop us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING)
    try:
        _serve(int(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]) or None)
    except OSError:  # the server stopped listening mid-answer (it closed the shard, or died)
        pass

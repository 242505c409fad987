"""Document encoding spread over N encoder processes, for a backlog on a machine with N cores.

One encoder is bound by one core (an ONNX session with one thread, see the onnx adapter); a
process per core gets past the interpreter lock and the spin-waiting of a multi-threaded
session. Each `encode` call cuts its texts into N contiguous runs, one per worker, and joins the
answers in the same order: the projector that calls it stays one ordered loop, so the write-path
decisions and the order rows are written in do not change. A worker holds the same model at the
same precision as the in-process encoder, so the vectors are the same (fp32, within 1e-6).

Every batch goes to the workers by default, the steady trickle of a live server too: a batch
encoded in the server's process runs at normal priority and takes a core from the queries, while
the workers run in SCHED_IDLE (or at nice 10) and give it back as soon as a query thread wakes.
Shipping a batch costs a pickle of its texts and vectors. `min_batch` keeps batches under it in
process; the workers start on the first batch they get.

Workers are `python -m` this module, talking length-prefixed pickles over their stdin and
stdout (services/adapters/child_process.py). A worker that dies (OOM killer,
kill -9) is restarted and its run sent once more; a second failure raises BackendUnavailable,
which makes the indexer pause and retry the batch, so a row is neither lost nor written twice.
Workers never outlive the parent: each exits when its stdin closes and, in case the parent was
killed mid-batch, when it sees its parent process change.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

import numpy as np

from services.adapters.child_process import (
    answer_pipe,
    child_env,
    read_message,
    requests_pipe,
    stop_child,
    watch_parent,
    write_message,
)
from services.errors import BackendUnavailable, OrgmemError

log = logging.getLogger(__name__)

COMPONENT = "embedder (encoder processes)"
WORKER_NICENESS = 10
# "idle": the kernel's SCHED_IDLE class, which any waking thread of normal priority preempts at
# once; "low": nice 10, which still lets a busy worker run out its slice before a query thread.
PRIORITIES = ("idle", "low")


class ProcessPoolEmbedder:
    """An Embedder over `processes` worker processes, each built by `factory` (a picklable
    callable returning an Embedder); `local`, the process's own encoder of the same model,
    encodes the batches under `min_batch` texts (embedder.encoder_pool_min_batch) and names the
    model and dimension."""

    def __init__(self, local, factory: Callable[[], object], processes: int, min_batch: int = 1,
                 start_timeout_s: float = 300.0, priority: str = "idle"):
        if processes < 2:
            raise OrgmemError(f"embedder.encoder_processes: a pool needs at least 2 processes, got {processes}")
        if priority not in PRIORITIES:
            raise OrgmemError(f"embedder.encoder_priority: expected one of {', '.join(PRIORITIES)}, got {priority!r}")
        self.priority = priority
        self._local, self._factory, self.processes = local, factory, processes
        self.name, self.dim = local.name, local.dim
        self.min_batch, self.start_timeout_s = max(1, min_batch), start_timeout_s
        self._workers: list[_Worker | None] = [None] * processes
        self._lock = threading.Lock()  # one call at a time: each worker holds one request at most
        self._closed = False
        self.restarts = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if len(texts) < self.min_batch:
            return self._local.encode(texts)
        with self._lock:
            if self._closed:
                raise OrgmemError(f"{COMPONENT}: encode after close")
            runs = _split(list(texts), self.processes)
            answers: list[np.ndarray | None] = [None] * len(runs)
            failed = self._dispatch(runs, answers)
            for i in failed:  # a worker died mid-run: a fresh one gets the run once more
                self._restart(i)
                if self._dispatch({i: runs[i]}, answers):
                    raise BackendUnavailable(COMPONENT, f"worker {i} failed twice on a run of {len(runs[i])} texts")
        return np.concatenate(answers) if len(answers) > 1 else answers[0]

    def worker_pids(self) -> list[int]:
        return [w.process.pid for w in self._workers if w is not None]

    def close(self) -> None:
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, [None] * self.processes
        for worker in workers:
            if worker is not None:
                worker.stop()

    # -- the workers ------------------------------------------------------------------------

    def _dispatch(self, runs, answers: list) -> list[int]:
        """Send each run to its worker, then collect the answers; the indexes whose worker died."""
        runs = dict(enumerate(runs)) if isinstance(runs, list) else runs
        self._start_missing(list(runs))
        sent, failed, errors = [], [], []
        for i, run in runs.items():
            (sent if self._workers[i].send(run) else failed).append(i)
        for i in sent:  # every answer is read, so that each worker's next answer is its next run's
            reply = self._workers[i].receive()
            if reply is None:
                failed.append(i)
            elif reply[0] == "error":
                errors.append(f"worker {i}: {reply[1]}")
            else:
                answers[i] = reply[1]
        if errors:
            raise BackendUnavailable(COMPONENT, "; ".join(errors))
        return sorted(failed)

    def _start_missing(self, indexes: list[int]) -> None:
        """Start the workers that are not running, all at once (each spends a second loading the
        model); one killed while loading is started once more."""
        starting = [i for i in indexes if self._workers[i] is None or not self._workers[i].alive()]
        deadline = time.monotonic() + self.start_timeout_s
        pending = starting
        try:
            for _attempt in range(2):
                for i in pending:
                    if self._workers[i] is not None:
                        self._workers[i].stop()
                    self._workers[i] = _Worker(self._factory, self.priority)
                pending = [i for i in pending if not self._workers[i].wait_ready(self.dim, deadline)]
                if not pending:
                    break
            else:
                raise BackendUnavailable(COMPONENT, "a worker could not start: it exited with "
                                         f"{self._workers[pending[0]].process.poll()} while loading, twice")
        except BaseException:
            for i in starting:  # none left half started: the next call starts them afresh
                self._workers[i].stop()
                self._workers[i] = None
            raise
        if starting:
            log.debug("encoder processes %s started for %s", [self._workers[i].process.pid for i in starting], self.name)

    def _restart(self, i: int) -> None:
        self.restarts += 1
        log.warning("encoder process %d died (exit %s); starting another", i, self._workers[i].process.poll())
        self._workers[i].stop()
        self._workers[i] = None


def _split(texts: list[str], parts: int) -> list[list[str]]:
    """Contiguous runs of near-equal size, in order (fewer runs than parts for a short list)."""
    parts = min(parts, len(texts))
    size, extra = divmod(len(texts), parts)
    runs, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        runs.append(texts[start:end])
        start = end
    return runs


class _Worker:
    def __init__(self, factory: Callable[[], object], priority: str):
        self.process = subprocess.Popen([sys.executable, "-m", __name__, str(os.getpid()), priority], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=child_env(), close_fds=True)
        self.send(factory)

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_ready(self, dim: int, deadline: float) -> bool:
        """The first answer names the model's dimension, or why it could not be loaded; False
        when the worker died before answering."""
        if not select.select([self.process.stdout], [], [], max(0.0, deadline - time.monotonic()))[0]:
            raise BackendUnavailable(COMPONENT, "a worker did not load its encoder in time")
        reply = self.receive()
        if reply is None:
            return False
        if reply[0] != "ready":
            raise BackendUnavailable(COMPONENT, f"a worker could not start: {reply[1]}")
        if reply[1] != dim:
            raise OrgmemError(f"{COMPONENT}: a worker's encoder has dimension {reply[1]}, the process's {dim}")
        return True

    def send(self, message) -> bool:
        try:
            write_message(self.process.stdin, message)
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def receive(self):
        try:
            return read_message(self.process.stdout)
        except (EOFError, OSError, ValueError):
            return None

    def stop(self) -> None:
        stop_child(self.process, 5)  # stdin closed: it exits after the run at hand


# -- inside a worker --------------------------------------------------------------------------

def _lower_priority(priority: str) -> None:
    """A backlog must not slow the queries: the server's own threads (its query encoder among
    them) take the cores first, the workers the time they leave. On Linux both the class and
    nice belong to a thread, and threads started later inherit them; those already running
    (numpy's BLAS pool starts at import) are set one by one."""
    try:
        threads = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]  # no /proc: the calling thread
    idle = priority == "idle" and hasattr(os, "SCHED_IDLE")
    for tid in threads:
        if idle:
            try:
                os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
                continue
            except ProcessLookupError:
                continue  # that thread has ended meanwhile
            except OSError:
                idle = False  # refused (a sandbox, a kernel without the class): nice from here on
        with contextlib.suppress(ProcessLookupError):
            os.setpriority(os.PRIO_PROCESS, tid, WORKER_NICENESS)


def _serve(parent: int, priority: str) -> None:
    _lower_priority(priority)
    watch_parent(parent)
    answers, requests = answer_pipe(), requests_pipe()
    try:
        factory = read_message(requests)
        embedder = factory()
    except EOFError:
        return
    except Exception as exc:  # any loading failure is reported to the parent, which raises it
        write_message(answers, ("error", f"{type(exc).__name__}: {exc}"))
        return
    write_message(answers, ("ready", embedder.dim))
    while True:
        try:
            texts = read_message(requests)
        except EOFError:
            return  # the parent closed the pool (or died)
        try:
            reply = ("ok", np.asarray(embedder.encode(texts), dtype=np.float32))
        except Exception as exc:
            reply = ("error", f"{type(exc).__name__}: {exc}")
        write_message(answers, reply)


if __name__ == "__main__":
    # Ctrl-C in a terminal reaches the whole process group: the parent decides when to stop us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _serve(int(sys.argv[1]), sys.argv[2])
    except OSError:  # the parent stopped listening mid-answer (it closed the pool, or died)
        pass

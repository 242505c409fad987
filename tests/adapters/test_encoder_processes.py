"""Document encoding over encoder processes: the same vectors in the same order as one encoder in
process, a worker killed mid-batch replaced without losing its run, and no worker outliving its
parent, even one killed in the middle of a run."""

from __future__ import annotations

import functools
import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from services.adapters.embedder.process_pool import ProcessPoolEmbedder
from services.errors import BackendUnavailable, OrgmemError

ROOT = Path(__file__).resolve().parents[2]


class ToyEncoder:
    """A deterministic encoder with no model (a vector from the text's hash), optionally slow."""

    name, dim = "toy", 8

    def __init__(self, delay_s: float = 0.0, load_s: float = 0.0):
        self.delay_s = delay_s
        time.sleep(load_s)

    def encode(self, texts):
        time.sleep(self.delay_s * len(texts))
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest()[:8], dtype=np.uint8) for t in texts]
        vectors = np.array(rows, dtype=np.float32).reshape(len(texts), self.dim) + 1
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


class BrokenEncoder:
    def __init__(self):
        raise OrgmemError("cannot load embedding model 'nope'")


class DyingEncoder(ToyEncoder):
    """Dies on every run, like a worker the OOM killer takes each time."""

    def encode(self, texts):
        os._exit(9)


def alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting for a reaper."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def wait_gone(pids, timeout_s: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def encoder_workers(parent: int | None = None) -> list[int]:
    """The running encoder processes whose parent is `parent` (this process when None)."""
    parent = os.getpid() if parent is None else parent
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == parent and fields[0] not in ("Z", "X") and b"process_pool" in cmdline:
            found.append(int(stat.parent.name))
    return sorted(found)


TEXTS = [f"note {i}: the {'long ' * (i % 9)}review of item {i}" for i in range(101)]


@pytest.fixture
def toy_pool():
    pool = ProcessPoolEmbedder(ToyEncoder(), functools.partial(ToyEncoder, 0.002), processes=3)
    yield pool
    pool.close()


def test_runs_come_back_in_order_from_every_worker(toy_pool):
    vectors = toy_pool.encode(TEXTS)
    np.testing.assert_array_equal(vectors, ToyEncoder().encode(TEXTS))
    assert len(set(toy_pool.worker_pids())) == 3 and os.getpid() not in toy_pool.worker_pids()
    # The live trickle's small batches go to the same workers (one text: one run on one worker).
    pids = toy_pool.worker_pids()
    np.testing.assert_array_equal(toy_pool.encode(TEXTS[:5]), ToyEncoder().encode(TEXTS[:5]))
    np.testing.assert_array_equal(toy_pool.encode(TEXTS[7:8]), ToyEncoder().encode(TEXTS[7:8]))
    assert toy_pool.worker_pids() == pids and toy_pool.encode([]).shape == (0, 8)


def test_batches_under_min_batch_stay_in_process_and_start_no_worker():
    own = ToyEncoder()
    pool = ProcessPoolEmbedder(own, functools.partial(ToyEncoder), processes=2, min_batch=32)
    try:
        np.testing.assert_array_equal(pool.encode(TEXTS[:31]), own.encode(TEXTS[:31]))
        assert pool.worker_pids() == []
        pool.encode(TEXTS[:32])
        assert len(pool.worker_pids()) == 2
    finally:
        pool.close()


def test_the_setting_reaches_the_pool_and_every_batch_goes_to_the_workers_by_default():
    from services.bootstrap.components import pooled
    from services.settings import EmbedderSettings

    assert EmbedderSettings().encoder_pool_min_batch == 1
    for hostile in (0, -3, "many", {"n": 2}):  # from an ORGMEM_ variable or a settings file
        with pytest.raises(ValidationError, match="encoder_pool_min_batch"):
            EmbedderSettings(encoder_pool_min_batch=hostile)
    pool = pooled(EmbedderSettings(encoder_processes=2, encoder_pool_min_batch=7), ToyEncoder())
    try:
        assert isinstance(pool, ProcessPoolEmbedder) and pool.min_batch == 7 and pool.worker_pids() == []
    finally:
        pool.close()


def test_a_worker_killed_mid_batch_is_replaced_and_its_run_sent_again(toy_pool):
    toy_pool.encode(TEXTS)  # started
    victim = toy_pool.worker_pids()[1]
    texts = [f"{t} again" for t in TEXTS] * 4  # ~0.27 s per worker
    result = {}
    thread = threading.Thread(target=lambda: result.update(v=toy_pool.encode(texts)))
    thread.start()
    time.sleep(0.1)
    os.kill(victim, signal.SIGKILL)
    thread.join(30)
    np.testing.assert_array_equal(result["v"], ToyEncoder().encode(texts))
    assert toy_pool.restarts == 1 and victim not in toy_pool.worker_pids()
    assert len(toy_pool.worker_pids()) == 3
    np.testing.assert_array_equal(toy_pool.encode(TEXTS), ToyEncoder().encode(TEXTS))  # and it keeps working


def test_a_worker_killed_while_loading_is_started_again():
    pool = ProcessPoolEmbedder(ToyEncoder(), functools.partial(ToyEncoder, load_s=1.0), processes=2)
    result = {}
    thread = threading.Thread(target=lambda: result.update(v=pool.encode(TEXTS)))
    try:
        thread.start()
        deadline = time.monotonic() + 10
        while len(pool.worker_pids()) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        victim = pool.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        thread.join(30)
        np.testing.assert_array_equal(result["v"], ToyEncoder().encode(TEXTS))
        assert victim not in pool.worker_pids() and len(pool.worker_pids()) == 2
    finally:
        pool.close()


def test_a_worker_that_dies_on_every_run_fails_the_call_clearly():
    pool = ProcessPoolEmbedder(ToyEncoder(), functools.partial(DyingEncoder), processes=2)
    try:
        with pytest.raises(BackendUnavailable, match="encoder processes.*failed twice"):
            pool.encode(TEXTS)
        assert pool.restarts >= 1
    finally:
        pool.close()


def test_a_worker_that_cannot_load_its_model_says_why():
    pool = ProcessPoolEmbedder(ToyEncoder(), functools.partial(BrokenEncoder), processes=2)
    try:
        with pytest.raises(BackendUnavailable, match="could not start.*cannot load embedding model 'nope'"):
            pool.encode(TEXTS)
        assert pool.worker_pids() == []
    finally:
        pool.close()


def test_close_stops_every_worker_and_refuses_more_work(toy_pool):
    toy_pool.encode(TEXTS)
    pids = toy_pool.worker_pids()
    toy_pool.close()
    assert wait_gone(pids) == []
    with pytest.raises(OrgmemError, match="after close"):
        toy_pool.encode(TEXTS)


def test_a_pool_needs_two_processes():
    with pytest.raises(OrgmemError, match="encoder_processes"):
        ProcessPoolEmbedder(ToyEncoder(), functools.partial(ToyEncoder), processes=1)


PARENT = textwrap.dedent("""
    import functools, sys, threading, time
    from services.adapters.embedder.process_pool import ProcessPoolEmbedder
    from tests.adapters.test_encoder_processes import ToyEncoder

    delay_s = float(sys.argv[1])
    pool = ProcessPoolEmbedder(ToyEncoder(), functools.partial(ToyEncoder, delay_s), processes=2)
    run = threading.Thread(target=pool.encode, args=([f"text {i}" for i in range(40)],), daemon=True)
    run.start()
    if delay_s == 0:
        run.join()  # idle workers, waiting for the next run
    while len(pool.worker_pids()) < 2:
        time.sleep(0.05)
    time.sleep(1)
    print(" ".join(map(str, pool.worker_pids())), flush=True)
    time.sleep(120)
""")


@pytest.mark.parametrize("delay_s", ["0", "10"], ids=["idle", "mid-run"])
def test_no_worker_outlives_a_parent_killed_with_sigkill(tmp_path, delay_s):
    """Idle workers see their stdin close; a worker in a 200 s run sees its parent change."""
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    parent = subprocess.Popen([sys.executable, str(script), delay_s], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))
    try:
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and all(alive(p) for p in pids)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert wait_gone(pids) == []
    finally:
        parent.kill()
        parent.wait()


def scheduling(pid: int) -> set[tuple[int, int]]:
    """(policy, nice) of every thread of a process, from /proc (policy 5 is SCHED_IDLE)."""
    found = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        found.add((int(fields[38]), int(fields[16])))  # stat fields 41 (policy) and 19 (nice)
    return found


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE") or not Path("/proc/self/task").is_dir(), reason="Linux only")
@pytest.mark.parametrize(("priority", "expected"), [("idle", {(5, 0)}), ("low", {(0, 10)})])
def test_every_thread_of_a_worker_runs_below_the_server(priority, expected):
    pool = ProcessPoolEmbedder(ToyEncoder(), functools.partial(ToyEncoder), processes=2, priority=priority)
    try:
        pool.encode(TEXTS)
        pids = pool.worker_pids()
        assert len(pids) == 2 and all(len(list(Path(f"/proc/{p}/task").iterdir())) >= 2 for p in pids)
        assert all(scheduling(p) == expected for p in pids)
        assert scheduling(os.getpid()) == {(0, os.nice(0))}  # the parent's own threads are untouched
    finally:
        pool.close()


def test_an_unknown_priority_is_refused_before_any_worker_starts():
    with pytest.raises(OrgmemError, match="encoder_priority"):
        ProcessPoolEmbedder(ToyEncoder(), functools.partial(ToyEncoder), processes=2, priority="realtime")


@pytest.mark.slow
def test_onnx_workers_give_the_in_process_vectors(tmp_path_factory):
    from services.adapters.embedder.onnx_runtime import OnnxEmbedder

    local = OnnxEmbedder("all-MiniLM-L6-v2")
    texts = [*TEXTS, "ok", "Ünïcödé — résumé naïve café, 東京 🚀",
             " ".join(f"calibration step {i} of the rig in building {i % 7}" for i in range(120))]
    # Workers batch 16 texts where the process batches 64 (services.bootstrap.components.pooled).
    pool = ProcessPoolEmbedder(local, functools.partial(OnnxEmbedder, "all-MiniLM-L6-v2", batch_size=16), processes=2)
    try:
        pooled = pool.encode(texts)
        assert len(pool.worker_pids()) == 2
    finally:
        pool.close()
    assert pooled.dtype == np.float32 and pooled.shape == (len(texts), local.dim)
    np.testing.assert_allclose(pooled, local.encode(texts), rtol=0, atol=1e-6)

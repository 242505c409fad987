"""Sealed shards opened and searched in host processes (services/adapters/vector/qdrant_edge_host.py):
a host killed in the middle of a search fails that search alone and the next call starts
another; a shard that cannot be opened says why and leaves no process behind; a host's error is
the caller's error, with the pipes still in step afterwards."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from services.adapters.vector.qdrant_edge_tiers import TieredEdgeVectorIndex
from services.errors import BackendUnavailable, OrgmemError
from tests.adapters.test_vector_tiers import Truth, answers_match, processes_naming, tiered_rows, wait_until
from tests.contract.test_vector_index import DIM, EVERYTHING, unit


def sealed_index(folder: Path, rows: int = 120) -> tuple[TieredEdgeVectorIndex, Truth, np.ndarray]:
    rng = np.random.default_rng(21)
    made, vectors = tiered_rows(rows), unit(rng, rows)
    index = TieredEdgeVectorIndex(folder, DIM)
    index.upsert(made, vectors)
    index.optimize()
    truth = Truth()
    truth.upsert(made, vectors)
    return index, truth, unit(rng, 3)


def test_a_host_killed_mid_search_fails_that_search_alone_and_the_next_call_starts_another(tmp_path: Path) -> None:
    index, truth, queries = sealed_index(tmp_path / "tiers")
    try:
        host = index._tiers.sealed[0]
        first = host._process.pid
        os.kill(first, signal.SIGSTOP)  # the request is sent and waits: the host cannot answer it
        failed: list[BaseException] = []

        def search() -> None:
            try:
                index.search(queries[0], EVERYTHING, 10)
            except BaseException as exc:  # noqa: BLE001 - the test looks at it
                failed.append(exc)

        searching = threading.Thread(target=search)
        searching.start()
        wait_until(lambda: host._lock.locked(), timeout=10)
        os.kill(first, signal.SIGKILL)
        searching.join(timeout=5)
        assert not searching.is_alive()
        assert len(failed) == 1 and isinstance(failed[0], BackendUnavailable)
        assert "exited (-9) during search" in str(failed[0])
        # The next calls start a new host on the same folder and answer as before; writes too.
        assert answers_match(index, truth, queries) == []
        assert host._process.pid != first
        archived = truth.rows["r00004"].model_copy(update={"state": "archived"})
        index.update_state([archived])
        truth.update([archived])
        assert answers_match(index, truth, queries) == []
    finally:
        index.close()
    assert processes_naming(tmp_path / "tiers") == []


def test_a_host_found_dead_before_a_call_is_replaced_without_failing_it(tmp_path: Path) -> None:
    index, truth, queries = sealed_index(tmp_path / "tiers")
    try:
        host = index._tiers.sealed[0]
        first = host._process.pid
        os.kill(first, signal.SIGKILL)
        wait_until(lambda: host._process.poll() is not None, timeout=10)
        assert answers_match(index, truth, queries) == []
        assert host._process.pid != first
        status = index.graph_status()
        assert status["rows_in_graph"] == 120 and status["sealed_shards"] == 1
        assert status["shard_hosts_rss_bytes"] > 10 * 2**20  # the new host's, read from /proc
    finally:
        index.close()


def test_a_shard_that_cannot_be_opened_says_why_and_leaves_no_process(tmp_path: Path) -> None:
    index, _, _ = sealed_index(tmp_path / "tiers")
    index.close()
    with pytest.raises(OrgmemError, match=f"does not fit dim={DIM + 1}") as raised:
        TieredEdgeVectorIndex(tmp_path / "tiers", DIM + 1)
    assert not isinstance(raised.value, BackendUnavailable)  # the settings are wrong, not the engine
    assert processes_naming(tmp_path / "tiers") == []


def test_a_search_the_host_refuses_is_an_error_of_that_search_and_the_next_one_answers(tmp_path: Path) -> None:
    index, truth, queries = sealed_index(tmp_path / "tiers")
    try:
        host = index._tiers.sealed[0]
        with pytest.raises(BackendUnavailable, match="Qdrant Edge shard host"):
            with host.asking([0.0] * DIM, "not a scope", 10, False) as hits:  # type: ignore[arg-type]
                hits()
        assert answers_match(index, truth, queries) == []
        # An answer left unread is read on the way out: the next exchange gets its own answer.
        with host.asking(list(queries[0]), EVERYTHING, 5, False):
            pass
        assert host.count() == 120
    finally:
        index.close()


def test_closing_a_hung_host_kills_it_instead_of_hanging_the_server(tmp_path: Path, monkeypatch) -> None:
    import services.adapters.vector.qdrant_edge_host as host_module

    monkeypatch.setattr(host_module, "CLOSE_WAIT_S", 1)
    index, _, _ = sealed_index(tmp_path / "tiers")
    os.kill(index._tiers.sealed[0]._process.pid, signal.SIGSTOP)
    started = time.monotonic()
    index.close()
    assert time.monotonic() - started < 20
    assert processes_naming(tmp_path / "tiers") == []
    reopened = TieredEdgeVectorIndex(tmp_path / "tiers", DIM)  # every write was flushed when answered
    try:
        assert reopened.graph_status()["rows_in_graph"] == 120
    finally:
        reopened.close()


def two_sealed_shards(folder: Path) -> tuple[Truth, np.ndarray]:
    """A closed index of two sealed shards (120 and 60 rows) and the truth of its rows."""
    rng = np.random.default_rng(33)
    rows, vectors = tiered_rows(180), unit(rng, 180)
    truth = Truth()
    index = TieredEdgeVectorIndex(folder, DIM, seal_rows=50)
    try:
        for builds, lo in enumerate((0, 60, 120), start=1):
            index.upsert(rows[lo:lo + 60], vectors[lo:lo + 60])
            truth.upsert(rows[lo:lo + 60], vectors[lo:lo + 60])
            assert index.seal_if_due()
            wait_until(lambda b=builds: index.graph_status()["builds_done"] == b
                       and not index.graph_status()["builds_running"])
        assert [shard.count() for shard in index._tiers.sealed] == [120, 60]
    finally:
        index.close()
    return truth, unit(rng, 3)


def test_the_hosts_of_several_sealed_shards_open_at_once(tmp_path: Path, monkeypatch) -> None:
    """A start waits for the slowest host, not for their sum: each sealed shard's open waits at a
    barrier for the other's, which only opens at once can pass."""
    truth, queries = two_sealed_shards(tmp_path / "tiers")
    barrier = threading.Barrier(2, timeout=30)
    opening = TieredEdgeVectorIndex._shard

    def meeting(self, name: str):
        if name.startswith("s-"):
            barrier.wait()  # BrokenBarrierError here if the opens came one after the other
        return opening(self, name)

    monkeypatch.setattr(TieredEdgeVectorIndex, "_shard", meeting)
    index = TieredEdgeVectorIndex(tmp_path / "tiers", DIM)
    try:
        assert index.graph_status()["sealed_shards"] == 2
        assert answers_match(index, truth, queries) == []
    finally:
        index.close()


def test_a_sealed_shard_that_cannot_open_leaves_no_host_of_the_others(tmp_path: Path) -> None:
    truth, queries = two_sealed_shards(tmp_path / "tiers")
    broken = sorted((tmp_path / "tiers").glob("s-*"))[0]
    config = (broken / "edge_config.json").read_bytes()
    (broken / "edge_config.json").write_text("{not json")
    with pytest.raises(BackendUnavailable, match=f"{broken.name}: open failed"):
        TieredEdgeVectorIndex(tmp_path / "tiers", DIM)
    assert processes_naming(tmp_path / "tiers") == []  # the other shard's host was closed
    (broken / "edge_config.json").write_bytes(config)  # repaired, the folder opens complete
    index = TieredEdgeVectorIndex(tmp_path / "tiers", DIM)
    try:
        assert answers_match(index, truth, queries) == []
    finally:
        index.close()

"""The DataKeyStore contract, over SQLite and a real redis-server (with its AOF on): keys are
created once, destroyed for good (tombstones are final), and no file of the store keeps a
destroyed key's bytes."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from services.errors import Invalid


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _redis(folder: Path, appendonly: str = "yes"):
    port = _port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
                             "--appendonly", appendonly, "--appendfsync", "always", "--save", "60 1",
                             # Plain files, so that a test can look for key bytes in them.
                             "--aof-use-rdb-preamble", "no", "--rdbcompression", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            return proc, f"redis://127.0.0.1:{port}/0"
        except redis.ConnectionError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError("redis-server did not start")


@pytest.fixture(params=["sqlite", "redis"])
def store(request, tmp_path):
    if request.param == "sqlite":
        from services.adapters.key_store.data_keys_sqlite import SqliteDataKeyStore

        s = SqliteDataKeyStore(tmp_path / "data-keys.sqlite")
        yield s, tmp_path
        s.close()
        return
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not installed (apt-get install redis-server)")
    from services.adapters.key_store.data_keys_redis import RedisDataKeyStore

    proc, url = _redis(tmp_path)
    s = RedisDataKeyStore(url)
    yield s, tmp_path
    s.close()
    proc.terminate()
    proc.wait(timeout=10)


def _files_hold(folder: Path, secret: bytes) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and secret in p.read_bytes()]


def test_keys_are_created_once_and_read_back(store):
    s, _ = store
    first = s.obtain(["d.a", "s.b.0"])
    assert all(len(k) == 32 for k in first.values()) and first["d.a"] != first["s.b.0"]
    assert s.obtain(["d.a"]) == {"d.a": first["d.a"]}
    assert s.get(["d.a", "missing"]) == {"d.a": first["d.a"]}


def test_a_destroyed_key_is_gone_from_every_file_and_never_comes_back(store):
    s, folder = store
    keys = s.obtain([f"d.{i}" for i in range(50)])
    victim = keys["d.7"]
    assert s.destroy(["d.7", "d.never-made"], "erasure-1") == 1
    assert s.get(["d.7"]) == {} and s.obtain(["d.7"]) == {"d.7": None}
    assert s.destroyed(["d.7", "d.never-made", "d.8"]) == {"d.7", "d.never-made"}
    assert s.destroy(["d.7"], "erasure-2") == 0  # idempotent; the first tombstone stays
    assert s.get(["d.8"]) == {"d.8": keys["d.8"]}
    assert _files_hold(folder, victim) == []
    assert _files_hold(folder, keys["d.8"])  # the check can fail: a live key is in the files


def test_markers(store):
    s, _ = store
    assert s.marker("sealed_log") is None
    s.set_marker("sealed_log", "1")
    assert s.marker("sealed_log") == "1"


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server not installed")
def test_redis_without_its_append_only_file_is_refused(tmp_path):
    from services.adapters.key_store.data_keys_redis import RedisDataKeyStore

    proc, url = _redis(tmp_path, appendonly="no")
    try:
        with pytest.raises(Invalid, match="appendonly"):
            RedisDataKeyStore(url)
    finally:
        proc.terminate()
        proc.wait(timeout=10)

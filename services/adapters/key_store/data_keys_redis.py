"""The cluster profile's data keys, in Redis with the append-only file on.

Why Redis: the cluster already runs it (the Celery broker), every API and indexer process can
reach it, a script creates a key only where no tombstone exists in one atomic step, and an AOF
rewrite drops a deleted key's bytes from the file for good. Elasticsearch, the other shared
store, holds the plaintext rows the keys protect (keys should not live beside them), and keeps a
deleted document in its translog and segments until merges happen to reach it.

Durability: a key must be on disk before anything is sealed under it, so the store refuses a
server whose `appendonly` is off; run it with `appendfsync always` (or accept that the last
second of keys, and the documents sealed under them, can be lost with the server).

Layout: hash `<prefix>:data-keys` (id -> 32 key bytes), hash `<prefix>:destroyed-keys`
(id -> "time erasure-id", never deleted), hash `<prefix>:meta`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import redis

from services.errors import BackendUnavailable, Invalid

log = logging.getLogger(__name__)

COMPONENT = "data key store (redis)"
KEY_BYTES = 32
_CHUNK = 500

# KEYS: data-keys, destroyed-keys. ARGV: id1, candidate1, id2, candidate2, ...
# Returns, per id, its key, or false where a tombstone exists.
_OBTAIN = """
local out = {}
for i = 1, #ARGV, 2 do
  if redis.call('HEXISTS', KEYS[2], ARGV[i]) == 1 then
    out[#out + 1] = false
  else
    redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1])
    out[#out + 1] = redis.call('HGET', KEYS[1], ARGV[i])
  end
end
return out
"""
# KEYS: data-keys, destroyed-keys. ARGV: stamp, id1, id2, ... Returns how many live keys went.
_DESTROY = """
local n = 0
for i = 2, #ARGV do
  n = n + redis.call('HDEL', KEYS[1], ARGV[i])
  redis.call('HSETNX', KEYS[2], ARGV[i], ARGV[1])
end
return n
"""


def _chunks(ids: Sequence[str]):
    ids = list(dict.fromkeys(ids))
    for start in range(0, len(ids), _CHUNK):
        yield ids[start : start + _CHUNK]


class RedisDataKeyStore:
    def __init__(self, url: str, prefix: str = "orgmem", client: redis.Redis | None = None,
                 rewrite_timeout_s: float = 60.0):
        self._client = client or redis.Redis.from_url(url, socket_timeout=10)
        self._keys, self._dead, self._meta = f"{prefix}:data-keys", f"{prefix}:destroyed-keys", f"{prefix}:meta"
        self.rewrite_timeout_s = rewrite_timeout_s
        with self._driver("connect"):
            self._obtain = self._client.register_script(_OBTAIN)
            self._destroy = self._client.register_script(_DESTROY)
            self._require_aof()

    def _driver(self, action: str):
        return _Translated(action)

    def _require_aof(self) -> None:
        try:
            appendonly = self._client.config_get("appendonly").get("appendonly")
        except redis.ResponseError:  # CONFIG is disabled (managed Redis): its operator vouches for it
            log.warning("%s: cannot read the server's appendonly setting; keys are durable only with AOF on", COMPONENT)
            return
        if appendonly != "yes":
            raise Invalid(f"{COMPONENT}: the Redis server runs without its append-only file (appendonly {appendonly}); "
                          "data keys must survive a restart: start it with --appendonly yes --appendfsync always")

    def obtain(self, key_ids: Sequence[str]) -> dict[str, bytes | None]:
        found: dict[str, bytes | None] = {}
        with self._driver("obtain"):
            for chunk in _chunks(key_ids):
                argv: list = []
                for key_id in chunk:
                    argv += [key_id, os.urandom(KEY_BYTES)]
                values = self._obtain(keys=[self._keys, self._dead], args=argv)
                found.update({k: (bytes(v) if v else None) for k, v in zip(chunk, values, strict=True)})
        return found

    def get(self, key_ids: Sequence[str]) -> dict[str, bytes]:
        found: dict[str, bytes] = {}
        with self._driver("get"):
            for chunk in _chunks(key_ids):
                found.update({k: bytes(v) for k, v in zip(chunk, self._client.hmget(self._keys, chunk), strict=True) if v})
        return found

    def destroy(self, key_ids: Sequence[str], erasure_id: str) -> int:
        stamp = f"{datetime.now(UTC).isoformat()} {erasure_id}"
        destroyed = 0
        with self._driver("destroy"):
            for chunk in _chunks(key_ids):
                destroyed += int(self._destroy(keys=[self._keys, self._dead], args=[stamp, *chunk]))
            self._compact()
        return destroyed

    def _compact(self) -> None:
        """Rewrite the AOF (and the RDB snapshot where one is kept) so that no file of the server
        still holds a destroyed key's bytes; wait for the rewrite to finish."""
        try:
            self._client.bgrewriteaof()
        except redis.ResponseError as exc:  # one already running: wait for it, then ours
            if "already" not in str(exc).lower():
                raise
        self._wait("aof_rewrite_in_progress", "aof_rewrite_scheduled")
        if self._client.config_get("save").get("save"):
            try:
                self._client.bgsave()
            except redis.ResponseError as exc:
                if "already" not in str(exc).lower():
                    raise
            self._wait("rdb_bgsave_in_progress")

    def _wait(self, *flags: str) -> None:
        deadline = time.monotonic() + self.rewrite_timeout_s
        while time.monotonic() < deadline:
            info = self._client.info("persistence")
            if not any(int(info.get(flag, 0)) for flag in flags):
                return
            time.sleep(0.05)
        raise BackendUnavailable(COMPONENT, f"the server did not finish rewriting its files within {self.rewrite_timeout_s:g} s")

    def destroyed(self, key_ids: Sequence[str]) -> set[str]:
        dead: set[str] = set()
        with self._driver("destroyed"):
            for chunk in _chunks(key_ids):
                dead.update(k for k, v in zip(chunk, self._client.hmget(self._dead, chunk), strict=True) if v)
        return dead

    def marker(self, name: str) -> str | None:
        with self._driver("marker"):
            value = self._client.hget(self._meta, name)
        return value.decode() if value is not None else None

    def set_marker(self, name: str, value: str) -> None:
        with self._driver("set marker"):
            self._client.hset(self._meta, name, value)

    def close(self) -> None:
        self._client.close()


class _Translated:
    """Redis's connection and server errors become BackendUnavailable (503 naming the store)."""

    def __init__(self, action: str):
        self.action = action

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, tb):
        if isinstance(exc, redis.RedisError):
            raise BackendUnavailable(COMPONENT, f"{self.action}: {type(exc).__name__}: {exc}") from exc
        return False
